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
these bounds at work.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .config import Settings

__all__ = ["HeadTimeoutProtocol", "ServerConfig", "uvicorn_config"]


class ServerConfig(uvicorn.Config):
    """uvicorn's Config plus the request-head deadline that :class:`HeadTimeoutProtocol`
    reads from it (uvicorn hands every protocol its Config)."""

    def __init__(self, app: Any, *, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.header_timeout = header_timeout


class HeadTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head (see the module doc)."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.header_timeout: float = getattr(config, "header_timeout", 10.0)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
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
        self.logger.info("closing a connection whose request head did not arrive within "
                         "%g s", self.header_timeout)
        self.transport.close()


def uvicorn_config(app: Any, settings: Settings, **kwargs: Any) -> ServerConfig:
    """uvicorn's configuration for ``app`` with the connection bounds of ``settings``;
    ``kwargs`` (host, port, log_level, ...) pass through to :class:`uvicorn.Config`."""
    return ServerConfig(
        app, header_timeout=settings.header_timeout, http=HeadTimeoutProtocol,
        timeout_keep_alive=settings.keep_alive_timeout,  # type: ignore[arg-type]
        h11_max_incomplete_event_size=settings.max_header_bytes, **kwargs)
