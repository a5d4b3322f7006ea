"""The write-ahead of a Recorder's captures: group commit to its own spool, by whichever thread
gets there first.

A finished capture is put on the journal's pending list and committed: encoded
(:mod:`~evidence_client.encoder`), appended to the own spool with one fsync for everything
pending, and its :class:`Durable` released (a capture the disk refuses is released once Kafka
has acknowledged it instead: :mod:`~evidence_client.tracking`). Who commits:

- a sync call whose capture must be on disk before it returns (``durability="before_return"``)
  commits on its own thread when no one else is writing (it is the *leader*): a lone call
  waits for its own encode and fsync and for no other thread's wake-up. If a commit is under
  way, the call waits on its Durable: the leader takes what was pending when its fsync ends
  (group commit), or, when it has done its share, wakes the sender thread to;
- an async call (its event loop must not wait in an fsync), and every call under
  ``durability="after_return"``, puts its capture on the list and wakes the sender thread,
  which commits it at once.

The lock (:attr:`Journal.lock`) is held while the spool is written, read or acknowledged, so
the sender's acknowledgements and re-reads never meet an append. What was written goes on
:attr:`Journal.written` in spool order, for the sender to track until Kafka has it
(:mod:`~evidence_client.tracking`).

``group_commit_ms`` (default 0) makes a batch that found company within that time of the last
fsync wait out the rest of it for more to share the next fsync: fewer fsyncs under load, for
that much latency a call. Without it a Recorder still makes one fsync for all the captures
that finished while the previous one ran.

A capture no call waits for (``durability="after_return"``, or :meth:`Recorder.submit` whose
:class:`Durable` nobody waits on) is not worth an fsync of its own: the sender commits such
captures once the oldest has waited ``unwaited_commit_ms`` (default 5), or at once when a call
starts to wait on one of them (:meth:`Durable.wait` hurries the journal), when a capture a call
does wait for joins them, or when a full batch is pending. A gateway submitting 1,700 captures
a second made an fsync for every 1.1 of them, each costing its process ~130 µs of kernel time;
with the window it makes one for every ~8. The window is how long after its call returned an
unwaited capture may still be only in memory: what a process killed then loses.

Nor does the sender wait for the disk before it produces such a batch: it only writes it,
and the *syncer*, a thread of the Recorder's own (:meth:`Journal.start_syncer`), fsyncs the
spool (one fsync at a time, each covering every batch written before it) and then releases
the batch's Durables. A disk that stalls (its fsyncs waited 0.5-1.4 s behind the broker's and
PostgreSQL's writeback on the bench's one disk) then delays only what waits for it, never the
delivery of what does not. A batch with a capture a call waits for is fsync'd by the sender
itself before it is produced, as before. If one of the syncer's fsyncs fails, the calls still
waiting on those captures go on once Kafka has them (as on a full disk), and every later
batch waits for its own fsync. The syncer also records the spool's HEAD after the sender
releases what Kafka acknowledged (:meth:`Journal.record_head`): two more fsyncs, up to 0.75 s
each in a stall, that the sender made itself every 100 ms under load.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from collections import deque
from typing import Callable

from .capture import Exchange
from .encoder import CaptureEncoder
from .errors import SpoolError
from .metrics import Metrics
from .spool import Spool, datasync
from .tracking import TAKE_BATCH, Tracked

__all__ = ["Durable", "Journal"]

log = logging.getLogger("evidence_client.recorder")  # the logger these lines always had

_LEADER_ROUNDS = 3
"""Batches a call's own thread writes at most before it leaves the rest to the sender."""


def _resolve(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


class Durable:
    """The answer to "is my capture on disk yet?" for one call.

    :meth:`wait` (or, on an event loop, :meth:`wait_async`) returns once the capture is
    fsync'd in the spool (or, the disk refusing it, acknowledged by Kafka), after at most
    ``timeout`` s; a capture still not safe then is counted (``metrics.slow_durable``) and
    the call goes on, its capture still pending."""

    __slots__ = ("_event", "_timeout", "_metrics", "_waiters", "watched", "_on_watch")

    def __init__(self, timeout: float, metrics: Metrics, *, watched: bool = False,
                 on_watch: Callable[[], None] | None = None) -> None:
        self._event = threading.Event()
        self._timeout = timeout
        self._metrics = metrics
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.watched = watched
        """A call waits (or will) for this capture: the journal commits it without delay."""
        self._on_watch = on_watch

    def set(self) -> None:
        self._event.set()
        waiters = self._waiters
        while waiters:
            try:
                loop, fut = waiters.pop()
            except IndexError:  # another thread's set() took it
                break
            try:
                loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:  # that loop is closed: nobody waits any more
                pass

    @property
    def ready(self) -> bool:
        return self._event.is_set()

    def _watch(self) -> None:
        """Someone waits from now on: a capture the journal was letting wait for company is
        committed now."""
        if not self.watched:
            self.watched = True
            if self._on_watch is not None:
                self._on_watch()

    def wait(self) -> bool:
        if self._event.is_set():
            return True
        self._watch()
        if self._event.wait(self._timeout):
            return True
        self._slow()
        return False

    async def wait_async(self) -> bool:
        """:meth:`wait` without blocking the event loop, and without a thread of its own."""
        if self._event.is_set():
            return True
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiters.append((loop, fut))
        self._watch()
        if self._event.is_set():  # set between the check and the append: set() missed it
            _resolve(fut)
        try:
            await asyncio.wait_for(fut, self._timeout)
            return True
        except asyncio.TimeoutError:
            self._slow()
            return False

    def _slow(self) -> None:
        self._metrics.add("slow_durable")
        log.warning("a capture was not on disk within %.1f s; the call goes on", self._timeout)


Pending = tuple["Exchange | Tracked", "Durable | None"]


class Journal:
    """The pending captures of one Recorder and their commits to its own spool."""

    def __init__(self, spool: Spool, encoder: CaptureEncoder, metrics: Metrics, *,
                 max_pending: int, max_block_ms: int, group_commit_ms: float,
                 unwaited_commit_ms: float = 0.0, wake: Callable[[], None]) -> None:
        self.spool = spool
        self.lock = threading.Lock()
        self.written: deque[tuple[list[Tracked], bool]] = deque()
        """Batches in spool order, and whether the disk took them (the sender tracks them)."""
        self.last_append = float("-inf")  # monotonic end of the last spool append
        self._pending: deque[Pending] = deque()
        self._space = threading.Condition()
        self._encoder = encoder
        self._metrics = metrics
        self._max_pending = max_pending
        self._max_block = max_block_ms / 1000
        self._linger = group_commit_ms / 1000
        self._window = unwaited_commit_ms / 1000
        self._since = 0.0  # monotonic time the oldest pending capture was put
        self._hurry = False  # a capture pending is waited for
        self._wake = wake
        # The syncer (start_syncer): the fsyncs of batches no call waits for, off the
        # sender's thread. Guarded by _sync: what it has to make durable, in write order
        # (each capture with its Durable, if any), and what a failed fsync left for the
        # sender to settle.
        self._sync = threading.Condition()
        self._unsynced: list[tuple[Tracked, Durable | None]] = []
        self._sync_failed: list[tuple[Tracked, Durable | None]] = []
        self._syncing = 0  # captures the syncer's fsync under way is for
        self._sync_stop = False
        self._syncer: threading.Thread | None = None
        self._sync_broken = False  # an fsync of the syncer's failed: every batch syncs itself
        self._head_wanted = False  # the sender released entries: HEAD is to be recorded

    def __len__(self) -> int:
        return len(self._pending)

    def put(self, item: Exchange | Tracked, durable: Durable | None) -> bool:
        """Add a capture to the pending list; returns whether the committer should be woken
        for it (it is waited for, it starts a window of unwaited ones, or a batch is full).
        Raises ``queue.Full`` when ``max_pending`` captures still wait after
        ``max_block_ms``."""
        if len(self._pending) >= self._max_pending:
            with self._space:
                if not self._space.wait_for(lambda: len(self._pending) < self._max_pending,
                                            self._max_block):
                    raise queue.Full
        first = not self._pending
        if first:
            self._since = time.monotonic()
        self._pending.append((item, durable))
        if durable is not None and durable.watched:
            self._hurry = True
            return True
        return first or not self._window or len(self._pending) >= TAKE_BATCH

    def hurry(self) -> None:
        """A call now waits for a pending capture: :meth:`due_in` is 0 until the next take."""
        self._hurry = True

    def due_in(self) -> float:
        """Seconds until what is pending must be committed: 0 when a call waits for any of
        it, when a batch is full or the oldest has waited ``unwaited_commit_ms``; infinite
        when nothing is pending."""
        if not self._pending:
            return float("inf")
        if self._hurry or not self._window or len(self._pending) >= TAKE_BATCH:
            return 0.0
        return max(0.0, self._since + self._window - time.monotonic())

    def put_back(self, entries: list[Tracked]) -> None:
        """The sender thread's own captures (a truncated copy, one the disk refused before):
        pending at once, whatever ``max_pending``: they were counted when their calls ended,
        and the thread that commits must not wait for itself."""
        self._pending.extend((e, None) for e in entries)

    def lead(self, durable: Durable) -> None:
        """On a call's own thread, after :meth:`put`: commit unless a commit is under way
        (then its leader, or the sender, takes this capture), at most a few batches; then
        wake the sender, to produce what was written and commit what is left."""
        first = False  # wrote the first batch the sender has not taken yet
        for _ in range(_LEADER_ROUNDS):
            if not self._pending or not self.lock.acquire(blocking=False):
                break
            try:
                first = not self.written or first
                self._write_batch()
            finally:
                self.lock.release()
            if durable.ready:
                break
        # One wake per batch of batches: a sender already woken for earlier ones takes
        # this one with them (at worst at its next tick), so under load it is not woken
        # for every capture.
        if first or self._pending:
            self._wake()

    def commit(self, timeout: float = 1.0) -> int:
        """Write everything pending, waiting up to ``timeout`` s for a commit under way
        first (the sender's way); returns how many captures were taken. A commit that holds
        the lock longer (a call's thread stopped in a signal handler that closes the
        Recorder) is left to finish them: the sender does not wait for it forever. After
        the first batch, only what is due (:meth:`due_in`): captures no call waits for that
        came during an fsync wait for company. A batch no call waits for is fsync'd by the
        syncer, when it runs (:meth:`start_syncer`)."""
        n = 0
        while self._pending and (n == 0 or self.due_in() <= 0):
            if not self.lock.acquire(timeout=timeout):
                break
            try:
                n += self._write_batch(background=True)
            finally:
                self.lock.release()
        return n

    # -- the syncer ------------------------------------------------------------------------

    def start_syncer(self) -> None:
        """From now on the sender's batches that no call waits for are written without an
        fsync and go to Kafka at once; a thread of their own fsyncs them, and releases their
        Durables then. So a slow fsync (a disk busy with others' writeback) holds up only
        what waits for the disk, never the delivery of what does not."""
        if self._syncer is None:
            self._sync_stop = False
            self._syncer = threading.Thread(target=self._sync_loop, name="evidence-client-syncer",
                                             daemon=True)
            self._syncer.start()

    def stop_syncer(self, timeout: float) -> None:
        """Let the syncer make what it holds durable (up to ``timeout`` s), then stop it;
        a batch written after this syncs itself."""
        syncer, self._syncer = self._syncer, None
        if syncer is None:
            return
        with self._sync:
            self._sync_stop = True
            self._sync.notify_all()
        syncer.join(timeout)
        if syncer.is_alive():
            log.error("the spool's fsync did not end within %.1f s; captures written since "
                      "the last one may not be on disk yet", timeout)

    def record_head(self) -> None:
        """The sender released delivered entries: the syncer records HEAD (its fsyncs, like
        the spool's, then never hold up a delivery); without a syncer, this thread does."""
        if self._syncer is None:
            self._record_head()
            return
        with self._sync:
            self._head_wanted = True
            self._sync.notify()

    def unsynced(self) -> int:
        """Captures written that the syncer has not made durable yet, those of the fsync
        under way included."""
        with self._sync:
            return len(self._unsynced) + self._syncing

    def take_failed_syncs(self) -> list[tuple[Tracked, Durable | None]]:
        """The captures whose fsync failed, for the sender thread to settle: their calls
        (if any wait) go on once Kafka has them, as when the disk refuses a write. Called
        at every sender step: the lock only when there is something to take."""
        if not self._sync_failed:
            return []
        with self._sync:
            out, self._sync_failed = self._sync_failed, []
        return out

    def _sync_loop(self) -> None:
        while True:
            with self._sync:
                self._sync.wait_for(
                    lambda: self._unsynced or self._head_wanted or self._sync_stop)
                if not self._unsynced and not self._head_wanted:
                    return  # stopping, and nothing left to make durable
                batch, self._unsynced = self._unsynced, []
                head, self._head_wanted = self._head_wanted, False
                self._syncing = len(batch)
            # One bad round must not end the syncing; and a HEAD that could not be recorded
            # is no reason to treat a batch already made durable as failed.
            if batch:
                try:
                    self._sync_once(batch)
                except Exception:  # noqa: BLE001
                    log.exception("the spool's fsync failed unexpectedly")
                    self._fail(batch)
            with self._sync:
                self._syncing = 0
            if head:
                try:
                    self._record_head()
                except Exception:  # noqa: BLE001 - recorded at the next release
                    log.exception("recording the spool's HEAD failed unexpectedly")

    def _record_head(self) -> None:
        with self.lock:  # where HEAD should point, read beside the sender's releases
            at = self.spool.head_position
        try:
            self.spool.record_head(at)
        except SpoolError as e:
            log.warning("cannot record deliveries in the spool yet (a crash before the next "
                        "try would resend them): %s", e)

    def _sync_once(self, batch: list[tuple[Tracked, Durable | None]]) -> None:
        try:
            with self.lock:  # the file may be replaced (a compaction) only between appends
                fd = self.spool.sync_handle()
            try:
                datasync(fd)
            finally:
                os.close(fd)
        except (OSError, SpoolError) as e:
            log.error("spool fsync failed: %d captures written since the last one may not "
                      "be on disk; their calls (if any wait) go on once Kafka has them, and "
                      "every later write waits for its own fsync: %s", len(batch), e)
            self._fail(batch)
            return
        for _, durable in batch:
            if durable is not None:
                durable.set()

    def _fail(self, batch: list[tuple[Tracked, Durable | None]]) -> None:
        self._sync_broken = True
        with self._sync:
            self._sync_failed += batch
        self._wake()

    def _take(self) -> list[Pending]:
        # Before the take: a call that starts to wait during it hurries the next commit
        # (cleared after, its hurry could be lost and its capture wait out the window).
        self._hurry = False
        batch: list[Pending] = []
        pending = self._pending
        while pending and len(batch) < TAKE_BATCH:
            batch.append(pending.popleft())
        return batch

    def _write_batch(self, background: bool = False) -> int:
        """Under :attr:`lock`: encode and append one batch with one fsync, release its
        calls; returns how many were taken. ``background`` (the sender's commits): a batch
        no call waits for is only written, and the syncer fsyncs it while the sender
        produces it."""
        batch = self._take()
        if not batch:
            return 0
        if len(batch) > 1 and self._linger > 0:
            left = self.last_append + self._linger - time.monotonic()
            if left > 0:  # under load: let more share this fsync
                time.sleep(left)
                batch += self._take()
        with self._space:
            self._space.notify_all()
        made: list[tuple[Tracked, Durable | None]] = []
        for item, durable in batch:
            e = self._encode(item)
            if e is None:  # nothing to keep (counted and logged by the encoder)
                if durable is not None:
                    durable.set()
                continue
            made.append((e, durable))
        if not made:
            return len(batch)
        entries = [e for e, _ in made]
        if (background and self._syncer is not None and not self._sync_broken
                and not any(d is not None and d.watched for _, d in made)):
            ok = self._append(entries, sync=False)
            if ok:  # released by the syncer's fsync, not by Kafka's acknowledgement
                with self._sync:
                    self._unsynced += made
                    self._sync.notify()
            else:
                self._attach(made)
            self.written.append((entries, ok))
            return len(batch)
        # Before the sender can see them (written): a capture the disk refuses keeps its
        # call waiting until Kafka has it (tracking), whichever thread gets there first.
        self._attach(made)
        ok = self._append(entries)
        self.written.append((entries, ok))
        if ok:
            for e in entries:
                e.settle()
        return len(batch)

    @staticmethod
    def _attach(made: list[tuple[Tracked, Durable | None]]) -> None:
        for e, durable in made:
            if durable is not None:
                e.durable = durable

    def _encode(self, item: Exchange | Tracked) -> Tracked | None:
        return item if isinstance(item, Tracked) else self._encoder.encode(item)

    def _append(self, entries: list[Tracked], sync: bool = True) -> bool:
        items = [(e.key, e.value) for e in entries]
        try:
            if sync:
                self.spool.append_many(items)  # type: ignore[arg-type]
            else:
                self.spool.write_many(items)  # type: ignore[arg-type]
        except SpoolError:
            first = [e for e in entries if e.spooled]  # not refused before (a retry)
            for e in first:
                e.spooled = False
            self._metrics.add("unspooled", len(first))
            log.exception("spool write failed: %d captures are sent from memory, and their "
                          "calls wait for Kafka's acknowledgement instead (lost only if this "
                          "process dies before Kafka or the disk takes them): %s", len(entries),
                          ", ".join(e.event_id for e in entries))
            return False
        self.last_append = time.monotonic()
        return True

    def take_written(self) -> list[tuple[list[Tracked], bool]]:
        """The batches written since the last call, in spool order."""
        out = []
        written = self.written
        while written:
            out.append(written.popleft())
        return out
