"""Cross-site request forgery: what every state-changing form must pass (pure).

Two checks, both required on every POST of the pages:

1. **Origin.** The request's ``Origin`` header (or, without one, its ``Referer``) names this
   very host: :func:`origin_problem`. A browser always sends ``Origin`` on a cross-site POST,
   so a form on another site is refused even before the token is looked at; a POST naming
   neither header is refused too (a browser sends at least one on a same-origin form).
2. **Synchronizer token.** The form carries the token of the session it is posted in
   (``csrf``, a hidden field the templates put in every form), compared in constant time
   (:func:`token_matches`). The login form has no session yet: it carries a token the
   server signed (:class:`LoginTokens`: an HMAC of its issue time under the session store's
   key, the same in every server process, good for an hour), so a login cannot be posted
   from a page this server did not serve.

GET never changes state, so it needs neither. The session cookie is SameSite=Strict as a
third line: a cross-site request does not carry it at all.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import Callable, Mapping
from urllib.parse import urlsplit

__all__ = ["LOGIN_TOKEN_SECONDS", "LoginTokens", "origin_problem", "token_matches"]

LOGIN_TOKEN_SECONDS = 60 * 60
"""How long a login form stays good."""


def _netloc(url: str) -> str | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return parts.netloc.lower()


def origin_problem(headers: Mapping[str, str], host: str | None) -> str | None:
    """Why a POST with these headers is not from this site (``host``: its ``Host`` header),
    or None when its Origin (else its Referer) is this host."""
    if not host:
        return "the request names no Host"
    origin = headers.get("origin")
    if origin is not None and origin != "null":
        where, named = _netloc(origin), "Origin"
    elif headers.get("referer"):
        where, named = _netloc(headers["referer"]), "Referer"
    else:
        return "the form was sent without an Origin or Referer header"
    if where != host.lower():
        return f"the form was sent from another site (its {named} is not this host)"
    return None


def token_matches(expected: str, given: str | None) -> bool:
    """Whether the form's token is the session's, in constant time."""
    if not given:
        return False
    return hmac.compare_digest(expected.encode("utf-8"), given.encode("utf-8", "replace"))


class LoginTokens:
    """Tokens of the login form: ``<issued>.<hmac>`` under a key of this process."""

    def __init__(self, *, ttl: float = LOGIN_TOKEN_SECONDS,
                 clock: Callable[[], float] = time.time, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)
        self.ttl, self._clock = ttl, clock

    def _mac(self, issued: str) -> str:
        return hmac.new(self._secret, issued.encode("ascii"), hashlib.sha256).hexdigest()

    def issue(self) -> str:
        issued = str(int(self._clock()))
        return f"{issued}.{self._mac(issued)}"

    def valid(self, token: str | None) -> bool:
        issued, _, mac = (token or "").partition(".")
        if not issued.isdigit() or len(issued) > 12 or not mac:
            return False
        if not hmac.compare_digest(self._mac(issued).encode(), mac.encode("utf-8", "replace")):
            return False
        return 0 <= self._clock() - int(issued) <= self.ttl
