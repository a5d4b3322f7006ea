"""How the API is served: uvicorn's configuration, with bounds on slow and idle connections.

uvicorn bounds an idle keep-alive connection (``timeout_keep_alive``) and the size of a request
head (h11's ``max_incomplete_event_size``), but not the time a client takes to send the head:
a connection that sends half a request line and then nothing stays open for good (its
keep-alive timer starts only after a first response, and any byte received cancels it).
:class:`HeadTimeoutProtocol` adds that bound: from the first byte of a request head (or from
accept, for a connection's first request) the whole head must arrive within
``EVIDENCE_API_HEADER_TIMEOUT`` seconds, else the connection is closed. The body has its own
deadline, :class:`api.limits.BodyLimitMiddleware`'s.

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
import logging
import os
import shutil
import socket
import tempfile
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from server.logs import event_logger

from .config import Settings

__all__ = ["HeadTimeoutProtocol", "ServerConfig", "serve", "uvicorn_config"]

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


class HeadTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head (see the module doc)."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.header_timeout: float = getattr(config, "header_timeout", 10.0)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        _no_delay(transport)
        super().connection_made(transport)
        self._arm_head_timer()  # a connection that never sends a request is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
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
