"""What every page route shares: templates, security headers, the session, forms.

- :func:`render` answers a template as HTML. The environment autoescapes every template and
  every value, so nothing a record holds is ever markup; templates reach only what is passed.
- :class:`PageRoute`, the route class of every pages router: its answers carry
  :data:`SECURITY_HEADERS` (a Content-Security-Policy without inline script or style, no
  framing, nosniff, a same-origin Referer, no caching), and an error is a page, not JSON: a
  missing, malformed or out-of-scope path is the same 404 page, an :class:`~api.errors.ApiError`
  its status with its message, a request without a session a redirect to the login page.
- :data:`Visitor`: the dependency that gives a page route the browser's
  :class:`~api.pages.sessions.Session` (and so its :class:`~api.auth.ApiKey`: ``visitor.key``,
  the same scope as the JSON API's ``Caller``), read from the session store in PostgreSQL
  (:mod:`api.pages.session_table`) once per request.
- :func:`posted_form`: a POST's ``application/x-www-form-urlencoded`` fields, once the
  request has passed the CSRF checks of :mod:`api.pages.csrf` (403 page otherwise).

:data:`PREFIX` is where the pages live (``/ui``); :data:`NAV` the links of the header.
"""

from __future__ import annotations

from importlib import resources
from typing import Annotated, Any, Awaitable, Callable
from urllib.parse import parse_qsl, quote

from fastapi import Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.exceptions import HTTPException as StarletteHTTPException

from server.logs import event_logger

from ..errors import ApiError
from .csrf import LoginTokens, origin_problem, token_matches
from .session_table import PostgresSessionStore
from .sessions import COOKIE, Session, SessionStore

__all__ = ["NAV", "PREFIX", "SECURITY_HEADERS", "Forbidden", "LoginRequired", "PageError",
           "PageRoute", "Visitor", "login_tokens", "page_session", "posted_form", "render",
           "sessions", "templates"]

log = event_logger("evidence.api")

PREFIX = "/ui"
"""The pages' path prefix: ``/ui/`` is the streams page."""

NAV: tuple[tuple[str, str], ...] = (
    (f"{PREFIX}/", "Streams"),
    (f"{PREFIX}/verify", "Verify a replay"),
    (f"{PREFIX}/fidelity", "Fidelity"),
    (f"{PREFIX}/audit", "Audit"),
)
"""The header's links, in order: (path, label)."""

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")

SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
    "Cache-Control": "no-store",
}
"""On every page and static file."""

_TEMPLATES = resources.files("api.pages") / "templates"

templates = Environment(
    loader=FileSystemLoader(str(_TEMPLATES)),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
"""The pages' Jinja2 environment: autoescaping on for every template."""
templates.globals.update(prefix=PREFIX, nav=NAV, quote=lambda s: quote(str(s), safe=""))


class PageError(Exception):
    """An answer other than the page asked for: ``status`` and a sentence for the reader."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class Forbidden(PageError):
    """403: a form that failed its CSRF checks."""

    def __init__(self, message: str) -> None:
        super().__init__(403, message)


class LoginRequired(Exception):
    """No live session: the page redirects to the login page."""


def sessions(request: Request) -> SessionStore:
    """The app's session store, made on first use (no state at import): in PostgreSQL, the
    same for every server process, unless one was set on ``app.state.page_sessions``."""
    state = request.app.state
    store = getattr(state, "page_sessions", None)
    if store is None:
        store = state.page_sessions = PostgresSessionStore(state.db, state.settings.keyring)
    return store


async def login_tokens(request: Request) -> LoginTokens:
    """The login forms' tokens, signed with the session store's secret (every process's)."""
    state = request.app.state
    tokens = getattr(state, "page_login_tokens", None)
    if tokens is None:
        tokens = state.page_login_tokens = LoginTokens(
            secret=await sessions(request).login_secret())
    return tokens


_UNREAD = object()


async def current_session(request: Request) -> Session | None:
    """The request's live session, or None (no cookie, unknown, expired); read once a
    request."""
    session = getattr(request.state, "page_session", _UNREAD)
    if session is _UNREAD:  # None is an answer too: no session
        session = request.state.page_session = await sessions(request).get(
            request.cookies.get(COOKIE))
    return session


async def page_session(request: Request) -> Session:
    session = await current_session(request)
    if session is None:
        raise LoginRequired()
    return session


Visitor = Annotated[Session, Depends(page_session)]


def render(request: Request, template: str, status: int = 200,
           session: Session | None = None, **context: Any) -> HTMLResponse:
    """``template`` rendered with ``context`` (plus the session, for the header's logout
    form and the CSRF token of every form) as an HTML answer."""
    html = templates.get_template(template).render(
        session=session, path=request.url.path, **context)
    return HTMLResponse(html, status_code=status)


async def error_page(request: Request, status: int, message: str) -> HTMLResponse:
    try:
        session = await current_session(request)
    except ApiError:  # the database is away: the error page without the header's logout
        session = None
    titles = {400: "Bad request", 401: "Not logged in", 403: "Refused", 404: "Not found",
              409: "Conflict", 410: "Erased", 413: "Too large", 422: "Bad request",
              429: "Too many requests", 503: "Unavailable"}
    return render(request, "error.html", status, session,
                  title=titles.get(status, "Error"), code=status, message=message)


async def not_found_page(request: Request) -> HTMLResponse:
    """The one 404 page: a missing record and one outside the key's streams look alike."""
    return await error_page(request, 404, "There is nothing here that this API key may read.")


def _login_redirect(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"{PREFIX}/login?next={quote(target, safe='')}", status_code=303)


class PageRoute(APIRoute):
    """A page: security headers on every answer, errors as pages (module docstring)."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()

        async def page(request: Request) -> Response:
            try:
                response = await handler(request)
            except LoginRequired:
                response = _login_redirect(request)
            except RequestValidationError:
                response = await not_found_page(request)  # a malformed path names nothing
            except PageError as e:
                response = (await not_found_page(request) if e.status == 404
                            else await error_page(request, e.status, e.message))
            except ApiError as e:
                response = (await not_found_page(request) if e.status == 404
                            else await error_page(request, e.status, e.message))
                for name, value in (e.headers or {}).items():
                    if name.lower() == "retry-after":
                        response.headers[name] = value
            except StarletteHTTPException as e:
                response = (await not_found_page(request) if e.status_code == 404
                            else await error_page(request, e.status_code, str(e.detail)))
            except Exception as e:  # noqa: BLE001 - a page, never a traceback
                log("error", "page_error", path=request.url.path, exc_info=e)
                response = await error_page(request, 500, "Internal error; the API log has the "
                                                          "details.")
            response.headers.update(SECURITY_HEADERS)
            return response

        return page


async def posted_form(request: Request, session: Session | None) -> dict[str, str]:
    """The fields of a POSTed form (the last value of a repeated name), once it has passed
    the CSRF checks: its Origin/Referer is this host, and its ``csrf`` field is the
    session's token (with ``session`` None, a login token this process signed)."""
    require_same_origin(request)
    if media_type(request) != "application/x-www-form-urlencoded":
        raise PageError(415, "A form must be sent as application/x-www-form-urlencoded.")
    raw = await request.body()
    try:
        fields = dict(parse_qsl(raw.decode("utf-8"), keep_blank_values=True,
                                strict_parsing=False, max_num_fields=100))
    except (UnicodeDecodeError, ValueError):
        raise PageError(400, "The form's fields are not valid URL-encoded UTF-8.") from None
    token = fields.get("csrf")
    ok = (token_matches(session.csrf, token) if session is not None
          else (await login_tokens(request)).valid(token))
    if not ok:
        raise Forbidden(CSRF_REFUSED)
    return fields


CSRF_REFUSED = ("Refused: the form's CSRF token is missing or not this session's. "
                "Reload the page and send the form again.")


def require_same_origin(request: Request) -> None:
    """The first CSRF check of every posted form: its Origin (or Referer) is this host."""
    problem = origin_problem(request.headers, request.headers.get("host"))
    if problem is not None:
        raise Forbidden(f"Refused: {problem}. Reload the page and send the form again.")


def media_type(request: Request) -> str:
    """The request's Content-Type without its parameters, in lower case."""
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
