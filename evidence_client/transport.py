"""The capture transports: the gateway's one network seam.

A capture transport wraps the real transport of an ``httpx2`` (what the current openai and
anthropic SDKs use) or ``httpx`` client. For each request it

1. reads the request body (``request.read()``; the same bytes then go on the wire) and
   computes ``content_key`` over them before anything is sent;
2. sends the request through the wrapped transport, unchanged;
3. returns a response with the same status, headers and extensions whose body stream is a
   tee: every raw chunk the application reads is also kept, and when the body ends, fails,
   or is closed, the finished :class:`~evidence_client.capture.Exchange` goes to the sink.

Before step 1 the transport asks the Recorder (``begin``) which stream the call belongs to (an
``evidence_client.stream()`` block, else the client's stream, else the Recorder's) and that
the Recorder is running; a Recorder that cannot start raises ``RecorderUnavailable`` there, so
the call fails loudly instead of going unrecorded. The call context
(``evidence_client.call_context()``) is read at the same moment.

A request that gets no response (connect error, timeout, cancellation) is handed to the sink
with the exception's description, and the original exception is re-raised untouched.
The sink never raises into the application: failures on the capture side are logged and
counted by the Recorder, and a failure inside this module falls back to the plain call.

Each call also gets its span (:mod:`~evidence_client.otel`): joined or started once the
exchange exists (its content key and event id fixed), current while the request is sent, given
the response's attributes and ended when the call finishes, before the capture's durable wait.
A failure there is counted like any capture-side failure and the call goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import ModuleType
from typing import Any, AsyncIterator, Callable, Iterator

import httpx
import httpx2

from evidence_contract import content_key, new_event_id, now_micros

from .capture import Exchange
from .context import current_call, current_stream
from .otel import CallSpan, Spans

__all__ = [
    "FLAVORS",
    "AsyncCaptureTransport",
    "AsyncTeeStream",
    "Begin",
    "CaptureTransport",
    "HttpxAsyncCaptureTransport",
    "HttpxAsyncTeeStream",
    "HttpxCaptureTransport",
    "HttpxTeeStream",
    "Sink",
    "TeeStream",
    "transport_classes",
]

log = logging.getLogger(__name__)

Sink = Callable[[Exchange], Any]
"""Receives each finished exchange; must not raise (the transport guards it anyway). It may
return a handle with ``ready`` and ``wait()`` (and, for the async transports, optionally
``wait_async()``): the transport then waits until the capture is durable before the
application sees the end of the response (or its error)."""

Begin = Callable[[str | None], str]
"""Given the client's stream (or None), returns the call's stream; raises into the
application when the call cannot be recorded (``RecorderUnavailable``, ``ConfigError``)."""

FLAVORS = ("httpx2", "httpx")


def _context_stream(client_stream: str | None) -> str:
    stream = current_stream() or client_stream
    if stream is None:
        raise ValueError("this call has no stream")
    return stream


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Call:
    """The capture state of one request; finishes exactly once."""

    def __init__(self, exchange: Exchange, sink: Sink, on_error: Callable[[BaseException], None],
                 spans: Spans):
        self.exchange = exchange
        self._sink = sink
        self._on_error = on_error
        self._t0 = time.monotonic()
        self._done = False
        self._durable: Any = None
        self._span: CallSpan | None = None
        try:
            self._span = spans.begin(exchange)
        except Exception as e:  # noqa: BLE001 - telemetry never fails the call
            on_error(e)

    def activate(self) -> object | None:
        """Make the call's own span current while the request is sent (token or None)."""
        try:
            return self._span.activate() if self._span is not None else None
        except Exception as e:  # noqa: BLE001
            self._on_error(e)
            return None

    def deactivate(self, token: object | None) -> None:
        try:
            CallSpan.deactivate(token)
        except Exception as e:  # noqa: BLE001
            self._on_error(e)

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
            self._durable = self._sink(ex)
        except Exception as e:  # noqa: BLE001 - never into the application
            self._on_error(e)
        if self._span is not None:
            try:
                self._span.end(self.exchange, error)
            except Exception as e:  # noqa: BLE001 - telemetry never fails the call
                self._on_error(e)

    def settle(self) -> None:
        """Wait until the capture is durable (write-ahead: the call returns after it), once:
        a call that settles again (its body read, then closed) does not wait out the timeout
        a second time."""
        d, self._durable = self._durable, None
        if d is not None and not d.ready:
            try:
                d.wait()
            except Exception as e:  # noqa: BLE001 - never into the application
                self._on_error(e)

    async def asettle(self) -> None:
        """:meth:`settle` without blocking the event loop."""
        d, self._durable = self._durable, None
        if d is not None and not d.ready:
            try:
                if hasattr(d, "wait_async"):
                    await d.wait_async()
                else:
                    await asyncio.to_thread(d.wait)
            except Exception as e:  # noqa: BLE001
                self._on_error(e)


def _endpoint(url: Any) -> tuple[str, bool]:
    """``(str(url.copy_with(query=None)), whether url has a query)`` from the URL's string
    form, without building a second URL (httpx's ``copy_with`` took 17 µs of a lone call's
    capture; this 1 µs). In a URL's string form a ``?`` or ``#`` inside the path or query is
    percent-encoded, so the first ``#`` starts the fragment and the first ``?`` before it
    the query; the fragment is kept, as ``copy_with`` keeps it."""
    s = str(url)
    h = s.find("#")
    q = s.find("?", 0, h if h != -1 else len(s))
    if q == -1:
        return s, False
    return s[:q] + (s[h:] if h != -1 else ""), True


def _begin(request: Any, body: bytes, stream: str, policy: str, sink: Sink,
           on_error: Callable[[BaseException], None], spans: Spans) -> _Call:
    # content_key first: the identity of the call is fixed before any byte leaves.
    key = content_key(body)
    url = request.url
    headers = {k.lower(): v for k, v in request.headers.items()
               if k.lower() in ("anthropic-version", "openai-version")}
    where, has_query = _endpoint(url)
    ex = Exchange(
        stream=stream, request_policy=policy, content_key=key, request_bytes=body,
        url=where, host=url.host, path=url.path,
        started_at=now_micros(), request_headers=headers,
        query={k: v for k, v in url.params.items() if k == "api-version"} if has_query else {},
        call=current_call(), event_id=new_event_id(),
    )
    return _Call(ex, sink, on_error, spans)


class _Tee:
    """What the sync tee streams of both flavors do; the flavor's base class comes second."""

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
            self._call.settle()
            raise
        self._call.finish(eof=True)
        self._call.settle()

    def close(self) -> None:
        try:
            self._call.finish(closed=True)
            self._call.settle()
        finally:
            self._inner.close()


class _AsyncTee:
    """What the async tee streams of both flavors do."""

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
            await self._call.asettle()
            raise
        self._call.finish(eof=True)
        await self._call.asettle()

    async def aclose(self) -> None:
        try:
            self._call.finish(closed=True)
            await self._call.asettle()
        finally:
            await self._inner.aclose()


class _Capture:
    """State and the request-side half shared by the four capture transports."""

    _mod: ModuleType
    _tee: type
    _default: str

    def __init__(self, inner: Any, stream: str | None, policy: str, sink: Sink,
                 on_error: Callable[[BaseException], None], begin: Begin | None = None,
                 spans: Spans | None = None) -> None:
        self._inner = inner if inner is not None else getattr(self._mod, self._default)()
        self._stream, self._policy, self._sink, self._on_error = stream, policy, sink, on_error
        self._begin = begin or _context_stream
        self._spans = spans if spans is not None else Spans()  # the global tracer provider

    def _start(self, request: Any, body: bytes, stream: str) -> _Call | None:
        try:
            return _begin(request, body, stream, self._policy, self._sink, self._on_error,
                          self._spans)
        except Exception as e:  # noqa: BLE001
            self._on_error(e)
            return None

    def _respond(self, call: _Call | None, response: Any) -> Any:
        if call is None:
            return response
        try:
            call.respond(response)
            # A new Response around the same status/headers/extensions: the original may
            # have read its body already (a ByteStream), and then the client would never
            # pull ours.
            return self._mod.Response(status_code=response.status_code,
                                      headers=response.headers,
                                      stream=self._tee(response.stream, call),
                                      extensions=response.extensions)
        except Exception as e:  # noqa: BLE001
            self._on_error(e)
            return response


class _SyncCapture(_Capture):
    _default = "HTTPTransport"

    def handle_request(self, request: Any) -> Any:
        stream = self._begin(self._stream)  # may raise: this call cannot be recorded
        call = self._start(request, request.read(), stream)
        token = call.activate() if call is not None else None
        try:
            response = self._inner.handle_request(request)
        except BaseException as e:
            if call is not None:
                call.deactivate(token)
                call.finish(error=e)
                call.settle()
            raise
        if call is not None:
            call.deactivate(token)
        return self._respond(call, response)

    def close(self) -> None:
        self._inner.close()


class _AsyncCapture(_Capture):
    _default = "AsyncHTTPTransport"

    async def handle_async_request(self, request: Any) -> Any:
        stream = self._begin(self._stream)  # may raise: this call cannot be recorded
        call = self._start(request, await request.aread(), stream)
        token = call.activate() if call is not None else None
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException as e:
            if call is not None:
                call.deactivate(token)
                call.finish(error=e)
                await call.asettle()
            raise
        if call is not None:
            call.deactivate(token)
        return self._respond(call, response)

    async def aclose(self) -> None:
        await self._inner.aclose()


class TeeStream(_Tee, httpx2.SyncByteStream):
    """httpx2 response body that also feeds the capture."""


class AsyncTeeStream(_AsyncTee, httpx2.AsyncByteStream):
    """httpx2 async response body that also feeds the capture."""


class CaptureTransport(_SyncCapture, httpx2.BaseTransport):
    """Sync capture transport for ``httpx2`` (the current openai/anthropic SDKs' client)."""

    _mod, _tee = httpx2, TeeStream


class AsyncCaptureTransport(_AsyncCapture, httpx2.AsyncBaseTransport):
    """Async capture transport for ``httpx2``."""

    _mod, _tee = httpx2, AsyncTeeStream


class HttpxTeeStream(_Tee, httpx.SyncByteStream):
    """httpx response body that also feeds the capture."""


class HttpxAsyncTeeStream(_AsyncTee, httpx.AsyncByteStream):
    """httpx async response body that also feeds the capture."""


class HttpxCaptureTransport(_SyncCapture, httpx.BaseTransport):
    """Sync capture transport for ``httpx``."""

    _mod, _tee = httpx, HttpxTeeStream


class HttpxAsyncCaptureTransport(_AsyncCapture, httpx.AsyncBaseTransport):
    """Async capture transport for ``httpx``."""

    _mod, _tee = httpx, HttpxAsyncTeeStream


_CLASSES: dict[str, tuple[type, type]] = {
    "httpx2": (CaptureTransport, AsyncCaptureTransport),
    "httpx": (HttpxCaptureTransport, HttpxAsyncCaptureTransport),
}


def transport_classes(flavor: str) -> tuple[type, type]:
    """The (sync, async) capture transport classes for ``flavor`` ("httpx2" or "httpx")."""
    try:
        return _CLASSES[flavor]
    except KeyError:
        raise ValueError(f"unknown flavor {flavor!r}; expected one of {FLAVORS}") from None
