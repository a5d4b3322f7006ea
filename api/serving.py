"""How the API is served: uvicorn's configuration, with bounds on slow and idle connections.

uvicorn bounds an idle keep-alive connection (``timeout_keep_alive``) and the size of a request
head (h11's ``max_incomplete_event_size``), but not the time a client takes to send the head:
a connection that sends half a request line and then nothing stays open for good (its
keep-alive timer starts only after a first response, and any byte received cancels it).
:class:`HeadTimeoutProtocol` adds that bound: from the first byte of a request head (or from
accept, for a connection's first request) the whole head must arrive within
``EVIDENCE_API_HEADER_TIMEOUT`` seconds, else the connection is closed. The body has its own
deadline, :class:`api.limits.BodyLimitMiddleware`'s.

The head's size. h11's ``max_incomplete_event_size`` bounds only a head still incomplete in
its buffer: a longer head that arrives whole in one read is parsed and served (100 KB against a
16 KiB bound, measured). :class:`BoundedHeadConnection` bounds every head, however it arrives
(one write, several, pipelined behind another request): before h11 parses one, a head whose
request line and headers (to the blank line) exceed ``EVIDENCE_API_MAX_HEADER_BYTES`` is
refused, and :class:`HeadTimeoutProtocol` answers ``431 Request Header Fields Too Large`` with
the reason and closes the connection. It closes it gently: half-closed after the answer, what
the client still sends is read and dropped until it closes too (or the head deadline passes),
so the client reads the 431 rather than a reset.

:func:`uvicorn_config` is what ``evidence api`` runs, and what tests serve the app with to see
these bounds at work; :func:`serve` runs it, in one process or in ``EVIDENCE_API_WORKERS``.

Workers. One process serves everything through one event loop, so it holds one core at most:
:func:`serve` with ``workers`` > 1 binds the socket once in a parent, which starts that many
worker processes (uvicorn's ``Multiprocess`` supervisor: a worker that dies is replaced, one
that fails its start-up stops the parent), each importing the app from ``target`` and
accepting on the shared socket. Each worker (or the one process) runs with the collector
settings of the other services (:func:`server.runtime.tune_gc`, in :meth:`ServerConfig.load`):
with CPython's defaults a worker holding 128 requests in flight collected so often that
``POST /replay/verify`` served ~10 % fewer requests at concurrency 64 and 256 than tuned
(``bench.api_verify``, three runs of each). The default is one worker per core this process may use
(:func:`api.config.default_workers`). Every worker has its own pool: PostgreSQL sees up to ``workers`` ×
``EVIDENCE_API_POOL_MAX`` connections from the API, which must fit in ``max_connections``
beside the projector, the writer's key store and the operators (:func:`serve` logs the sum).
The workers share their metrics through prometheus_client's multiprocess mode: :func:`serve`
gives them a fresh ``PROMETHEUS_MULTIPROC_DIR`` (removed when it exits), so a ``/metrics``
scrape, whichever worker answers it, counts every worker's requests (``api.metrics``). The
bounds above hold per connection in every worker, since each runs the same protocol and
middleware.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import socket
import tempfile
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE, H11Protocol

from server.logs import event_logger

from .config import Settings

__all__ = ["BoundedHeadConnection", "HeadTimeoutProtocol", "ServerConfig", "serve",
           "uvicorn_config"]

log = event_logger("evidence.api")


class ServerConfig(uvicorn.Config):
    """uvicorn's Config plus the request-head deadline that :class:`HeadTimeoutProtocol`
    reads from it (uvicorn hands every protocol its Config), and the JSON log lines of
    :mod:`server.logs` in every process it configures logging in: a worker is a fresh
    interpreter, and uvicorn calls :meth:`configure_logging` there before it serves."""

    def __init__(self, app: Any, *, header_timeout: float, json_logs: bool = False,
                 tune_gc: bool = False, **kwargs: Any) -> None:
        self.header_timeout = header_timeout
        self.json_logs = json_logs
        self.tune_gc = tune_gc
        super().__init__(app, **kwargs)

    def load(self) -> None:
        """uvicorn's load (the app imported, or made by its factory), then, with ``tune_gc``,
        :func:`server.runtime.tune_gc` in this process: every worker is a fresh interpreter
        and calls this before it serves."""
        super().load()
        if self.tune_gc:
            from server.runtime import tune_gc

            tune_gc()

    def configure_logging(self) -> None:
        super().configure_logging()
        if self.json_logs:
            from server.logs import configure

            level = self.log_level or "info"
            configure(level if isinstance(level, str) else logging.getLevelName(level).lower())


_HEAD_END = re.compile(rb"\n\r?\n")  # where h11 ends a head (a bare LF is taken too)


class BoundedHeadConnection(h11.Connection):
    """h11's server side, refusing any request head over ``max_head`` bytes however it
    arrived (see the module doc): while a head is awaited, a buffer holding more than
    ``max_head`` bytes without the head's end within them is refused. A refused head is never
    parsed: :meth:`next_event` answers ``PAUSED`` from then on, and ``head_too_large`` holds
    the bytes of it received (the protocol answers 431)."""

    def __init__(self, max_head: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_head)
        self.max_head = max_head
        self.head_too_large: int | None = None

    def next_event(self) -> Any:
        if self.head_too_large is None and self.their_state is h11.IDLE:
            buffered = self.trailing_data[0]
            if len(buffered) > self.max_head:
                end = _HEAD_END.search(buffered, 0, self.max_head + 3)
                if end is None or end.end() > self.max_head:
                    self.head_too_large = end.end() if end else len(buffered)
        if self.head_too_large is not None:
            return h11.PAUSED
        return super().next_event()


class HeadTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head and a bound on its size,
    answered with 431 (see the module doc)."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.header_timeout: float = getattr(config, "header_timeout", 10.0)
        self._head_timer: asyncio.TimerHandle | None = None
        self.conn = BoundedHeadConnection(config.h11_max_incomplete_event_size
                                          or DEFAULT_MAX_INCOMPLETE_EVENT_SIZE)
        self._refused = False
        self._linger: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        _no_delay(transport)
        super().connection_made(transport)
        self._arm_head_timer()  # a connection that never sends a request is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        if self._linger is not None:
            self._linger.cancel()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()  # every path to a new head (a read, a pipelined request) is here
        if self.conn.head_too_large is not None and not self._refused:
            self._refuse_head(self.conn.head_too_large)

    def _refuse_head(self, size: int) -> None:
        """Answer 431 with the reason, half-close, then drop what still arrives until the
        client closes or the head deadline passes (module doc)."""
        self._refused = True
        self._cancel_head_timer()
        limit = self.conn.max_head
        log("info", "request_head_too_large", head_bytes=size, max_header_bytes=limit)
        body = json.dumps({"error": "too_large", "message": (
            f"the request head (request line and headers) is over {limit} bytes ({size} "
            f"received); this server takes heads of up to {limit} bytes "
            f"(EVIDENCE_API_MAX_HEADER_BYTES)")}).encode()
        head = h11.Response(status_code=431, reason=b"Request Header Fields Too Large",
                            headers=[(b"content-type", b"application/json"),
                                     (b"content-length", str(len(body)).encode()),
                                     (b"connection", b"close")])
        for event in (head, h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event) or b"")
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.flow.resume_reading()  # read and drop the rest (h11 paused the reads)
        self._linger = self.loop.call_later(self.header_timeout, self.transport.close)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # the rest of a refused head, or more: dropped (see _refuse_head)
        # Between requests (idle keep-alive, or a response already sent) these bytes start
        # a new head: its deadline runs from now and is not reset by later bytes.
        if self._head_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._arm_head_timer()
        cycle = self.cycle
        super().data_received(data)
        if self.cycle is not cycle or self.conn.their_state is not h11.IDLE:
            self._cancel_head_timer()  # a complete head was parsed

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        # No answer is owed for a request that never arrived; just let the socket go.
        log("info", "request_head_timeout", header_timeout_s=self.header_timeout)
        self.transport.close()


def _no_delay(transport: asyncio.Transport) -> None:
    """Turn Nagle's algorithm off on an accepted TCP connection, as asyncio does itself only
    when the listening socket says ``proto == IPPROTO_TCP``. uvicorn's ``bind_socket`` (the
    socket its workers share, and any socket handed to ``Server.run``) leaves ``proto`` at 0,
    so without this every keep-alive response, written as head then body, waits for the
    client's delayed ACK: ~40 ms a request on Linux (Kludex/uvicorn#3149). Measured here:
    2 workers served 89 req/s at concurrency 4 with a p50 of 44 ms, one worker 540 req/s."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # the peer is already gone; the protocol sees it next
            pass


def uvicorn_config(app: Any, settings: Settings, **kwargs: Any) -> ServerConfig:
    """uvicorn's configuration for ``app`` with the connection bounds of ``settings``;
    ``kwargs`` (host, port, log_level, workers, factory, ...) pass through to
    :class:`uvicorn.Config`. ``app`` is an app, or an import string for ``workers`` > 1."""
    return ServerConfig(
        app, header_timeout=settings.header_timeout, http=HeadTimeoutProtocol,
        timeout_keep_alive=settings.keep_alive_timeout,  # type: ignore[arg-type]
        h11_max_incomplete_event_size=settings.max_header_bytes, backlog=settings.backlog,
        **kwargs)


def serve(target: str, settings: Settings, *, workers: int, **kwargs: Any) -> int:
    """Serve the app factory ``target`` (``module:callable``, called with no arguments) in
    this process (``workers`` == 1) or in ``workers`` processes; return the exit status: 0,
    or 3 when the server never started (port taken, a worker that cannot start)."""
    from uvicorn.supervisors import Multiprocess

    log("info", "serving", workers=workers, pool_max=settings.pool_max,
        connections=workers * settings.pool_max)
    if workers == 1:
        from importlib import import_module

        module, _, name = target.partition(":")
        config = uvicorn_config(getattr(import_module(module), name)(), settings,
                                tune_gc=True, **kwargs)
        server = uvicorn.Server(config)
        try:
            server.run()
        except KeyboardInterrupt:
            pass
        return 0 if server.started else 3
    config = uvicorn_config(target, settings, factory=True, workers=workers, tune_gc=True,
                            **kwargs)
    sock = config.bind_socket()  # once, here: every worker accepts on this socket
    # One metrics registry over all workers (api.metrics): the spawned workers inherit this
    # environment and import prometheus_client with it set.
    metrics_dir = tempfile.mkdtemp(prefix="evidence-api-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    supervisor = Multiprocess(config, sockets=[sock])
    try:
        supervisor.run()
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        shutil.rmtree(metrics_dir, ignore_errors=True)
    failed = any(p.exitcode == 3 for p in supervisor.processes)
    return 3 if failed else 0
