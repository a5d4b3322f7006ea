"""The projector: consume ``<prefix>.log`` (read_committed) into the live generation.

The only module of the projections that imports confluent-kafka. Positions live in
PostgreSQL, never in Kafka's group offsets: the consumer is ``assign()``-ed to every partition
of the log at the offsets stored in the generation being written (it commits nothing to
Kafka; its group id only satisfies the client).

- :class:`LogReader` — the consumer: assign at positions, poll, watermarks, end offsets.
- :class:`GenerationWriter` — drives one generation: poll, decode, ``Store.apply``; on
  ``PositionsMoved`` it re-seeks to the stored positions and drops the batch.
- :class:`Projector` — the service loop (``evidence projector``): follows the live
  generation, re-seeking when a swap makes another generation live; beats its heartbeat
  (:meth:`Store.beat`: the log's end offsets from Kafka, every ``heartbeat_s``); stops after
  the batch in flight when asked (SIGTERM).

The projector rides out Kafka and PostgreSQL outages: a ``LogError`` or a transient
``StoreError`` (connection lost, server restarting, Kafka unreachable at start) closes both
connections, waits (backoff from ``BACKOFF_MIN_S`` doubling to ``BACKOFF_MAX_S``, reset after
``HEALTHY_AFTER_S`` of work) and opens them again, seeking to the positions stored in
PostgreSQL: a batch whose transaction did not commit is consumed again, one that did is not.
Any other error ends it.
"""

from __future__ import annotations

import time
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Callable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from server.kafka import kafka_errors, translate
from server.logs import event_logger

from .config import ProjectorConfig
from .errors import GenerationChanged, LogError, PositionsMoved, ProjectionError, StoreError
from .fold import decode_message
from .metrics import ProjectorMetrics
from .store import Store

__all__ = ["Batch", "GenerationWriter", "LogReader", "Projector", "heals"]

# Reconnecting is cheap (one connection each), and readiness waits on it: a short ceiling.
BACKOFF_MIN_S, BACKOFF_MAX_S, HEALTHY_AFTER_S = 0.5, 10.0, 30.0
# Errors a consumer reports in place of a message while librdkafka reconnects by itself.
_PASSING = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE,
                      KafkaError._TIMED_OUT})

log = event_logger("evidence.projector")


def heals(e: BaseException) -> bool:
    """Whether the projector rides ``e`` out (new connections, re-seek) rather than exiting."""
    return isinstance(e, LogError) or (isinstance(e, StoreError) and e.transient)


def _kafka_errors(what: str) -> AbstractContextManager[None]:
    """confluent-kafka errors become ``LogError`` (code, name and flags kept), by
    :mod:`server.kafka`."""
    return kafka_errors(f"Kafka: {what}", LogError)


@dataclass
class Batch:
    """One poll: messages as (partition, offset, value), and partition ends reached."""

    messages: list[tuple[int, int, bytes | None]] = field(default_factory=list)
    reached: dict[int, int] = field(default_factory=dict)


class LogReader:
    """A read_committed consumer of the log topic, positioned by the caller."""

    def __init__(self, cfg: ProjectorConfig, purpose: str = "projector") -> None:
        self.cfg = cfg
        self.topic = cfg.log_topic
        self.purpose = purpose
        self._consumer: Consumer | None = None
        self._partitions: list[int] = []

    def start(self, wait_s: float = 60.0) -> "LogReader":
        with _kafka_errors("create consumer"):
            self._consumer = Consumer({
                "bootstrap.servers": self.cfg.bootstrap,
                # Never used to commit: positions are in PostgreSQL. Unique so that no group
                # coordinator state is shared between projectors.
                "group.id": f"evidence-{self.purpose}-{uuid.uuid4().hex[:12]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
            })
        deadline = time.monotonic() + wait_s
        while True:
            with _kafka_errors("list topics"):
                md = self._consumer.list_topics(self.topic, timeout=10)
            t = md.topics.get(self.topic)
            if t is not None and t.error is None and t.partitions:
                self._partitions = sorted(t.partitions)
                return self
            if time.monotonic() > deadline:
                raise LogError(f"log topic {self.topic} does not exist")
            log("info", "waiting_for_topic", topic=self.topic)
            time.sleep(1.0)

    def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            try:
                consumer.close()
            except KafkaException as e:
                log("warning", "consumer_close_failed", error=str(e))

    def __enter__(self) -> "LogReader":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def partitions(self) -> list[int]:
        return list(self._partitions)

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            raise LogError("log reader is not started")
        return self._consumer

    def seek(self, positions: Mapping[int, int]) -> None:
        """(Re)assign every partition at ``positions``; messages fetched before are dropped."""
        with _kafka_errors("assign"):
            self.consumer.assign([TopicPartition(self.topic, p, positions.get(p, 0))
                                  for p in self._partitions])

    def poll(self, max_messages: int, timeout: float) -> Batch:
        """Up to ``max_messages``, returned as soon as there are any; waits at most ``timeout``.

        ``Consumer.consume(n, timeout)`` waits out the whole timeout unless ``n`` messages
        arrive, which put up to ``timeout`` (0.5 s) between a record's commit and its row
        whenever the log is not busy. Instead: take what is already fetched; if nothing is,
        wait for the first message only, then take what came with it. Under load the
        prefetch queue keeps batches large; when quiet, a record is written as it arrives.
        """
        batch = Batch()
        consumer = self.consumer
        with _kafka_errors("consume"):
            msgs = consumer.consume(num_messages=max_messages, timeout=0)
            if not msgs:
                first = consumer.poll(timeout)
                if first is not None:
                    msgs = [first]
                    if max_messages > 1:
                        msgs += consumer.consume(num_messages=max_messages - 1, timeout=0)
        for m in msgs:
            err = m.error()
            if err is None:
                batch.messages.append((m.partition(), m.offset(), m.value()))
            elif err.code() == KafkaError._PARTITION_EOF:
                # Every offset below this one is consumed, control records included.
                batch.reached[m.partition()] = max(m.offset(), batch.reached.get(m.partition(), 0))
            elif err.fatal() or not (err.retriable() or err.code() in _PASSING):
                raise translate(err, "Kafka: consume", LogError)
            else:
                log("warning", "consume_error", error=err.str(), code=err.name())
        return batch

    def watermarks(self) -> dict[int, int]:
        """High watermarks (the last stable offset, read_committed) from the last fetches."""
        out = {}
        for p in self._partitions:
            try:
                lo, hi = self.consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), cached=True)
            except KafkaException:
                continue
            if hi is not None and hi >= 0:
                out[p] = hi
        return out

    def end_offsets(self, timeout: float = 10.0) -> dict[int, int]:
        """The partitions' ends now, asked of the broker (read_committed: last stable offset);
        the first partition that gets no answer within ``timeout`` raises ``LogError``."""
        out = {}
        for p in self._partitions:
            with _kafka_errors("query watermarks"):
                _lo, hi = self.consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=timeout, cached=False)
            out[p] = hi
        return out


class GenerationWriter:
    """Projects the log into one generation, batch by batch, from its stored positions."""

    def __init__(self, store: Store, reader: LogReader, generation: str, *,
                 follow_live: bool, metrics: ProjectorMetrics | None = None) -> None:
        self.store = store
        self.reader = reader
        self.generation = generation
        self.follow_live = follow_live
        self.metrics = metrics or ProjectorMetrics()
        self.expected: dict[int, int] = {}
        self.records = 0
        self._last_write = 0.0

    def seek_to_stored(self) -> None:
        stored = self.store.positions(self.generation, self.reader.topic)
        self.expected = {p: stored.get(p, 0) for p in self.reader.partitions}
        self.reader.seek(self.expected)
        log("info", "seek", generation=self.generation, positions=self.expected)

    def caught_up(self, targets: Mapping[int, int]) -> bool:
        return all(self.expected.get(p, 0) >= t for p, t in targets.items())

    def step(self, max_messages: int, timeout: float, idle_update_s: float = 1.0) -> int:
        """Poll once and write what came; returns records stored (0 when idle or re-seeking).

        Raises ``GenerationChanged`` (follow_live) with the batch discarded.
        """
        batch = self.reader.poll(max_messages, timeout)
        reached = {p: o for p, o in batch.reached.items() if o > self.expected.get(p, 0)}
        now = time.monotonic()
        if not batch.messages and not reached and now - self._last_write < idle_update_s:
            return 0
        watermarks = self.reader.watermarks()
        t0 = time.perf_counter()
        msgs = ((decode_message(p, o, v) for p, o, v in batch.messages)
                if batch.messages else ())
        try:
            folded = self.store.apply(self.generation, self.reader.topic, self.expected, msgs,
                                      reached, watermarks, follow_live=self.follow_live)
        except PositionsMoved as e:
            log("warning", "positions_moved", generation=self.generation, stored=e.positions,
                expected=self.expected)
            self.expected = {p: e.positions.get(p, 0) for p in self.reader.partitions}
            self.reader.seek(self.expected)
            return 0
        self._last_write = now
        self.expected = dict(folded.next_offsets)
        m = self.metrics
        if batch.messages:
            m.batch_seconds.observe(time.perf_counter() - t0)
        m.projected.inc(len(folded.rows))
        for f in folded.findings:
            m.findings.labels(f.kind).inc()
            log("warning", "finding", generation=self.generation, kind=f.kind, stream=f.stream,
                seq=f.seq, partition=f.partition, offset=f.offset, detail=f.detail)
        m.lag.set(sum(max(0, watermarks.get(p, 0) - o) for p, o in self.expected.items()))
        self.records += len(folded.rows)
        return len(folded.rows)


class Projector:
    """The ``evidence projector`` service loop; see the module docstring."""

    def __init__(self, cfg: ProjectorConfig, metrics: ProjectorMetrics | None = None) -> None:
        self.cfg = cfg
        self.metrics = metrics or ProjectorMetrics()
        self.sessions = 0

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Project until ``should_stop()``; it is checked between batches, never inside one.

        Outages are ridden out (module docstring); an error that does not heal is raised."""
        backoff = BACKOFF_MIN_S
        while not should_stop():
            started = time.monotonic()
            try:
                self._session(should_stop)
                return
            except ProjectionError as e:
                if not heals(e):
                    raise
                if time.monotonic() - started >= HEALTHY_AFTER_S:
                    backoff = BACKOFF_MIN_S
                self.metrics.reconnects.inc()
                log("warning", "reconnecting", error=str(e), error_type=type(e).__name__,
                    sqlstate=getattr(e, "sqlstate", None), code=getattr(e, "name", None),
                    retry_in_s=backoff, session=self.sessions,
                    message="opening PostgreSQL and Kafka again; projecting resumes from the "
                            "positions stored in PostgreSQL")
                deadline = time.monotonic() + backoff
                while not should_stop() and time.monotonic() < deadline:
                    time.sleep(0.05)
                backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _session(self, should_stop: Callable[[], bool]) -> None:
        """One pair of connections, from the stored positions until stopped or broken."""
        cfg = self.cfg
        self.sessions += 1
        with Store(cfg) as store, LogReader(cfg) as reader:
            gen = store.live_generation(create=True)
            writer = self._writer(store, reader, gen)
            log("info", "started", generation=gen, topic=reader.topic,
                partitions=len(reader.partitions), meta=cfg.meta_schema, session=self.sessions)
            reported, report_at = 0, time.monotonic()
            beat_at = self._beat(store, reader, gen)
            while not should_stop():
                try:
                    writer.step(cfg.batch_max_messages, cfg.poll_timeout_s,
                                    cfg.idle_update_s)
                except GenerationChanged as e:
                    # A swap: the batch was rolled back; continue in the new live generation
                    # from its own stored positions.
                    gen = e.generation or store.live_generation(create=True)
                    log("info", "generation_changed", generation=gen, previous=writer.generation)
                    writer = self._writer(store, reader, gen)
                    reported, beat_at = 0, self._beat(store, reader, gen)
                    continue
                if time.monotonic() - beat_at >= cfg.heartbeat_s:
                    beat_at = self._beat(store, reader, gen)
                if writer.records != reported and time.monotonic() - report_at >= 5.0:
                    log("info", "progress", generation=gen, records=writer.records - reported,
                        positions=writer.expected)
                    reported, report_at = writer.records, time.monotonic()
            log("info", "stopped", generation=gen, positions=writer.expected)

    def _beat(self, store: Store, reader: LogReader, gen: str) -> float:
        """Store the log's end offsets as Kafka gives them now; returns when it was tried.
        Kafka not answering is no heartbeat (readiness then says so); PostgreSQL failing is
        the session's failure."""
        at = time.monotonic()
        try:
            ends = reader.end_offsets(timeout=min(2.0, self.cfg.heartbeat_s))
        except LogError as e:
            log("warning", "heartbeat_skipped", error=str(e),
                message="Kafka did not give the log's end offsets; no heartbeat this time")
            return at
        if store.beat(gen, reader.topic, ends):
            self.metrics.heartbeat.set(time.time())
        return at

    def _writer(self, store: Store, reader: LogReader, gen: str) -> GenerationWriter:
        store.follow(gen)
        w = GenerationWriter(store, reader, gen, follow_live=True, metrics=self.metrics)
        w.seek_to_stored()
        return w
