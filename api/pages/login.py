"""Logging in and out of the pages.

    GET  /ui/login     the form: an API key, entered once per browser session
    POST /ui/login     the key checked against the keyring; a session, its id in a cookie
    POST /ui/logout    the session deleted, the cookie removed

The key is looked up at login and not kept (:mod:`api.pages.sessions`); a wrong key is the
form again with a 401, saying so and nothing else. ``next`` (where the browser was going) is
followed only when it is a path of the pages, never another site.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse

from .sessions import COOKIE, cookie_header, expired_cookie_header
from .web import (
    PREFIX, PageRoute, Visitor, current_session, login_tokens, posted_form, render, sessions,
)

__all__ = ["router", "safe_next"]

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)


def safe_next(target: str | None) -> str:
    """``target`` when it is a path of the pages (not ``//host``, not a URL), else /ui/."""
    if (not target or not target.startswith(PREFIX + "/") or target.startswith("//")
            or "\\" in target or any(ord(c) < 0x20 for c in target)):
        return f"{PREFIX}/"
    return target


@router.get("/login")
async def login_form(request: Request, next: Annotated[str | None, Query(  # noqa: A002
        max_length=2000)] = None) -> Response:
    session = await current_session(request)
    if session is not None:
        return RedirectResponse(safe_next(next), status_code=303)
    return render(request, "login.html", token=(await login_tokens(request)).issue(),
                  next=safe_next(next), problem=None)


@router.post("/login")
async def login(request: Request) -> Response:
    fields = await posted_form(request, None)
    target = safe_next(fields.get("next"))
    key = request.app.state.settings.keyring.lookup(fields.get("key", "").strip())
    if key is None:
        return render(request, "login.html", 401, token=(await login_tokens(request)).issue(),
                      next=target, problem="That API key is not one this API knows.")
    store = sessions(request)
    await store.end(request.cookies.get(COOKIE))  # a login replaces the browser's session
    response = RedirectResponse(target, status_code=303)
    response.headers["Set-Cookie"] = cookie_header(await store.start(key), int(store.absolute))
    return response


@router.post("/logout")
async def logout(request: Request, visitor: Visitor) -> Response:
    await posted_form(request, visitor)
    await sessions(request).end(request.cookies.get(COOKIE))
    response = RedirectResponse(f"{PREFIX}/login", status_code=303)
    response.headers["Set-Cookie"] = expired_cookie_header()
    return response
