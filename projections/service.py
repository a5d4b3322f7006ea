"""The projector: consume ``<prefix>.log`` (read_committed) into the live generation.

The only module of the projections that imports confluent-kafka. Positions live in
PostgreSQL, never in Kafka's group offsets: nothing is ever committed to Kafka.

Scale-out: the projector's log consumer joins a consumer group
(``ProjectorConfig.consumer_group``, ``EVIDENCE_PROJECTOR_GROUP``; by default one per topic
prefix and meta schema, i.e. one per projection) and projects only the log partitions the
group gives it, each ``assign()``-ed, inside the rebalance callback, at the offset stored in
the generation being written. Several projectors on one database therefore split the log by
partition; one alone gets every partition and works as before. Partition ``p`` of
``<prefix>.checkpoints`` and ``<prefix>.erasures`` goes with log partition ``p``: the writer
produces a stream's checkpoints, and the receipt of an erasure request, on the intake
partition it came from, which is the stream's log partition, so a checkpoint is checked
against a tree that the same process grows (those two readers are plain ``assign()``-ed
consumers that follow the log consumer's assignment; subscribing them in the group too would
leave their partition split to the assignor). A batch of a partition another projector has
just taken is refused by the stored positions (``PositionsMoved``), so a projector that
lost its partitions without knowing it (stalled past the session timeout) never writes a
record twice. ``<prefix>.tree`` has one partition (the deployment log, docs/witnessing.md):
whoever owns log partition 0 owns it too (:func:`tree_partitions`), so one projector of a
projection folds it at a time. Rebuilds (:mod:`projections.rebuild`) still read every
partition, alone.

- :class:`LogReader` — the consumer: assign at positions (all of a topic's partitions, a
  set another reader owns, or what the consumer group gives it), poll, watermarks, ends.
- :class:`GenerationWriter` — drives one generation: poll, decode, ``Store.apply``; on
  ``PositionsMoved`` it re-seeks to the stored positions and drops the batch.
- :class:`CheckpointWriter` — the same for ``<prefix>.checkpoints`` (a second reader, its
  own positions in the same table): signed checkpoints and cosignatures
  (:mod:`projections.tlog`, ``Store.apply_checkpoints``). A stack whose checkpoints topic
  does not exist (yet) projects its records all the same; the next session looks again.
- :class:`ErasureWriter` — the same for ``<prefix>.erasures``: the signed erasure receipts
  (:mod:`projections.erasures`, ``Store.apply_erasures``), verified with the log key.
- :class:`TreeWriter` — the same for ``<prefix>.tree``: the deployment log's entries, its
  tree, its signed checkpoints and their cosignatures (:mod:`projections.logtree`,
  ``Store.apply_log``). Like the checkpoints topic, it may not exist (yet).
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
from typing import Any, Callable, Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from server.kafka import kafka_errors, translate
from server.logs import event_logger

from .config import ProjectorConfig
from .errors import GenerationChanged, LogError, PositionsMoved, ProjectionError, StoreError
from .fold import decode_message
from .heartbeat import EndOffsets, list_end_offsets
from .erasures import decode_receipt
from .logtree import decode_tree_message
from .tlog import decode_checkpoint
from .metrics import ProjectorMetrics
from .store import Store

__all__ = ["Batch", "CheckpointWriter", "ErasureWriter", "GenerationWriter", "LogReader",
           "Projector", "TreeWriter", "heals", "tree_partitions"]

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
    headers: list[list[tuple[str, bytes | None]] | None] = field(default_factory=list)
    """Per message, its headers; only from a reader made with ``headers=True``."""


class LogReader:
    """A read_committed consumer of the log topic (or ``topic``), positioned by the caller.

    ``required=False``: a topic that does not exist gives a reader of no partitions instead
    of an error (the checkpoints topic of a stack made before it).

    ``group``: subscribe in that consumer group instead of taking every partition; the
    reader then owns what the group assigns it, and calls ``on_assigned(partitions)`` inside
    the rebalance callback (where it must :meth:`seek`: nothing is committed to Kafka, so
    without a seek there is no position). ``rebalances`` counts the callbacks, so a caller
    can tell that a poll crossed one. :meth:`own` narrows a reader without a group to the
    partitions another reader owns."""

    def __init__(self, cfg: ProjectorConfig, purpose: str = "projector", *,
                 topic: str | None = None, headers: bool = False,
                 required: bool = True, group: str | None = None) -> None:
        self.cfg = cfg
        self.topic = topic or cfg.log_topic
        self.purpose = purpose
        self.headers = headers
        self.required = required
        self.group = group
        self.on_assigned: Callable[[list[int]], None] | None = None
        self.rebalances = 0
        self._consumer: Consumer | None = None
        self._admin: AdminClient | None = None  # end offsets: one ListOffsets a call
        self._partitions: list[int] = []
        self._all: list[int] = []
        self._failure: BaseException | None = None

    def start(self, wait_s: float = 60.0) -> "LogReader":
        with _kafka_errors("create consumer"):
            self._consumer = Consumer({
                "bootstrap.servers": self.cfg.bootstrap,
                # Never used to commit: positions are in PostgreSQL. Without a group, unique
                # so that no group coordinator state is shared between readers; with one, it
                # only splits the partitions between the projectors of one projection.
                "group.id": self.group or f"evidence-{self.purpose}-{uuid.uuid4().hex[:12]}",
                # A projector killed -9 gives its partitions up after this (no static
                # membership: a restarted projector is a new member, and rejoins at once).
                "session.timeout.ms": self.cfg.group_session_timeout_ms,
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
                self._all = sorted(t.partitions)
                if self.group:
                    with _kafka_errors("subscribe"):
                        self._consumer.subscribe([self.topic], on_assign=self._assigned,
                                                 on_revoke=self._revoked,
                                                 on_lost=self._revoked)
                else:
                    self._partitions = list(self._all)
                return self
            if not self.required:
                log("warning", "topic_absent", topic=self.topic,
                    message="not projected in this session; the next one looks again")
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

    def own(self, partitions: list[int]) -> None:
        """Read only ``partitions`` (those of them the topic has) from the next :meth:`seek`."""
        self._partitions = sorted(set(partitions) & set(self._all))

    def _assigned(self, consumer: Consumer, tps: list[TopicPartition]) -> None:
        # Inside poll(): librdkafka's rebalance callback. An error here must not vanish: it is
        # kept and raised by the poll that ran the callback.
        self.rebalances += 1
        self._partitions = sorted(tp.partition for tp in tps)
        log("info", "partitions_assigned", topic=self.topic, group=self.group,
            partitions=self._partitions)
        try:
            if self.on_assigned is not None:
                self.on_assigned(self.partitions)
            else:
                self.seek({})
        except BaseException as e:  # noqa: BLE001 - re-raised by poll()
            self._failure = self._failure or e
            self._partitions = []
            consumer.assign([])

    def _revoked(self, consumer: Consumer, tps: list[TopicPartition]) -> None:
        self.rebalances += 1
        gone = {tp.partition for tp in tps}
        self._partitions = [p for p in self._partitions if p not in gone]
        log("info", "partitions_revoked", topic=self.topic, group=self.group,
            partitions=sorted(gone))
        try:
            consumer.unassign()
            if self.on_assigned is not None:
                self.on_assigned(self.partitions)
        except BaseException as e:  # noqa: BLE001 - re-raised by poll()
            self._failure = self._failure or e

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            raise LogError("log reader is not started")
        return self._consumer

    def seek(self, positions: Mapping[int, int]) -> None:
        """(Re)assign every partition (of ours) at ``positions``; messages fetched before
        are dropped. A group member that owns nothing yet has nothing to position."""
        if self.group and not self._partitions:
            return
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
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        for m in msgs:
            err = m.error()
            if err is None:
                batch.messages.append((m.partition(), m.offset(), m.value()))
                if self.headers:
                    batch.headers.append(m.headers())
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
        if not self._partitions:
            return {}
        with _kafka_errors("list end offsets"):
            if self._admin is None:
                self._admin = AdminClient({"bootstrap.servers": self.cfg.bootstrap})
            try:
                return list_end_offsets(self._admin, self.topic, self._partitions, timeout)
            except RuntimeError as e:  # the answer did not come within the timeout
                self._admin = None
                raise LogError(f"Kafka: {e}") from None
            except KafkaException:
                # A client that failed can stay wedged on stale metadata after a broker
                # stall (projections.heartbeat): the next ask makes a fresh one.
                self._admin = None
                raise


def generation_policy(store: Any, generation: str) -> Any:
    """The redaction policy ``generation``'s rows are built with: the one it records; a
    generation that records none yet (older than the redaction table) takes the configured
    one and records it. A configured policy other than the recorded one is logged (it takes
    a rebuild to apply), never applied to half a generation."""
    configured = store.cfg.redaction() if hasattr(store, "cfg") else None
    if not callable(getattr(store, "redaction", None)):
        return configured
    recorded, stored = store.redaction(generation)
    if not recorded:
        store.record_redaction(generation, configured)
        return configured
    digest = lambda p: None if p is None else p.digest.hex()  # noqa: E731
    if digest(stored) != digest(configured):
        log("warning", "redaction_policy_differs", generation=generation,
            recorded=digest(stored), configured=digest(configured),
            message="EVIDENCE_REDACTION_FILE differs from the policy this generation was "
                    "built with; it is kept until `evidence projections rebuild`")
    return stored


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
        # The redaction policy every row is masked with (projections.redact): the one the
        # generation records, read once. A generation is built with one policy; a new
        # policy takes a rebuild (which records the file's policy in its new generation).
        self.redaction = generation_policy(store, generation)
        # A rebuild's bulk load (projections.bulk) while set: batches are folded here and
        # written by its thread.
        self.bulk: Any = None
        self._notify_warned: float | None = None  # when notify_failed was last logged

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
        rebalances = self.reader.rebalances
        batch = self.reader.poll(max_messages, timeout)
        if self.reader.rebalances != rebalances:
            # The poll crossed a rebalance: the batch may hold messages of partitions that
            # are no longer ours, or fetched before the callback's seek. Drop it; read again
            # from the stored positions of what we own now.
            self.reader.seek(self.expected)
            return 0
        reached = {p: o for p, o in batch.reached.items() if o > self.expected.get(p, 0)}
        now = time.monotonic()
        if not batch.messages and not reached and now - self._last_write < idle_update_s:
            return 0
        watermarks = self.reader.watermarks()
        t0 = time.perf_counter()
        try:
            if self.bulk is not None:
                folded = self.bulk.apply(self.expected, batch.messages, reached, watermarks,
                                         self.redaction)
            else:
                msgs = ((decode_message(p, o, v, self.redaction) for p, o, v in batch.messages)
                        if batch.messages else ())
                folded = self.store.apply(self.generation, self.reader.topic, self.expected,
                                          msgs, reached, watermarks,
                                          follow_live=self.follow_live)
        except PositionsMoved as e:
            log("warning", "positions_moved", generation=self.generation, stored=e.positions,
                expected=self.expected)
            self.expected = {p: e.positions.get(p, 0) for p in self.reader.partitions}
            self.reader.seek(self.expected)
            return 0
        self._last_write = now
        self.expected = dict(folded.next_offsets)
        if self.follow_live and folded.heads:
            self._notify(folded.heads)
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

    def _notify(self, streams: Iterable[str]) -> None:
        # Best effort (projections.notify): the batch is committed whatever happens here; a
        # failure is logged once a minute at most, and waiters fall back to re-reading.
        try:
            self.store.notify_heads(streams)
        except StoreError as e:
            now = time.monotonic()
            if self._notify_warned is None or now - self._notify_warned >= 60.0:
                self._notify_warned = now
                log("warning", "notify_failed", generation=self.generation, error=str(e))


class CheckpointWriter(GenerationWriter):
    """Projects ``<prefix>.checkpoints`` into one generation: checkpoints, cosignatures, and
    their findings (a root that is not the projected tree's, an unreadable or forged note)."""

    def __init__(self, store: Store, reader: LogReader, generation: str, *,
                 follow_live: bool, metrics: ProjectorMetrics | None = None) -> None:
        super().__init__(store, reader, generation, follow_live=follow_live, metrics=metrics)
        cfg = reader.cfg
        self.log_name, self.log_key = cfg.log_name, cfg.log_key()

    def step(self, max_messages: int, timeout: float, idle_update_s: float = 1.0) -> int:
        """Poll once and write what came; returns the messages stored."""
        if not self.reader.partitions:
            return 0
        batch = self.reader.poll(max_messages, timeout)
        reached = {p: o for p, o in batch.reached.items() if o > self.expected.get(p, 0)}
        now = time.monotonic()
        if not batch.messages and not reached and now - self._last_write < idle_update_s:
            return 0
        decoded = [(p, o, self._decode(p, o, v, h))
                    for (p, o, v), h in zip(batch.messages, batch.headers)]
        try:
            written = self._apply(decoded, reached)
        except PositionsMoved as e:
            log("warning", "positions_moved", generation=self.generation, stored=e.positions,
                expected=self.expected, topic=self.reader.topic)
            self.expected = {p: e.positions.get(p, 0) for p in self.reader.partitions}
            self.reader.seek(self.expected)
            return 0
        self._last_write = now
        self.expected = dict(written.next_offsets)
        for f in written.findings:
            self.metrics.findings.labels(f.kind).inc()
            log("warning", "finding", generation=self.generation, kind=f.kind, stream=f.stream,
                seq=f.seq, detail=f.detail)
        return len(batch.messages)

    def _decode(self, p: int, o: int, v: bytes | None, h: list | None) -> list:
        return decode_checkpoint(p, o, v, h, self.log_name, self.log_key)

    def _apply(self, decoded: list, reached: Mapping[int, int]):
        return self.store.apply_checkpoints(
            self.generation, self.reader.topic, self.expected, decoded, reached,
            self.reader.watermarks(), follow_live=self.follow_live)


class ErasureWriter(CheckpointWriter):
    """Projects ``<prefix>.erasures`` into one generation: the log's signed erasure
    receipts (:mod:`projections.erasures`), each verified with the log key; a bad one is an
    ``erasure_invalid`` finding."""

    def _decode(self, p: int, o: int, v: bytes | None, h: list | None) -> list:
        return decode_receipt(p, o, v, h, self.log_name, self.log_key)

    def _apply(self, decoded: list, reached: Mapping[int, int]):
        return self.store.apply_erasures(
            self.generation, self.reader.topic, self.expected, decoded, reached,
            self.reader.watermarks(), follow_live=self.follow_live)


class TreeWriter(CheckpointWriter):
    """Projects ``<prefix>.tree`` (one partition) into one generation: the deployment log's
    entries and tree, its checkpoints (each checked against the tree) and their witnesses'
    cosignatures (:mod:`projections.logtree`); a bad note is a finding, and an entry all
    the same."""

    def _decode(self, p: int, o: int, v: bytes | None, h: list | None) -> list:
        return decode_tree_message(o, v, h, self.log_name, self.log_key)

    def _apply(self, decoded: list, reached: Mapping[int, int]):
        return self.store.apply_log(
            self.generation, self.reader.topic, self.expected, decoded, reached,
            self.reader.watermarks(), follow_live=self.follow_live)


def tree_partitions(log_partitions: Iterable[int]) -> list[int]:
    """The tree topic's partitions a projector owning ``log_partitions`` folds: its one
    partition, 0, goes with log partition 0."""
    return [0] if 0 in log_partitions else []


class Projector:
    """The ``evidence projector`` service loop; see the module docstring."""

    def __init__(self, cfg: ProjectorConfig, metrics: ProjectorMetrics | None = None) -> None:
        self.cfg = cfg
        self.metrics = metrics or ProjectorMetrics()
        self.sessions = 0
        self._ends: EndOffsets | None = None  # the heartbeat's end offsets, asked off the loop
        self.beaten: tuple[int, str] | None = None  # (session, generation) of the last beat

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Project until ``should_stop()``; it is checked between batches, never inside one.

        Outages are ridden out (module docstring); an error that does not heal is raised."""
        try:
            self._run(should_stop)
        finally:
            if self._ends is not None:
                self._ends.close()
                self._ends = None

    def _run(self, should_stop: Callable[[], bool]) -> None:
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
        with Store(cfg) as store, LogReader(cfg, group=cfg.consumer_group) as reader, LogReader(
                cfg, topic=cfg.checkpoint_topic, headers=True, required=False) as cp_reader, \
                LogReader(cfg, topic=cfg.erasure_topic, headers=True,
                          required=False) as er_reader, LogReader(
                cfg, topic=cfg.tree_topic, headers=True, required=False) as tree_reader:
            gen = store.live_generation(create=True)
            cp_reader.own([])
            er_reader.own([])
            tree_reader.own([])
            writer = self._writer(store, reader, gen)
            cp_writer = self._cp_writer(store, cp_reader, gen)
            er_writer = self._er_writer(store, er_reader, gen)
            tree_writer = self._tree_writer(store, tree_reader, gen)

            def assigned(partitions: list[int]) -> None:
                # Inside the log consumer's rebalance callback: take up (or give up) the
                # same partitions of checkpoints and erasures, and the tree topic with log
                # partition 0, each at its stored position.
                writer.seek_to_stored()
                for r, w, owned in ((cp_reader, cp_writer, partitions),
                                    (er_reader, er_writer, partitions),
                                    (tree_reader, tree_writer, tree_partitions(partitions))):
                    r.own(owned)
                    w.seek_to_stored()
                log("info", "owned", generation=writer.generation, partitions=partitions,
                    group=cfg.consumer_group, positions=writer.expected)

            reader.on_assigned = assigned
            log("info", "started", generation=gen, topic=reader.topic, group=cfg.consumer_group,
                partitions=len(reader.partitions), meta=cfg.meta_schema, session=self.sessions)
            reported, report_at = 0, time.monotonic()
            beat_at = self._beat(store, reader, gen)
            while not should_stop():
                try:
                    writer.step(cfg.batch_max_messages, cfg.poll_timeout_s,
                                    cfg.idle_update_s)
                    # Checkpoints: what is already fetched, no wait (the records' poll waits).
                    cp_writer.step(cfg.batch_max_messages, 0, cfg.idle_update_s)
                    er_writer.step(cfg.batch_max_messages, 0, cfg.idle_update_s)
                    tree_writer.step(cfg.batch_max_messages, 0, cfg.idle_update_s)
                except GenerationChanged as e:
                    # A swap: the batch was rolled back; continue in the new live generation
                    # from its own stored positions.
                    gen = e.generation or store.live_generation(create=True)
                    log("info", "generation_changed", generation=gen, previous=writer.generation,
                        partitions=reader.partitions)
                    writer = self._writer(store, reader, gen)
                    cp_writer = self._cp_writer(store, cp_reader, gen)
                    er_writer = self._er_writer(store, er_reader, gen)
                    tree_writer = self._tree_writer(store, tree_reader, gen)
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
        cfg = self.cfg
        if self._ends is None or self._ends.topic != reader.topic:
            self._ends = EndOffsets(cfg, reader.topic, cfg.heartbeat_s,
                                    timeout_s=min(2.0, cfg.heartbeat_s)).start()
        self._ends.track(reader.partitions)
        # Asked off this thread (projections.heartbeat): a query per partition here stalled
        # projecting every beat. Fresh means asked within two beats; the first beat of a
        # session or of a generation (a swap), without a fresh answer, asks here: readiness
        # must not wait a beat for it.
        ends = self._ends.latest(max_age_s=2 * cfg.heartbeat_s)
        if ends is None and self.beaten != (self.sessions, gen):
            try:
                ends = reader.end_offsets(timeout=min(2.0, cfg.heartbeat_s))
            except LogError as e:
                log("warning", "heartbeat_skipped", error=str(e),
                    message="Kafka did not give the log's end offsets; no heartbeat this time")
                return at
        if ends is None:
            log("warning", "heartbeat_skipped", failures=self._ends.failures,
                message="Kafka has not given the log's end offsets lately; no heartbeat "
                        "this time")
            return at
        self.beaten = (self.sessions, gen)
        if store.beat(gen, reader.topic, ends):
            self.metrics.heartbeat.set(time.time())
        return at

    def _writer(self, store: Store, reader: LogReader, gen: str) -> GenerationWriter:
        store.follow(gen)
        w = GenerationWriter(store, reader, gen, follow_live=True, metrics=self.metrics)
        w.seek_to_stored()
        return w

    def _cp_writer(self, store: Store, reader: LogReader, gen: str) -> CheckpointWriter:
        w = CheckpointWriter(store, reader, gen, follow_live=True, metrics=self.metrics)
        w.seek_to_stored()
        return w

    def _er_writer(self, store: Store, reader: LogReader, gen: str) -> ErasureWriter:
        w = ErasureWriter(store, reader, gen, follow_live=True, metrics=self.metrics)
        w.seek_to_stored()
        return w

    def _tree_writer(self, store: Store, reader: LogReader, gen: str) -> TreeWriter:
        w = TreeWriter(store, reader, gen, follow_live=True, metrics=self.metrics)
        w.seek_to_stored()
        return w
