"""Request limits: a size per route and a deadline for the body, before anything buffers; and
how many expensive requests one API key may have in progress (:class:`PerKeyLimit`).

:class:`BodyLimitMiddleware` is pure ASGI and sits outside the routes, so a handler that calls
``await request.body()`` never holds more than its route's limit (plus one chunk):

1. A ``Content-Length`` over the limit is answered 413 at once; the app is not called and not
   one byte of the body is read.
2. A body without a length (chunked) is counted as it is received; the chunk that crosses the
   limit raises :class:`~api.errors.PayloadTooLarge`, which the app's error handler answers.
3. The whole body must arrive within ``body_timeout`` seconds of the request head, else 408:
   a client trickling a body one byte at a time holds a connection only that long.

Both answers carry ``Connection: close``; after a 413 on the header, up to 1 MiB of what the
client is still sending is read and discarded for at most 1 s, so it sees the answer rather
than a connection reset.
The limits, from :class:`~api.config.Settings` (``EVIDENCE_API_MAX_BODY_BYTES`` and
``EVIDENCE_API_MAX_VERIFY_BYTES``), are looked up by the request's method and path: the only
route with a limit of its own is ``POST /replay/verify``, whose ``replayed_response_b64`` is a
whole response body in base64 (4/3 of its size).

An expensive route (``GET /streams/{s}/audit``: one pooled connection for the whole stream,
and CPU for every record) holds a :class:`PerKeyLimit` slot while it runs: a key with its
limit already in progress is answered 429 ``too_many_requests`` with Retry-After at once,
before the request takes a database connection, so one tenant's audits can hold at most that
many of the pool and another tenant's reads still find a connection (without it, 200
concurrent audits of one stream exhausted the pool: 503s, for every key).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, AsyncIterator, Mapping

from .errors import PayloadTooLarge, RequestTimeout, TooManyRequests
from .responses import error_response

__all__ = ["BodyLimitMiddleware", "PerKeyLimit", "too_large_message"]


class PerKeyLimit:
    """At most ``limit`` requests of one kind in progress per API key, in this process.

    One more is refused at once (:class:`~api.errors.TooManyRequests`: 429, Retry-After),
    never queued: a queue would keep the client's connection and the server's memory busy,
    and a client told when to come back can choose. Counting needs no lock: the check and
    the increment run with no ``await`` between them, on the one event loop of the process.
    Each server process (``EVIDENCE_API_WORKERS``) counts its own, so a key may have up to
    ``workers × limit`` in progress over the whole API."""

    def __init__(self, what: str, limit: int, setting: str, retry_after: int = 2) -> None:
        if limit < 1:
            raise ValueError(f"{setting} must be at least 1, not {limit}")
        self.what, self.limit, self.setting = what, limit, setting
        self.retry_after = retry_after
        self._active: dict[bytes, int] = {}

    def active(self, key: Any) -> int:
        """How many of this kind ``key`` (an :class:`~api.auth.ApiKey`) has in progress."""
        return self._active.get(key.digest, 0)

    @contextlib.asynccontextmanager
    async def hold(self, key: Any) -> AsyncIterator[None]:
        """A slot of ``key``'s for the body of the ``async with``; 429 when it has none."""
        ident = key.digest
        held = self._active.get(ident, 0)
        if held >= self.limit:
            raise TooManyRequests(
                f"API key {key.name!r} already has {held} {self.what} in progress, its limit "
                f"in this server process ({self.setting}={self.limit}); retry once one has "
                f"finished", self.limit, self.setting, self.retry_after)
        self._active[ident] = held + 1
        try:
            yield
        finally:
            left = self._active[ident] - 1
            if left:
                self._active[ident] = left
            else:
                del self._active[ident]


def too_large_message(limit: int, method: str, path: str) -> str:
    return (f"the request body is over the {limit}-byte limit of {method} {path}; "
            f"see the route's description for its limit and the setting that raises it")


class BodyLimitMiddleware:
    """``limits`` maps ``(method, path)`` to a byte limit; every other request gets
    ``default``."""

    def __init__(self, app: Any, default: int, limits: Mapping[tuple[str, str], int],
                 body_timeout: float) -> None:
        self.app = app
        self.default = default
        self.limits = dict(limits)
        self.body_timeout = body_timeout

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        limit = self.limits.get((method, path), self.default)
        declared = _content_length(scope["headers"])
        if declared is not None and declared > limit:
            # 1. Refused on the header alone: the app never runs, the body is never read.
            response = error_response(413, PayloadTooLarge.code,
                                      too_large_message(limit, method, path),
                                      {"Connection": "close"})
            await response(scope, receive, send)
            await _linger(receive)
            return

        deadline = time.monotonic() + self.body_timeout
        received = 0
        more = True

        async def limited_receive() -> dict:
            nonlocal received, more
            if not more:  # the body is complete: what comes now is http.disconnect
                return await receive()
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError
                message = await asyncio.wait_for(receive(), remaining)
            except TimeoutError:
                # 3. The body is late: the handler gets an error, never a partial body.
                raise RequestTimeout(f"the request body did not arrive within "
                                     f"{self.body_timeout:g} s") from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                more = message.get("more_body", False)
                if received > limit:
                    # 2. Counted: at most one chunk past the limit was ever held.
                    raise PayloadTooLarge(too_large_message(limit, method, path))
            else:
                more = False
            return message

        await self.app(scope, limited_receive, send)


_LINGER_BYTES, _LINGER_S = 1024 * 1024, 1.0


async def _linger(receive: Any) -> None:
    """Read and discard what the client is still sending, at most 1 MiB for at most 1 s, so a
    client that sent its body at once reads the 413 instead of a connection reset (closing a
    socket with unread data resets it). Nothing is kept: memory stays bounded."""
    deadline = time.monotonic() + _LINGER_S
    drained = 0
    while drained < _LINGER_BYTES:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        try:
            message = await asyncio.wait_for(receive(), remaining)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - the client went: done
            return
        if message.get("type") != "http.request":
            return
        drained += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The declared body length; None when absent. The HTTP server has already refused a
    malformed or repeated one (h11 answers 400), so a value here is digits."""
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
