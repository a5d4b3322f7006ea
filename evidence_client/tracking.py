"""Delivery tracking: this Recorder's captures from its spool to Kafka's acknowledgement.

Write-ahead: every capture is appended to the Recorder's own spool (by the journal,
:mod:`~evidence_client.journal`), and only then produced: fsync'd before it is produced when a
call waits for it (the default ``durability="before_return"``), else by the journal's syncer
while it is produced. :class:`Tracker` mirrors the spool's
unacknowledged entries in order; an entry is acknowledged in the spool once it and every entry
before it are delivered (or dealt with for good). So a crash at any point loses no capture
whose call returned: the spool holds it until Kafka has it, and whoever adopts the spool
resends it (the writer absorbs the duplicates a resend may make).

A direct delivery that fails with a retriable error makes the tracker *degraded*: new captures
then wait on disk only (their bytes are dropped from memory), and the oldest waiting ones are
re-sent as one probe batch at a time, paced by a :class:`Backoff`; when a probe gets through,
everything waiting is sent. Used by the sender thread only (no locks).

A capture the disk refused (full) is *unspooled*: it is sent from memory at once, and the call
that made it waits for Kafka's acknowledgement instead of the fsync (its :attr:`Tracked.durable`
is released on delivery). Should Kafka fail it too, it is never given up: it goes back to the
journal (:attr:`Tracker.respool`), to the spool if the disk takes writes again, else to be sent
from memory once more.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from .errors import ProducerError, SpoolError
from .metrics import Metrics
from .producer import RETRY
from .spool import Spool

__all__ = ["DONE", "IDEMPOTENT_INFLIGHT", "INFLIGHT", "PENDING", "RESEND_BATCH", "TAKE_BATCH",
           "Backoff", "Tracked", "Tracker"]

log = logging.getLogger("evidence_client.recorder")  # the logger these lines always had

PENDING, INFLIGHT, DONE = "pending", "inflight", "done"
RESEND_BATCH = 500
TAKE_BATCH = 1000
_ACK_INTERVAL_S = 0.1
IDEMPOTENT_INFLIGHT = 5
"""librdkafka's idempotent producer makes no further request for a partition while this many of
its messages are in flight (``RD_KAFKA_IDEMP_MAX_INFLIGHT``, counted in messages): below it, a
capture produced goes out in a request of its own rather than queueing behind them."""
_BACKOFF_MIN, _BACKOFF_MAX = 0.2, 5.0


@dataclass(eq=False)
class Tracked:
    """A capture of this Recorder, from its spool entry to its delivery."""

    event_id: str
    key: bytes
    value: bytes | None  # None while it waits on disk only
    spooled: bool = True
    state: str = PENDING
    waited: bool = False  # not delivered at its first attempt: counted in metrics.spooled
    durable: Any = None
    """The call's :class:`~evidence_client.journal.Durable` while the capture is neither on
    disk nor acknowledged by Kafka (the disk refused it); released by :meth:`settle`."""

    def settle(self) -> None:
        """The capture is safe (on disk, delivered) or dealt with for good: its call goes on."""
        durable, self.durable = self.durable, None
        if durable is not None:
            durable.set()


class Backoff:
    """When the next resend may go (own probes and adopted spools share it): after each
    failure twice as late, from 0.2 s up to 5 s; back to 0.2 s after a success."""

    def __init__(self) -> None:
        self.delay = _BACKOFF_MIN
        self.next_at = 0.0  # monotonic

    def due(self) -> bool:
        return time.monotonic() >= self.next_at

    def waiting(self) -> bool:
        return self.next_at > time.monotonic()

    def failed(self) -> float:
        """Push the next resend back; returns the delay it got."""
        delay = self.delay
        self.next_at = time.monotonic() + delay
        self.delay = min(delay * 2, _BACKOFF_MAX)
        return delay

    def reset(self) -> None:
        self.delay = _BACKOFF_MIN


class Tracker:
    """The own spool and its mirror: the unacknowledged captures in spool order, those the
    disk refused (``unspooled``: to be sent from memory), those of them Kafka failed
    (``respool``: for the journal again), and whether delivery is healthy."""

    def __init__(self, spool: Spool, metrics: Metrics, backoff: Backoff,
                 lock: "threading.Lock | None" = None) -> None:
        self.spool = spool
        self._lock = lock if lock is not None else threading.Lock()
        """Held while the spool is read or acknowledged: the journal appends under it."""
        self.entries: deque[Tracked] = deque()
        self.unspooled: deque[Tracked] = deque()
        self.respool: list[Tracked] = []
        self.inflight = 0
        self.degraded = False
        self.pending = 0  # entries not done, as of the last append or acknowledgement
        self._sendable = 0  # entries in state PENDING: a step with none scans nothing
        self._metrics = metrics
        self._backoff = backoff
        self._probe: set[int] = set()
        self._last_ack = 0.0
        self._round_at = 0.0
        """When the first capture of the deliveries outstanding was produced (monotonic)."""
        self.record_head: Any = None
        """Who writes HEAD after a release: None, this thread (:meth:`Spool.record_head`);
        else a callable that has it written elsewhere (the journal's syncer, so that HEAD's
        fsyncs never hold up the sender)."""

    def track(self, entries: list[Tracked], spooled: bool) -> None:
        """Follow ``entries``, just written to the spool in this order by the journal
        (:mod:`~evidence_client.journal`); ``spooled=False``: the disk refused them, so they
        are sent from memory (and their calls wait for Kafka; the journal marked them)."""
        if not spooled:
            self.unspooled.extend(entries)
            return
        for e in entries:
            e.spooled = True  # an unspooled capture the disk took on a later try
            if self.degraded:
                e.value = None  # re-read from the spool when resent: memory stays bounded
                e.waited = True
            self.entries.append(e)
        self._sendable += len(entries)
        if self.degraded:
            self._metrics.add("spooled", len(entries))
        self.pending += len(entries)  # new entries are not done: no need to count them all

    def to_send(self) -> list[Tracked]:
        """The tracked captures to produce now, their values loaded: every pending one while
        healthy; one probe batch, when the backoff allows, while degraded."""
        if not self._sendable:
            return []
        if not self.degraded:
            batch = list(itertools.islice((e for e in self.entries if e.state == PENDING),
                                          TAKE_BATCH))
        elif self.inflight == 0 and self._backoff.due():
            batch = [e for e in self.entries if e.state == PENDING][:RESEND_BATCH]
            self._probe = {id(e) for e in batch}
        else:
            return []
        missing = [e for e in batch if e.value is None]
        if missing:
            self.reload(missing)
        return batch

    def reload(self, entries: list[Tracked]) -> None:
        """Read the values of tracked entries back from the spool (they align in order)."""
        want = {id(e) for e in entries}
        last = max(i for i, e in enumerate(self.entries) if id(e) in want)
        with self._lock:
            items = self.spool.peek(last + 1, max_bytes=1 << 62)
        for e, item in zip(self.entries, items):
            if id(e) in want:
                e.value = item.value

    def sent(self, e: Tracked) -> None:
        if e.spooled:
            self._sendable -= 1
        e.state = INFLIGHT
        if self.inflight == 0:
            self._round_at = time.monotonic()
        self.inflight += 1

    def round_open(self, window_s: float) -> bool:
        """Whether a capture may be produced now: fewer than :data:`IDEMPOTENT_INFLIGHT` are
        outstanding (the producer sends another request for it), or the first of them was
        produced less than ``window_s`` ago (it joins their batch, inside the producer's
        linger). Otherwise it waits until fewer are outstanding; see
        :data:`~evidence_client.sender.ROUND_WINDOW`."""
        return (self.inflight < IDEMPOTENT_INFLIGHT
                or time.monotonic() - self._round_at < window_s)

    def finish(self, e: Tracked) -> None:
        """``e`` is dealt with for good (kept aside, or replaced by a truncated copy)."""
        if e.spooled and e.state == PENDING:
            self._sendable -= 1
        e.state = DONE
        e.settle()

    def delivered(self, e: Tracked, err: ProducerError | None) -> ProducerError | None:
        """Record ``e``'s delivery report; returns ``err`` when Kafka will never take ``e``
        as it is (the caller truncates it or keeps it aside), else None."""
        self.inflight -= 1
        probing = id(e) in self._probe
        self._probe.discard(id(e))
        if err is None:
            e.state, e.value = DONE, None
            e.settle()
            self._metrics.add("resent" if e.waited else "delivered")
            if probing and not self._probe:
                self.degraded = False  # the probe got through
                self._backoff.reset()
            return None
        if err.kind != RETRY:
            return err
        if not self.degraded or probing:
            delay = self._backoff.failed()
            log.warning("capture %s was not delivered (%s); it waits in the spool, retried "
                        "in %.1f s", e.event_id, err, delay)
            self._probe.clear()
        self.degraded = True
        if not e.spooled:
            # Neither on disk nor in Kafka: back to the journal, for the spool if the disk
            # takes writes again, else to be sent from memory once more.
            log.warning("capture %s was not delivered (%s) and is not on disk: offered to "
                        "the spool again", e.event_id, err)
            e.state = PENDING
            self.respool.append(e)
            return None
        e.state, e.value = PENDING, None
        self._sendable += 1
        if not e.waited:
            e.waited = True
            self._metrics.add("spooled")
        return None

    def ack(self, force: bool) -> None:
        """Give up the spool's delivered prefix: at most every 100 ms (each record is an
        fsync'd HEAD update) unless ``force`` or a resend batch's worth is done. Released
        under the journal's lock; HEAD is written after it, so a call appending meanwhile
        does not wait for those fsyncs. A record the disk refuses is tried again at the next
        step that is due (until then a crash would resend those captures: duplicates the
        writer absorbs)."""
        now = time.monotonic()
        soon = not force and now - self._last_ack < _ACK_INTERVAL_S
        if soon and len(self.entries) < RESEND_BATCH:
            return  # not due, and fewer entries than a resend batch could be done: no count
        # Counted up to a resend batch only while an ack is not due: a step stays cheap.
        prefix = itertools.takewhile(lambda e: e.state == DONE, self.entries)
        done = sum(1 for _ in (itertools.islice(prefix, RESEND_BATCH) if soon else prefix))
        if (soon and done < RESEND_BATCH) or not (done or self.spool.head_behind):
            return
        self._last_ack = now
        if not self._lock.acquire(timeout=1.0):
            return  # a write holds the spool that long: acknowledged at a later step
        try:
            self.spool.release(done)
            for _ in range(done):
                self.entries.popleft()
            if self.spool.compaction_due():
                self.spool.compact()
        except SpoolError as e:  # the disk refuses (full?): the next ack compacts
            log.warning("cannot compact the spool yet: %s", e)
        finally:
            self._lock.release()
        if self.record_head is not None:
            self.record_head()
        else:
            try:
                self.spool.record_head()
            except SpoolError as e:
                log.warning("cannot record deliveries in the spool yet (a crash before the "
                            "next try would resend them): %s", e)
        self._count_pending()

    def _count_pending(self) -> None:
        self.pending = sum(1 for e in self.entries if e.state != DONE)
