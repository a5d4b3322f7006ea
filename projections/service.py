"""The projector: consume ``<prefix>.log`` (read_committed) into the live generation.

Positions live in PostgreSQL, never in Kafka's group offsets: nothing is ever committed to
Kafka (the consumer is :class:`projections.reader.LogReader`).

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
- :class:`Feed` — one of those topics, its writer and which of its partitions go with the
  log's; :data:`FEEDS` lists them in the order a session (and a rebuild,
  :mod:`projections.rebuild`) steps them.
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
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from server.logs import event_logger

from .config import ProjectorConfig
from .drift import ChangeWatch
from .erasures import decode_receipt
from .errors import GenerationChanged, LogError, PositionsMoved, ProjectionError, StoreError
from .fastrows import IMPLEMENTATION as ROW_PATH
from .fold import decode_message
from .heartbeat import EndOffsets
from .logtree import decode_tree_message
from .metrics import MODEL_WATCH_KEYS, ProjectorMetrics
from .reader import Batch, LogReader
from .store import Store
from .tlog import decode_checkpoint

__all__ = ["FEEDS", "Batch", "CheckpointWriter", "ErasureWriter", "Feed", "GenerationWriter",
           "LogReader", "Projector", "TreeWriter", "heals", "open_feeds", "tree_partitions"]

# Reconnecting is cheap (one connection each), and readiness waits on it: a short ceiling.
BACKOFF_MIN_S, BACKOFF_MAX_S, HEALTHY_AFTER_S = 0.5, 10.0, 30.0

log = event_logger("evidence.projector")


def heals(e: BaseException) -> bool:
    """Whether the projector rides ``e`` out (new connections, re-seek) rather than exiting."""
    return isinstance(e, LogError) or (isinstance(e, StoreError) and e.transient)


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
        # Fingerprint and served model per provider and model, for the drift metrics
        # (projections.drift). In memory: after a restart the first record of each pair
        # sets its value again, so a change across a restart is not counted (evidence
        # drift, which reads the records, finds it).
        self.models = ChangeWatch(MODEL_WATCH_KEYS)

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
        if self.follow_live:  # a rebuild's replay of old records alerts nobody
            self._watch_models(folded.rows)
        for f in folded.findings:
            m.findings.labels(f.kind).inc()
            log("warning", "finding", generation=self.generation, kind=f.kind, stream=f.stream,
                seq=f.seq, partition=f.partition, offset=f.offset, detail=f.detail)
        m.lag.set(sum(max(0, watermarks.get(p, 0) - o) for p, o in self.expected.items()))
        self.records += len(folded.rows)
        return len(folded.rows)

    def _watch_models(self, rows: list) -> None:
        dropped = self.models.dropped
        for change in self.models.see_rows(rows):
            self.metrics.model_changed(change)
            log("warning", "model_changed", generation=self.generation, kind=change.kind,
                provider=change.provider, model=change.model, old=change.old, new=change.new,
                before=f"{change.before[0]}@{change.before[1]}",
                after=f"{change.after[0]}@{change.after[1]}")
        if self.models.dropped > dropped:
            self.metrics.model_untracked.inc(self.models.dropped - dropped)

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


@dataclass(frozen=True)
class Feed:
    """One topic the projections fold: its ``name``, its ``topic`` (from the config), the
    ``writer`` that projects it, and the partitions of it that go with a projector's log
    partitions (``owned``; None for the log itself, whose partitions the group gives)."""

    name: str
    topic: Callable[[ProjectorConfig], str]
    writer: type[GenerationWriter]
    owned: Callable[[list[int]], list[int]] | None = None

    @property
    def side(self) -> bool:
        """A side topic: read with headers, and it may not exist (yet)."""
        return self.owned is not None

    def reader(self, cfg: ProjectorConfig, **kw: Any) -> LogReader:
        return LogReader(cfg, topic=self.topic(cfg), headers=self.side,
                         required=not self.side, **kw)


FEEDS = (
    Feed("records", lambda cfg: cfg.log_topic, GenerationWriter),
    Feed("checkpoints", lambda cfg: cfg.checkpoint_topic, CheckpointWriter, list),
    Feed("erasures", lambda cfg: cfg.erasure_topic, ErasureWriter, list),
    Feed("tree", lambda cfg: cfg.tree_topic, TreeWriter, tree_partitions),
)
"""The log first: a stream's records before the checkpoints that cover them, so most
checkpoints are checked as they come."""


def open_feeds(stack: ExitStack, cfg: ProjectorConfig, **kw: Any) -> list[LogReader]:
    """A started reader of each of :data:`FEEDS`, in order, closed with ``stack``; ``kw``
    goes to the log's reader (``group``, ``purpose``), ``purpose`` to every one."""
    purpose = {"purpose": kw["purpose"]} if "purpose" in kw else {}
    return [stack.enter_context(feed.reader(cfg, **(purpose if feed.side else kw)))
            for feed in FEEDS]


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
        """One set of connections (PostgreSQL, a reader a feed), from the stored positions
        until stopped or broken."""
        cfg = self.cfg
        self.sessions += 1
        with ExitStack() as stack:
            store = stack.enter_context(Store(cfg))
            readers = open_feeds(stack, cfg, group=cfg.consumer_group)
            reader = readers[0]  # the log's: its group assignment decides the others'
            gen = store.live_generation(create=True)
            for side in readers[1:]:
                side.own([])
            writers = self._writers(store, readers, gen)

            def assigned(partitions: list[int]) -> None:
                # Inside the log consumer's rebalance callback: take up (or give up) the
                # same partitions of checkpoints and erasures, and the tree topic with log
                # partition 0, each at its stored position.
                writers[0].seek_to_stored()
                for feed, side, w in zip(FEEDS[1:], readers[1:], writers[1:]):
                    side.own(feed.owned(partitions))
                    w.seek_to_stored()
                log("info", "owned", generation=writers[0].generation, partitions=partitions,
                    group=cfg.consumer_group, positions=writers[0].expected)

            reader.on_assigned = assigned
            log("info", "started", generation=gen, topic=reader.topic, group=cfg.consumer_group,
                partitions=len(reader.partitions), meta=cfg.meta_schema, session=self.sessions,
                row_path=ROW_PATH)
            reported, report_at = 0, time.monotonic()
            beat_at = self._beat(store, reader, gen)
            while not should_stop():
                try:
                    # The log's poll waits; the side topics take what is already fetched.
                    for w, timeout in zip(writers, [cfg.poll_timeout_s] + [0] * len(FEEDS)):
                        w.step(cfg.batch_max_messages, timeout, cfg.idle_update_s)
                except GenerationChanged as e:
                    # A swap: the batch was rolled back; continue in the new live generation
                    # from its own stored positions.
                    gen = e.generation or store.live_generation(create=True)
                    log("info", "generation_changed", generation=gen,
                        previous=writers[0].generation, partitions=reader.partitions)
                    writers = self._writers(store, readers, gen)
                    reported, beat_at = 0, self._beat(store, reader, gen)
                    continue
                if time.monotonic() - beat_at >= cfg.heartbeat_s:
                    beat_at = self._beat(store, reader, gen)
                records = writers[0].records
                if records != reported and time.monotonic() - report_at >= 5.0:
                    log("info", "progress", generation=gen, records=records - reported,
                        positions=writers[0].expected)
                    reported, report_at = records, time.monotonic()
            log("info", "stopped", generation=gen, positions=writers[0].expected)

    def _writers(self, store: Store, readers: list[LogReader], gen: str
                 ) -> list[GenerationWriter]:
        """A writer of each feed into ``gen``, each at its stored positions (the log's
        generation followed first: the tables and views it may lack)."""
        store.follow(gen)
        writers = [feed.writer(store, r, gen, follow_live=True, metrics=self.metrics)
                   for feed, r in zip(FEEDS, readers)]
        for w in writers:
            w.seek_to_stored()
        return writers

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
