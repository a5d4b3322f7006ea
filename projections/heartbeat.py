"""The log's end offsets, asked of Kafka off the projector's loop.

The heartbeat (:meth:`projections.store.Store.beat`) stores the log's end offsets as Kafka
gives them *now*: that is what proves the projector still reaches Kafka, and what readiness
measures lag against. Asking takes one broker round trip per partition (``cached=False``);
on the projector's own thread that stalled projecting for the whole query every beat, which
every record arriving meanwhile waited out (the tail of capture-to-queryable latency).

:class:`EndOffsets` asks from a thread of its own, with a consumer of its own (a librdkafka
client is not to be shared between threads mid-call), in one ListOffsets request for all
the partitions (:func:`list_end_offsets`), every ``interval_s``, for the
partitions the projector last said it owns (:meth:`EndOffsets.track`). The loop takes the
latest answer with :meth:`EndOffsets.latest`, only if it is fresh (asked within
``max_age_s``): Kafka not answering stays no heartbeat, as before.

After a failed ask the thread drops its AdminClient and makes a new one for the next try,
which comes sooner than the next beat and backs off to it (:func:`retry_delay`). A client
that has failed once can stay wedged long after the broker is back: after a broker was
stopped for 20 s (SIGSTOP, SIGCONT) the one client answered every ask with
``FENCED_LEADER_EPOCH`` for minutes (its cached metadata named an old leader epoch), the
heartbeat stopped and readiness said 503 for a projector that was projecting; a fresh client
fetches fresh metadata and answers at once. Readiness must say what is true within seconds
of Kafka's recovery.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from server.logs import event_logger

from .config import ProjectorConfig

__all__ = ["EndOffsets", "list_end_offsets", "retry_delay"]

log = event_logger("evidence.projector")


def list_end_offsets(admin: AdminClient, topic: str, partitions: list[int] | tuple[int, ...],
                     timeout: float) -> dict[int, int]:
    """The end offsets (read_committed: last stable offsets) of ``topic``'s ``partitions``,
    in one ListOffsets request per partition leader rather than one round trip a partition.
    Raises ``KafkaException`` (or ``RuntimeError``) when Kafka does not answer within
    ``timeout``."""
    if not partitions:
        return {}
    futures = admin.list_offsets(
        {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions},
        isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout)
    try:
        return {tp.partition: f.result(timeout=timeout + 5.0).offset
                for tp, f in futures.items()}
    except FutureTimeout:
        raise RuntimeError(f"no end offsets of {topic} within {timeout:g} s") from None


FIRST_RETRY_S = 0.25


def retry_delay(failures: int, interval_s: float) -> float:
    """Seconds to wait before the next ask after ``failures`` failed asks in a row: from
    ``FIRST_RETRY_S``, doubled each time, never more than ``interval_s`` (a failing Kafka is
    asked no more often than a healthy one once it has failed a few times; a recovered one
    is asked again within a beat)."""
    if failures <= 0:
        return interval_s
    return min(interval_s, FIRST_RETRY_S * 2 ** min(failures - 1, 30))


class EndOffsets:
    """End offsets (read_committed: last stable offsets) of ``topic``'s tracked partitions,
    refreshed every ``interval_s`` by a daemon thread; see the module docstring.
    ``make_admin``: makes the thread's admin client (by default an ``AdminClient`` of
    ``cfg.bootstrap``); called again after each failed ask."""

    def __init__(self, cfg: ProjectorConfig, topic: str, interval_s: float,
                 timeout_s: float = 2.0, make_admin: Callable[[], Any] | None = None) -> None:
        self.cfg, self.topic = cfg, topic
        self._make_admin = make_admin or self._admin
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self._lock = threading.Lock()
        self._partitions: tuple[int, ...] = ()
        self._latest: tuple[float, tuple[int, ...], dict[int, int]] | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0  # failed asks since the start, for the logs

    def start(self) -> "EndOffsets":
        self._thread = threading.Thread(target=self._run, name="end-offsets", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s * 4 + 5)
            self._thread = None

    def __enter__(self) -> "EndOffsets":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def track(self, partitions: list[int]) -> None:
        """Ask for these partitions from now on (the projector's assignment changed)."""
        parts = tuple(sorted(partitions))
        with self._lock:
            if parts == self._partitions:
                return
            self._partitions = parts
        self._wake.set()

    def latest(self, max_age_s: float) -> dict[int, int] | None:
        """The last answer for exactly the tracked partitions if it was asked for within
        ``max_age_s``; else None (no heartbeat this time)."""
        with self._lock:
            got, parts = self._latest, self._partitions
        if got is None:
            return None
        at, asked, ends = got
        if asked != parts or time.monotonic() - at > max_age_s:
            return None
        return dict(ends)

    # -- the thread --------------------------------------------------------------------------
    def _run(self) -> None:
        admin: Any = None
        in_a_row = 0
        try:
            while not self._stop.is_set():
                with self._lock:
                    parts = self._partitions
                started = time.monotonic()
                if parts:
                    try:
                        if admin is None:
                            admin = self._make_admin()
                        ends = self._ask(admin, parts)
                        with self._lock:
                            self._latest = (time.monotonic(), parts, ends)
                        if in_a_row:
                            log("info", "end_offsets_recovered", topic=self.topic,
                                failures=in_a_row)
                        in_a_row = 0
                    except (KafkaException, RuntimeError) as e:
                        # Never ask the same client again: see the module docstring (a
                        # client wedged on stale metadata after a broker stall).
                        admin = None
                        in_a_row += 1
                        self.failures += 1
                        if self.failures == 1 or self.failures % 30 == 0:
                            log("warning", "end_offsets_failed", error=str(e), topic=self.topic,
                                failures=self.failures,
                                message="Kafka did not give the log's end offsets; the "
                                        "heartbeat waits for the next answer")
                # Every interval_s from the start of an ask that answered; after a failure,
                # the backoff from its end (a fresh client's try should not be a tight loop).
                wait = (retry_delay(in_a_row, self.interval_s) if in_a_row else
                        self.interval_s - (time.monotonic() - started))
                self._wake.wait(max(0.0, wait))
                self._wake.clear()
        finally:
            admin = None  # an AdminClient has no close; dropping it ends its threads

    def _admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.cfg.bootstrap,
                            "client.id": f"evidence-end-offsets-{uuid.uuid4().hex[:12]}"})

    def _ask(self, admin: Any, parts: tuple[int, ...]) -> dict[int, int]:
        return list_end_offsets(admin, self.topic, parts, self.timeout_s)
