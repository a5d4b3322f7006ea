"""The capture transports: the gateway's one network seam.

A capture transport wraps the real transport of an ``httpx2`` (what the current openai and
anthropic SDKs use) or ``httpx`` client. For each request it

1. reads the request body (``request.read()``; the same bytes then go on the wire) and
   computes ``content_key`` over them before anything is sent;
2. sends the request through the wrapped transport, unchanged;
3. returns a response with the same status, headers and extensions whose body stream is a
   tee: every raw chunk the application reads is also kept, and when the body ends, fails,
   or is closed, the finished :class:`~gateway.capture.Exchange` goes to the sink.

A request that gets no response (connect error, timeout, cancellation) is handed to the sink
with the exception's description, and the original exception is re-raised untouched.
The sink never raises into the application: failures on the capture side are logged and
counted by the Recorder, and a failure inside this module falls back to the plain call.
"""

from __future__ import annotations

import functools
import logging
import time
from types import ModuleType
from typing import Any, AsyncIterator, Callable, Iterator

from evidence_contract import content_key, now_micros

from .capture import Exchange

__all__ = ["FLAVORS", "Sink", "transport_classes"]

log = logging.getLogger(__name__)

Sink = Callable[[Exchange], None]
"""Receives each finished exchange; must not raise (the transport guards it anyway)."""

FLAVORS = ("httpx2", "httpx")


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Call:
    """The capture state of one request; finishes exactly once."""

    def __init__(self, exchange: Exchange, sink: Sink, on_error: Callable[[BaseException], None]):
        self.exchange = exchange
        self._sink = sink
        self._on_error = on_error
        self._t0 = time.monotonic()
        self._done = False

    def respond(self, response: Any) -> None:
        ex = self.exchange
        headers = response.headers
        ex.status = response.status_code
        ex.content_type = headers.get("content-type")
        ex.content_encoding = headers.get("content-encoding")
        length = headers.get("content-length")
        ex.content_length = int(length) if length and length.isdigit() else None

    def chunk(self, data: bytes) -> None:
        self.exchange.chunks.append(bytes(data))

    def finish(self, *, eof: bool = False, closed: bool = False,
               error: BaseException | None = None) -> None:
        if self._done:
            return
        self._done = True
        try:
            ex = self.exchange
            ex.eof, ex.closed_by_app = eof, closed
            ex.error = _describe(error) if error is not None else None
            ex.finished_at = now_micros()
            ex.duration_us = int((time.monotonic() - self._t0) * 1_000_000)
            self._sink(ex)
        except Exception as e:  # noqa: BLE001 - never into the application
            self._on_error(e)


def _begin(request: Any, body: bytes, stream: str, policy: str, sink: Sink,
           on_error: Callable[[BaseException], None]) -> _Call:
    # content_key first: the identity of the call is fixed before any byte leaves.
    key = content_key(body)
    url = request.url
    headers = {k.lower(): v for k, v in request.headers.items()
               if k.lower() in ("anthropic-version", "openai-version")}
    ex = Exchange(
        stream=stream, request_policy=policy, content_key=key, request_bytes=body,
        url=str(url.copy_with(query=None)), host=url.host, path=url.path,
        started_at=now_micros(), request_headers=headers,
        query={k: v for k, v in url.params.items() if k == "api-version"},
    )
    return _Call(ex, sink, on_error)


@functools.cache
def transport_classes(flavor: str) -> tuple[type, type]:
    """The (sync, async) capture transport classes for ``flavor`` ("httpx2" or "httpx")."""
    if flavor == "httpx2":
        import httpx2 as mod
    elif flavor == "httpx":
        import httpx as mod
    else:
        raise ValueError(f"unknown flavor {flavor!r}; expected one of {FLAVORS}")
    return _build(mod)


def _build(mod: ModuleType) -> tuple[type, type]:

    class TeeStream(mod.SyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any, call: _Call) -> None:
            self._inner, self._call = inner, call

        def __iter__(self) -> Iterator[bytes]:
            try:
                for chunk in self._inner:
                    self._call.chunk(chunk)
                    yield chunk
            except GeneratorExit:
                raise  # the reader stopped; close() records it
            except BaseException as e:
                self._call.finish(error=e)
                raise
            self._call.finish(eof=True)

        def close(self) -> None:
            try:
                self._call.finish(closed=True)
            finally:
                self._inner.close()

    class AsyncTeeStream(mod.AsyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any, call: _Call) -> None:
            self._inner, self._call = inner, call

        async def __aiter__(self) -> AsyncIterator[bytes]:
            try:
                async for chunk in self._inner:
                    self._call.chunk(chunk)
                    yield chunk
            except GeneratorExit:
                raise
            except BaseException as e:
                self._call.finish(error=e)
                raise
            self._call.finish(eof=True)

        async def aclose(self) -> None:
            try:
                self._call.finish(closed=True)
            finally:
                await self._inner.aclose()

    def rewrap(response: Any, stream: Any) -> Any:
        # A new Response around the same status/headers/extensions: the original may have
        # read its body already (a ByteStream), and then the client would never pull ours.
        return mod.Response(status_code=response.status_code, headers=response.headers,
                            stream=stream, extensions=response.extensions)

    class CaptureTransport(mod.BaseTransport):  # type: ignore[name-defined,misc]
        """Sync capture transport around ``inner`` (default: the flavor's HTTPTransport)."""

        def __init__(self, inner: Any, stream: str, policy: str, sink: Sink,
                     on_error: Callable[[BaseException], None]) -> None:
            self._inner = inner if inner is not None else mod.HTTPTransport()
            self._stream, self._policy, self._sink, self._on_error = stream, policy, sink, on_error

        def handle_request(self, request: Any) -> Any:
            call = None
            try:
                call = _begin(request, request.read(), self._stream, self._policy, self._sink,
                              self._on_error)
            except Exception as e:  # noqa: BLE001
                self._on_error(e)
            try:
                response = self._inner.handle_request(request)
            except BaseException as e:
                if call is not None:
                    call.finish(error=e)
                raise
            if call is None:
                return response
            try:
                call.respond(response)
                return rewrap(response, TeeStream(response.stream, call))
            except Exception as e:  # noqa: BLE001
                self._on_error(e)
                return response

        def close(self) -> None:
            self._inner.close()

    class AsyncCaptureTransport(mod.AsyncBaseTransport):  # type: ignore[name-defined,misc]
        """Async capture transport around ``inner`` (default: AsyncHTTPTransport)."""

        def __init__(self, inner: Any, stream: str, policy: str, sink: Sink,
                     on_error: Callable[[BaseException], None]) -> None:
            self._inner = inner if inner is not None else mod.AsyncHTTPTransport()
            self._stream, self._policy, self._sink, self._on_error = stream, policy, sink, on_error

        async def handle_async_request(self, request: Any) -> Any:
            call = None
            try:
                call = _begin(request, await request.aread(), self._stream, self._policy,
                              self._sink, self._on_error)
            except Exception as e:  # noqa: BLE001
                self._on_error(e)
            try:
                response = await self._inner.handle_async_request(request)
            except BaseException as e:
                if call is not None:
                    call.finish(error=e)
                raise
            if call is None:
                return response
            try:
                call.respond(response)
                return rewrap(response, AsyncTeeStream(response.stream, call))
            except Exception as e:  # noqa: BLE001
                self._on_error(e)
                return response

        async def aclose(self) -> None:
            await self._inner.aclose()

    name = mod.__name__
    for cls in (TeeStream, AsyncTeeStream, CaptureTransport, AsyncCaptureTransport):
        cls.__qualname__ = f"{cls.__name__}[{name}]"
    return CaptureTransport, AsyncCaptureTransport
