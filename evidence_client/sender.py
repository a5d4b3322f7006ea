"""The sender: the one thread that owns a Recorder's producer, the delivery tracking
(:mod:`~evidence_client.tracking`) and the adopted orphans (:mod:`~evidence_client.orphans`).

Captures reach the own spool through the journal (:mod:`~evidence_client.journal`): a sync
call writes its own when no other write is under way, async calls and calls that do not wait
(``durability="after_return"``) leave theirs to this thread. The sender thread does the rest,
one step at a time:

1. commit what the journal still holds (waking the moment a capture is left to it) and track
   what was written, in spool order (a batch no call waits for is produced without waiting
   for its fsync, which the journal's syncer thread makes);
2. serve the producer's delivery reports (``poll(0)``);
3. acknowledge the spool's delivered prefix;
4. adopt orphans when a scan is due;
5. produce: an adopted spool's next batch while any waits (earlier captures first), else the
   own captures.

Keeping all delivery state on that one thread is what makes the ordering argument of
:mod:`~evidence_client.tracking` simple. An exception in one step is logged and counted; the
thread goes on (it stops only in :meth:`Sender.stop`).

An idle sender waits to be woken (by a capture left to it, or one written by a call's thread,
to produce). With deliveries outstanding it waits at most 5 ms at a time, never in the
producer's poll, then serves whatever reports arrived. Captures no call waits for are left in
the journal until they are due (``unwaited_commit_ms``, :mod:`~evidence_client.journal`): the
sender's wait ends then, or when one is waited for.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from pathlib import Path

from .capture import Exchange
from .encoder import CaptureEncoder, truncated
from .errors import ProducerError, SpoolError
from .journal import Durable, Journal
from .metrics import Metrics
from .orphans import Orphans, Report
from .producer import RETRY, TOO_LARGE, IntakeProducer
from .settings import RecorderSettings
from .spool import keep_undeliverable, new_spool
from .tracking import DONE, Backoff, Tracked, Tracker

__all__ = ["ROUND_WINDOW", "Durable", "Sender"]

log = logging.getLogger("evidence_client.recorder")  # the logger these lines always had

_REPORT_TICK_S = 0.005
"""With deliveries outstanding, how long the sender waits on the queue before it serves the
delivery reports that arrived meanwhile. Nothing waits on a report but the spool's
acknowledgement (at most every 100 ms) and, on a full disk, the calls whose captures only
Kafka holds; a new capture that must be written wakes the sender at once. It was 1 ms: under
a steady trickle of captures deliveries are outstanding nearly all the time, and a step every
millisecond was 1-2% of a gateway's CPU (``python -m bench.gateway_cost``: 0.98-0.99x)."""
ROUND_WINDOW = 0.8
"""Own captures are produced in rounds: while 5 or more deliveries are outstanding
(:data:`~evidence_client.tracking.IDEMPOTENT_INFLIGHT`), a capture is produced only within this
share of the producer's ``linger.ms`` after the first of them (it joins their batch); later
ones wait in the tracker (on disk already) until fewer are outstanding, then go out together.
librdkafka's idempotent producer keeps one request in flight per partition once it holds 5
messages, and while that request is unanswered past ``linger.ms`` with messages queued
behind it, its broker thread polls its socket without waiting (librdkafka 2.16:
``rd_kafka_msgq_allow_wakeup_at`` sets the wakeup to now, then the in-flight limit returns
before a request is made). A broker slow to answer (a disk stall) then cost each gateway a
core for as long as the stall lasted: 0.99 s of CPU in a 1 s SIGSTOP of the broker, and
gateways at 175-266 µs a capture instead of ~110 in latency runs at 5k/s, which starved the
broker further. The messages the rounds hold back would have waited in librdkafka's queue
for the same response anyway."""
_IDLE_WAIT_S = 0.1
"""With nothing outstanding, how long the sender waits to be woken before it does its chores
(the producer's error and log callbacks, the spool's acknowledgement, the orphan scan when
due). A capture wakes it at once. At 20 ms an idle Recorder used ~9 ms of CPU a second, at
100 ms ~2.3 (30 s each on the dev stack): a server of many workers has one in each."""
_CLOSING_WAIT_S = 0.05  # closing, with deliveries outstanding: a wait in the producer's poll
_SYNC_STOP_S = 10.0
"""At close, how long the syncer may take to make the last captures written durable."""


class Sender:
    """One Recorder's sender. ``Sender(...)`` does no I/O; :meth:`start` (or :meth:`open`,
    which starts no thread: tests drive :meth:`step` themselves) creates the spool and the
    producer and adopts orphans; :meth:`stop` delivers what it can and lets go of both."""

    def __init__(self, settings: RecorderSettings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.producer = self._new_producer()
        self.encoder = CaptureEncoder(settings, metrics)
        self.backoff = Backoff()
        self.journal: Journal | None = None
        self.tracker: Tracker | None = None
        self.orphans: Orphans | None = None
        self.thread: threading.Thread | None = None
        self._work = threading.Event()  # set: the journal has something for this thread
        self._waiting = False  # this thread waits on _work: only then is it worth a set()
        self._topic = settings.topic
        self._stopping = threading.Event()
        self._close_timeout = settings.close_timeout

    def _new_producer(self) -> IntakeProducer:
        s = self.settings
        return IntakeProducer(s.bootstrap_servers, delivery_timeout_ms=s.delivery_timeout_ms,
                              config=dict(s.producer_config or {}))

    @property
    def own_spool(self) -> Path | None:
        return self.tracker.spool.directory if self.tracker is not None else None

    def open(self) -> None:
        """Create this process's spool, start the producer and adopt orphaned spools.
        Raises :class:`SpoolError` or :class:`ProducerError`."""
        spool = new_spool(self.settings.spool_dir)
        try:
            self.producer.start()
        except BaseException:
            spool.remove()
            raise
        s = self.settings
        self.journal = Journal(spool, self.encoder, self.metrics, max_pending=s.max_pending,
                               max_block_ms=s.max_block_ms, group_commit_ms=s.group_commit_ms,
                               unwaited_commit_ms=s.unwaited_commit_ms, wake=self._wake)
        self.tracker = Tracker(spool, self.metrics, self.backoff, self.journal.lock)
        self.orphans = Orphans(self.settings.spool_dir, spool.directory,
                               self.settings.orphan_scan_s, self.metrics, self.backoff)
        self.orphans.claim()  # captures of earlier processes go before this one's
        self._count_pending()

    def start(self) -> None:
        self.open()
        assert self.journal is not None and self.tracker is not None
        self.journal.start_syncer()
        self.tracker.record_head = self.journal.record_head
        self.thread = threading.Thread(target=self._run, name="evidence-client-sender",
                                       daemon=True)
        self.thread.start()

    def submit(self, exchange: Exchange, durable: Durable, *, lead: bool) -> None:
        """Hand a finished exchange to the journal; ``lead``: commit it on this thread unless
        a commit is under way, else leave it to the sender thread. Raises ``queue.Full`` after
        ``max_block_ms`` when ``max_pending`` captures are pending."""
        assert self.journal is not None
        wake = self.journal.put(exchange, durable)
        if lead:
            self.journal.lead(durable)
        elif wake:
            self._wake()

    def hurry(self) -> None:
        """A call waits for a capture from now on (:meth:`Durable.wait`): commit what is
        pending now rather than at the end of its ``unwaited_commit_ms`` window."""
        if self.journal is not None:
            self.journal.hurry()
        self._wake()

    def _wake(self) -> None:
        # A sender that is not waiting finds the capture at its next step (it looks before
        # it waits): setting the event then would only make that step's wait return for
        # nothing, one empty step a capture under load.
        if self._waiting:
            self._work.set()

    def stop(self, timeout: float) -> None:
        """Deliver what can be delivered within ``timeout`` s, then stop the thread; anything
        else stays in the spool for the next Recorder on this spool root."""
        if self.thread is None:
            return
        self._close_timeout = timeout
        self._stopping.set()
        self.thread.join(timeout + 30)
        if self.thread.is_alive():
            log.error("evidence sender thread did not stop; %d captures may be in memory only",
                      len(self.journal or ()) + len(self.tracker.unspooled if self.tracker else ()))

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.step(_IDLE_WAIT_S)
            except Exception:  # noqa: BLE001 - one bad step must not end recording
                self.metrics.add("errors")
                log.exception("evidence sender step failed; continuing")
                time.sleep(0.1)
        try:
            self._shutdown()
        except BaseException:  # noqa: BLE001 - keep the failure visible
            log.exception("evidence sender shutdown failed")
            self._shutdown_quietly()

    def step(self, idle_wait: float) -> None:
        """One round of the numbered steps of the module docstring, waiting up to
        ``idle_wait`` s on the queue when nothing is outstanding."""
        assert self.tracker is not None and self.orphans is not None
        outstanding = self.tracker.inflight > 0 or self.orphans.resending
        closing = self._stopping.is_set()
        if closing:
            idle_wait = 0.0
        elif outstanding:
            idle_wait = min(idle_wait, _REPORT_TICK_S)
        took = self.take_new(idle_wait)                           # 1
        # 2. Closing, nothing new comes: then the reports are what there is to wait for.
        self.producer.poll(_CLOSING_WAIT_S if closing and outstanding and not took else 0)
        if (self.producer.fatal is not None and self.tracker.inflight == 0
                and not self.orphans.resending):
            self._replace_producer()
        if self.tracker.respool:  # Kafka failed captures the disk had refused: try it again
            self._respool()
        self.tracker.ack(force=False)                             # 3
        self.orphans.claim(when_due=True)                         # 4
        if self.orphans.busy:                                     # 5
            self.orphans.resend(self._send, self._not_retried)
        else:
            self._send_own()
        self._count_pending()

    def take_new(self, wait: float = 0.0) -> int:
        """Commit what the journal holds (waiting up to ``wait`` s to be woken when nothing
        is due: no capture there, or only unwaited ones inside their window) and track every
        batch written since the last step, in spool order; returns how many captures were
        tracked. ``wait`` 0 (closing, the sender's own captures): commit all, due or not."""
        assert self.journal is not None and self.tracker is not None
        j = self.journal
        self._settle_failed_syncs()
        if wait > 0:
            self._waiting = True  # before the look: a put after it sees the flag and wakes
            try:
                if not j.written:
                    pause = min(wait, j.due_in())
                    if pause > 0:
                        self._work.wait(pause)
            finally:
                self._waiting = False
            self._work.clear()
        if wait <= 0 or j.due_in() <= 0:
            j.commit()
        n = 0
        for entries, spooled in j.take_written():
            self.tracker.track(entries, spooled)
            n += len(entries)
        return n

    def _settle_failed_syncs(self) -> None:
        """Captures the syncer could not make durable: a call waiting for one goes on once
        Kafka has it (at once if it already has), as when the disk refuses a write."""
        assert self.journal is not None
        for e, durable in self.journal.take_failed_syncs():
            if durable is None:
                continue
            if e.state == DONE:
                durable.set()
            else:
                e.durable = durable

    def _append(self, entries: list[Tracked]) -> None:
        """Write ``entries`` (made on this thread) through the journal and track them."""
        assert self.journal is not None
        self.journal.put_back(entries)
        self.take_new()

    def _respool(self) -> None:
        """Offer the journal the captures Kafka failed that the disk had refused: on disk if
        it takes writes again (then they wait there like any other), else unspooled again,
        sent from memory at the next produce."""
        assert self.tracker is not None
        entries, self.tracker.respool = self.tracker.respool, []
        self._append(entries)

    def _send(self, key: bytes, value: bytes, report: Report) -> None:
        self.producer.produce(self._topic, key, value, report)

    def _send_own(self) -> None:
        """Produce the own captures: those never on disk first, whatever the state."""
        t = self.tracker
        assert t is not None
        while t.unspooled:
            if not self._produce(t.unspooled.popleft()):
                return
        if self.producer.brokers_down or self.producer.fatal is not None:
            t.degraded = True
        window = self.producer.linger_s * ROUND_WINDOW
        while t.round_open(window):  # else the rest goes with the next round (ROUND_WINDOW)
            batch = t.to_send()
            if not batch:
                return
            for e in batch:
                if not self._produce(e):
                    return

    def _produce(self, e: Tracked) -> bool:
        """Produce one capture; False when the producer's queue is full (try again later)."""
        assert self.tracker is not None and e.value is not None
        try:
            self._send(e.key, e.value, lambda err, e=e: self._on_delivery(e, err))
        except ProducerError as err:
            if err.kind == RETRY:  # the local queue is full: the rest waits in the spool
                self.tracker.degraded = True
                if not e.spooled:
                    self.tracker.unspooled.appendleft(e)
                return False
            self._not_retried(e, err)
            return True
        self.tracker.sent(e)
        return True

    def _on_delivery(self, e: Tracked, err: ProducerError | None) -> None:
        assert self.tracker is not None
        refused = self.tracker.delivered(e, err)
        if refused is not None:
            self._not_retried(e, refused)

    def _not_retried(self, e: Tracked, err: ProducerError) -> None:
        """Kafka will never take ``e`` as it is: send it truncated, or keep it aside."""
        assert self.tracker is not None
        if e.value is None and e.spooled:
            self.tracker.reload([e])
        self.tracker.finish(e)
        value, e.value = e.value, None
        if err.kind == TOO_LARGE and value is not None:
            smaller = truncated(e.event_id, e.key, value)
            if smaller is not None:
                self.metrics.add("truncated")
                log.warning("capture %s is too large for Kafka (%s): resent truncated",
                            e.event_id, err)
                self._append([smaller])
                return
        self.metrics.add("undeliverable")
        log.error("capture %s cannot be delivered and is kept under %s/undeliverable: %s",
                  e.event_id, self.settings.spool_dir, err)
        try:
            keep_undeliverable(self.settings.spool_dir, self.tracker.spool.directory.name,
                               [(e.key, value or b"", f"{e.event_id} {err}")])
        except (SpoolError, OSError):
            self.metrics.add("failed")
            log.exception("capture %s is lost: it cannot be kept aside either", e.event_id)

    def _replace_producer(self) -> None:
        assert self.tracker is not None
        log.error("Kafka producer failed fatally (%s); starting a new one", self.producer.fatal)
        old, self.producer = self.producer, self._new_producer()
        self.producer.start()
        self.tracker.degraded = True
        old.close()

    def _count_pending(self) -> None:
        assert self.tracker is not None and self.orphans is not None
        self.metrics.pending = self.tracker.pending + self.orphans.pending()

    def _settled(self) -> bool:
        assert self.tracker is not None and self.orphans is not None
        return (not len(self.journal or ()) and self.tracker.inflight == 0
                and not self.tracker.unspooled and not self.tracker.respool
                and not self.orphans.resending
                and (self.metrics.pending == 0 or self.backoff.waiting()))

    def _shutdown(self) -> None:
        assert self.tracker is not None
        deadline = time.monotonic() + self._close_timeout
        # 1. Take everything the application handed over (it is on disk then), and keep
        #    delivering until nothing is pending or the time is up.
        while time.monotonic() < deadline:
            self.step(_CLOSING_WAIT_S)
            self.tracker.ack(force=True)
            self._count_pending()
            if self._settled():
                break
        self.take_new()
        self._shutdown_quietly()

    def _keep_what_is_in_memory(self) -> None:
        """At close: the captures the disk refused and Kafka does not have go to the spool,
        for the next Recorder on this root, if the disk takes them now; else they are lost,
        each counted and logged with its event id."""
        t = self.tracker
        assert t is not None
        left = [*t.respool, *t.unspooled]  # neither is in flight after the purge
        t.respool, t.unspooled = [], deque()
        if not left:
            return
        try:
            self._append(left)
        except Exception:  # noqa: BLE001 - counted below, as lost
            log.exception("writing the captures kept in memory to the spool failed")
        lost = t.unspooled
        t.unspooled = deque()
        for e in lost:
            e.state = DONE
            e.settle()
            self.metrics.add("failed")
            log.error("capture %s is lost: neither Kafka nor the disk took it before the "
                      "Recorder closed", e.event_id)

    def _shutdown_quietly(self) -> None:
        assert self.tracker is not None and self.orphans is not None
        # 1b. What was written without an fsync is made durable before the spool closes.
        if self.journal is not None:
            self.tracker.record_head = None  # from here on HEAD is written on this thread
            self.journal.stop_syncer(_SYNC_STOP_S)
            self._settle_failed_syncs()
        # 2. Fail whatever is still queued or in flight in the producer: those entries stay
        #    unacknowledged in the spool.
        try:
            self.producer.purge()
            for _ in range(50):
                self.producer.poll(0.02)
                if self.tracker.inflight == 0 and self.orphans.reported():
                    break
        except Exception:  # noqa: BLE001
            log.exception("purging the producer failed")
        self._keep_what_is_in_memory()
        # 3. Record what was delivered, then close the spools: an empty own spool is
        #    removed, anything left is an orphan for the next Recorder on this root.
        try:
            self.tracker.ack(force=True)
        except SpoolError:
            log.exception("recording deliveries in the spool failed; they will be resent")
        if self.tracker.inflight:
            log.error("%d captures got no delivery report at close; they stay in the spool",
                      self.tracker.inflight)
        self._count_pending()
        self.orphans.close()
        spool = self.tracker.spool
        if len(spool) == 0:
            spool.remove()
        else:
            spool.close()
        self.producer.close()
