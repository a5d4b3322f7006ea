"""Pages for people, served by the API process under ``/ui/`` (docs/pages.md).

Server-rendered HTML (Jinja2, autoescaped), one stylesheet, no JavaScript; the same API keys
and stream scopes as the JSON API, the key entered once on a login page and kept on the
server (the browser holds a session id in an HttpOnly, Secure, SameSite=Strict cookie).

    web            what every page route shares: :func:`~api.pages.web.render`, the route
                   class :class:`~api.pages.web.PageRoute` (security headers, errors as
                   pages), the session dependency ``Visitor``, :func:`posted_form` (CSRF)
    sessions       what a session is and a store offers, the in-memory store (pure)
    session_table  the session store in PostgreSQL, shared by every server process
    csrf           Origin/Referer and synchronizer-token checks (pure)
    bodies         a request or response body as text, JSON, SSE events or hex (pure)
    verification   a record's verification step by step, over the contract's checks (pure)
    queries        the read-model questions only the pages ask
    login          GET/POST /ui/login, POST /ui/logout
    streams        GET /ui/, /ui/streams/{stream}, /ui/search
    record         GET /ui/streams/{stream}/records/{seq} and its /bundle download
    toolbox        /ui/verify, /ui/fidelity, /ui/audit: a replay verified, replay fidelity,
                   a stream's audit with progress, each by its JSON route's own handler
    fallback       any other /ui/ path: the 404 page

:func:`install` adds them to an app (``api.app.create_app`` calls it): the static files at
``/ui/static/``, :data:`ROUTERS` in order, the fallback last. A page of another module is an
``APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)`` added to
:data:`ROUTERS`, its templates extending ``base.html``.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from fastapi.staticfiles import StaticFiles

from . import fallback, login, record, streams, toolbox
from .web import PREFIX, SECURITY_HEADERS

__all__ = ["PREFIX", "ROUTERS", "install"]

ROUTERS = (login.router, streams.router, record.router, toolbox.router)
"""The pages' routers, in the order they are matched (the fallback comes after them all)."""


class _Static(StaticFiles):
    """The pages' static files, with the pages' security headers."""

    def file_response(self, *args: Any, **kwargs: Any) -> Any:
        response = super().file_response(*args, **kwargs)
        response.headers.update({**SECURITY_HEADERS, "Cache-Control": "public, max-age=3600"})
        return response


def install(app: Any) -> None:
    """Serve the pages from ``app``: static files, :data:`ROUTERS`, then the fallback."""
    app.mount(f"{PREFIX}/static", _Static(directory=str(resources.files(__name__) / "static")),
              name="pages-static")
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(fallback.router)
