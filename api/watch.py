"""Waiting for a stream's head to move: ``GET /streams/{s}?after_seq=N&wait_ms=M``.

A client that has just sent a capture, or follows a stream, can ask for the stream once and
be answered when the head passes ``N`` (or after ``M`` ms, with the head as it is then)
instead of asking again and again. Each API process keeps one PostgreSQL connection that
``LISTEN``\\ s on the read model's head channel (:mod:`projections.notify`): the live
projector sends a notice after each batch naming the streams whose heads moved, and the
waiters of those streams read their head again.

The notices only make waiting prompt; they are not needed for a right answer. A waiter reads
the head before it waits and again at least every ``RECHECK_S``, so a notice lost (the
listening connection down, PostgreSQL restarted, a blue/green swap) delays an answer by that
much at most. The listener reconnects by itself, with back-off, for as long as the process
runs; a waiter holds no pooled connection while it waits.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, Awaitable, Callable, TypeVar

import psycopg
from psycopg import sql

from server.logs import event_logger
from projections.notify import RECHECK_S, heads_channel, streams_of

__all__ = ["HeadWatch", "MAX_WAITERS", "wait_past"]

log = event_logger("evidence.api")

MAX_WAITERS = 10_000
"""Requests of one API process that may wait at once; past it a request is answered at
once, with the head as it is (still a right answer: the client asks again)."""

T = TypeVar("T")

_LIVENESS_S = 30.0  # with no notice for this long, check the listening connection answers


class HeadWatch:
    """One API process's listener on the head channel, and the requests waiting on it."""

    def __init__(self, url: str, views: str, *, application_name: str = "evidence-api-watch",
                 max_waiters: int = MAX_WAITERS) -> None:
        self.url = url
        self.channel = heads_channel(views)
        self.application_name = application_name
        self.max_waiters = max_waiters
        self.listening = False
        self.notices = 0
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._count = 0
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Start listening in the background (never waits for PostgreSQL)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._listen(),
                                                                name="head-watch")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        self.listening = False

    @contextlib.asynccontextmanager
    async def waiter(self, stream: str) -> AsyncIterator[asyncio.Event | None]:
        """An event set when a notice names ``stream`` (or every stream); None when
        ``max_waiters`` already wait."""
        if self._count >= self.max_waiters:
            yield None
            return
        event = asyncio.Event()
        self._waiters.setdefault(stream, set()).add(event)
        self._count += 1
        try:
            yield event
        finally:
            self._count -= 1
            waiting = self._waiters.get(stream)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiters[stream]

    def wake(self, streams: frozenset[str] | None) -> None:
        """Wake the waiters of ``streams`` (None: of every stream)."""
        if streams is None:
            for waiting in self._waiters.values():
                for event in waiting:
                    event.set()
            return
        for stream in streams:
            for event in self._waiters.get(stream, ()):
                event.set()

    async def _listen(self) -> None:
        delay = 0.5
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, connect_timeout=5,
                    application_name=self.application_name)
                async with conn:
                    await conn.execute(sql.SQL("listen {}").format(sql.Identifier(self.channel)))
                    self.listening, delay = True, 0.5
                    self.wake(None)  # whatever moved while nobody listened
                    while True:
                        async for notice in conn.notifies(timeout=_LIVENESS_S):
                            self.notices += 1
                            self.wake(streams_of(notice.payload))
                        await conn.execute("select 1")  # quiet: is the connection alive?
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as e:
                if self.listening:
                    log("warning", "head_watch_lost", error=str(e), recheck_s=RECHECK_S)
                else:
                    log("debug", "head_watch_not_listening", error=str(e))
            finally:
                self.listening = False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


async def wait_past(watch: HeadWatch, stream: str, after_seq: int, wait_s: float,
                    head_seq: Callable[[str], Awaitable[int | None]],
                    answer: Callable[[str], Awaitable[tuple[int | None, T]]] | None = None,
                    ) -> T | None:
    """Return once ``stream``'s head seq (read with ``head_seq``; None: no such stream) is
    past ``after_seq``, ``wait_s`` has passed, or the stream has no head at all.

    ``answer``: what the request answers with, read whole, and the head seq it holds. The
    first look is ``head_seq`` (most requests that wait find the head where they asked); every
    look after a wait is ``answer``, so the read that ends the wait is the answer itself, not
    a look followed by the answer's read (the long poll of a follower at the head: one read
    less an answer). Returns that read's value, or None when the wait ended at the first look
    (the caller reads the answer then)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    first = True
    async with watch.waiter(stream) as event:
        while True:
            if event is not None:
                event.clear()  # before the read: a notice after it sets it again
            got: T | None = None
            if first or answer is None:
                seq = await head_seq(stream)
            else:
                seq, got = await answer(stream)
            first = False
            left = deadline - loop.time()
            if seq is None or seq > after_seq or left <= 0 or event is None:
                return got
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(event.wait(), min(left, RECHECK_S))
