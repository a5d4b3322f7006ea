"""The sender: the one thread that owns a Recorder's producer, its own spool and the delivery
tracking (:mod:`~evidence_client.tracking`), and the adopted orphans
(:mod:`~evidence_client.orphans`).

The application's threads only put an :class:`Exchange` on a bounded in-memory queue
(``max_pending``; a full queue waits at most ``max_block_ms``) and wait on its
:class:`Durable`. The sender thread does everything else, one step at a time:

1. take what was submitted, encode it (:mod:`~evidence_client.encoder`), append it to the own
   spool with one fsync (group commit), and release the calls waiting for it;
2. serve the producer's delivery reports (``poll(0)``);
3. acknowledge the spool's delivered prefix;
4. adopt orphans when a scan is due;
5. produce: an adopted spool's next batch while any waits (earlier captures first), else the
   own captures.

Keeping all delivery state on that one thread is what makes the ordering argument of
:mod:`~evidence_client.tracking` simple. An exception in one step is logged and counted; the
thread goes on (it stops only in :meth:`Sender.stop`).

A lone call waits for nothing but its own fsync. An idle sender waits on the queue, so a
capture is taken the moment it is submitted. With deliveries outstanding it still waits on the
queue, never in the producer's poll: at most 1 ms at a time, then it serves whatever reports
arrived. A capture taken alone is written at once; only a batch that already found company
(several calls finished together) within ``group_commit_ms`` of the last fsync waits that long
for more to share the next fsync, so under load a Recorder makes at most a few hundred fsyncs a
second, not one a capture.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from pathlib import Path

from .capture import Exchange
from .encoder import CaptureEncoder, truncated
from .errors import ProducerError, SpoolError
from .metrics import Metrics
from .orphans import Orphans, Report
from .producer import RETRY, TOO_LARGE, IntakeProducer
from .settings import RecorderSettings
from .spool import keep_undeliverable, new_spool
from .tracking import TAKE_BATCH, Backoff, Tracked, Tracker

__all__ = ["Durable", "Sender"]

log = logging.getLogger("evidence_client.recorder")  # the logger these lines always had

_REPORT_TICK_S = 0.001
"""With deliveries outstanding, how long the sender waits on the queue before it serves the
delivery reports that arrived meanwhile."""
_IDLE_WAIT_S = 0.02
_CLOSING_WAIT_S = 0.05  # closing, with deliveries outstanding: a wait in the producer's poll


class Durable:
    """The answer to "is my capture on disk yet?" for one call.

    :meth:`wait` blocks until the sender thread has fsync'd the capture to the spool, at most
    ``timeout`` s; a capture still not on disk then is counted (``metrics.slow_durable``) and
    the call goes on, its capture still queued."""

    __slots__ = ("_event", "_timeout", "_metrics")

    def __init__(self, timeout: float, metrics: Metrics) -> None:
        self._event = threading.Event()
        self._timeout = timeout
        self._metrics = metrics

    def set(self) -> None:
        self._event.set()

    @property
    def ready(self) -> bool:
        return self._event.is_set()

    def wait(self) -> bool:
        if self._event.wait(self._timeout):
            return True
        self._metrics.add("slow_durable")
        log.warning("a capture was not on disk within %.1f s; the call goes on", self._timeout)
        return False


class Sender:
    """One Recorder's sender. ``Sender(...)`` does no I/O; :meth:`start` (or :meth:`open`,
    which starts no thread: tests drive :meth:`step` themselves) creates the spool and the
    producer and adopts orphans; :meth:`stop` delivers what it can and lets go of both."""

    def __init__(self, settings: RecorderSettings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.queue: queue.Queue[tuple[Exchange, Durable]] = queue.Queue(settings.max_pending)
        self.producer = self._new_producer()
        self.encoder = CaptureEncoder(settings, metrics)
        self.backoff = Backoff()
        self.tracker: Tracker | None = None
        self.orphans: Orphans | None = None
        self.thread: threading.Thread | None = None
        self.last_append = float("-inf")  # monotonic end of the last spool append
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
        self.tracker = Tracker(spool, self.metrics, self.backoff)
        self.orphans = Orphans(self.settings.spool_dir, spool.directory,
                               self.settings.orphan_scan_s, self.metrics, self.backoff)
        self.orphans.claim()  # captures of earlier processes go before this one's
        self._count_pending()

    def start(self) -> None:
        self.open()
        self.thread = threading.Thread(target=self._run, name="evidence-client-sender",
                                       daemon=True)
        self.thread.start()

    def submit(self, exchange: Exchange, durable: Durable) -> None:
        """Queue a finished exchange; raises ``queue.Full`` after ``max_block_ms``."""
        self.queue.put((exchange, durable), timeout=self.settings.max_block_ms / 1000)

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
                      self.queue.qsize() + len(self.tracker.unspooled if self.tracker else ()))

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
        self.tracker.ack(force=False)                             # 3
        self.orphans.claim(when_due=True)                         # 4
        if self.orphans.busy:                                     # 5
            self.orphans.resend(self._send, self._not_retried)
        else:
            self._send_own()
        self._count_pending()

    def take_new(self, wait: float = 0.0) -> int:
        """Take what the application submitted (waiting up to ``wait`` s for the first),
        make it durable with one fsync, release its calls; returns how many were taken."""
        q = self.queue
        try:
            batch = [q.get(timeout=wait) if wait > 0 else q.get_nowait()]
        except queue.Empty:
            return 0
        _drain(q, batch, 0.0)
        linger = self.settings.group_commit_ms / 1000
        if (len(batch) > 1 and linger > 0 and not self._stopping.is_set()
                and time.monotonic() - self.last_append < linger):
            _drain(q, batch, linger)  # under load: let more share this fsync
        self._append([e for e in map(self.encoder.encode, (ex for ex, _ in batch))
                      if e is not None])
        for _, durable in batch:
            durable.set()
        return len(batch)

    def _append(self, entries: list[Tracked]) -> None:
        assert self.tracker is not None
        if entries and self.tracker.append(entries):
            self.last_append = time.monotonic()

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
        for e in t.to_send():
            if not self._produce(e):
                break

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
        return (self.queue.empty() and self.tracker.inflight == 0
                and not self.tracker.unspooled and not self.orphans.resending
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

    def _shutdown_quietly(self) -> None:
        assert self.tracker is not None and self.orphans is not None
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


def _drain(q: "queue.Queue[tuple[Exchange, Durable]]", batch: list[tuple[Exchange, Durable]],
           linger: float) -> None:
    """Add what is queued to ``batch`` (up to a take's worth), waiting up to ``linger`` s
    for more once the queue is empty."""
    until = time.monotonic() + linger
    while len(batch) < TAKE_BATCH:
        try:
            batch.append(q.get_nowait())
        except queue.Empty:
            left = until - time.monotonic()
            if left <= 0:
                return
            try:
                batch.append(q.get(timeout=left))
            except queue.Empty:
                return
