"""The single writer as a service: start, run until stopped, close — and heal in between.

It consumes ``<prefix>.intake`` read_committed and, per batch, runs one Kafka transaction that
carries the sealed records, the new stream heads and the intake offsets. The pieces, each a
plain module:

- :mod:`writer.kafka_io` — the clients (made by :class:`~writer.kafka_io.KafkaClients`, so
  tests can pass fakes) and the librdkafka calls;
- :mod:`writer.restore` — heads and dedup window of a partition, read back on assignment;
- :mod:`writer.loop` — :class:`~writer.loop.SealLoop`, the batch transaction and its abort,
  rewind and commit-retry paths;
- here: the life cycle, librdkafka's callbacks, and what each failure means.

What a failure means:

- A Kafka error the loop cannot handle in place (fatal, a failed abort, a restore that could
  not read, a call that outlived its deadline, the broker gone for longer than a timeout, a
  commit still timing out after ``loop.COMMIT_GIVE_UP_S``, whose outcome is then unknown):
  the writer *heals*. It drops its clients (producer, restore reader, intake consumer) and the
  in-memory heads, waits (backoff from ``BACKOFF_MIN_S``, doubling to ``BACKOFF_MAX_S``, reset
  once a session has committed or lasted ``HEALTHY_AFTER_S``) and makes them anew: the new
  producer's ``init_transactions`` aborts whatever transaction was open, the new consumer
  rejoins the group under the same static ``group.instance.id`` and gets its partitions back,
  and each partition's heads are restored from Kafka as at start-up. Exactly-once holds as
  across a kill -9: nothing uncommitted was ever visible, and the committed offsets and
  heads are those of the last committed transaction.
- Fencing (``FencedError``) is not proof of a second writer (:mod:`writer.fencing` says why):
  the fenced writer closes its clients and watches the group without fencing anyone back. A
  live rival holding our ``group.instance.id``, or ``FENCINGS_FOR_RIVAL`` fencings within
  ``FENCING_WINDOW_S`` (:class:`~writer.fencing.Fencings`), and the writer exits with
  :data:`EXIT_FENCED` (3): a supervisor must not restart it into a fencing war. Otherwise it
  heals (the watch takes ``fencing_wait_s``, a session timeout more when a stale member of
  ours lingers).
- ``StateMismatchError`` (writer-state disagreeing with the log: corruption) exits 1.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from typing import Callable

from evidence_contract import now_micros
from server.logs import event_logger
from server.version import version
from writer.config import WriterConfig
from writer.checkpoints import Trees
from writer.erasures import Receipts
from writer.core import Sealer
from writer.errors import (
    FencedError,
    StateMismatchError,
    WedgedError,
    WriterError,
    WriterKafkaError,
)
from writer.fencing import Fencings, describe, live_rival
from writer.kafka_io import (
    TIMEOUT_S,
    Consumer,
    GroupMember,
    KafkaClients,
    KafkaError,
    Producer,
    TopicPartition,
    bounded,
    check_topics_of,
    consume_batch,
    consumer_config,
    is_fatal,
    kafka_errors,
    producer_config,
    reader_config,
    stable_committed,
    translate,
)
from writer.log_key import load_log_key
from writer.loop import CALL_DEADLINE_S, SealLoop
from writer.metrics import WriterMetrics
from writer.restore import read_receipted, restore

__all__ = ["EXIT_FENCED", "WriterService"]

EXIT_FENCED = 3
"""Exit code of a writer fenced by a live rival: "do not restart me" (devstack.supervise)."""
FATAL_EVENT_WAIT_S = 10.0  # how long a call failed with _FATAL waits for the fatal error event
FENCING_WAIT_S = 5.0  # how long a fenced writer waits for a rival to join the group
BACKOFF_MIN_S, BACKOFF_MAX_S, HEALTHY_AFTER_S = 0.5, 30.0, 30.0
KEEP_ASK_S = 5.0  # the committed offsets asked at a revoke; past it, nothing is kept

log = event_logger("evidence.writer")


class WriterService:
    """The single writer. ``start()`` connects, ``run()`` seals until stopped, ``close()``.

    No I/O in ``__init__``. ``request_stop()`` is safe from a signal handler: the open
    transaction is finished (committed or aborted) before ``run()`` returns 0. ``clients``
    makes the Kafka clients (confluent_kafka's unless given); ``call_deadline_s`` bounds each
    blocking transactional call (:func:`~writer.kafka_io.bounded`).
    """

    def __init__(self, config: WriterConfig, metrics: WriterMetrics | None = None,
                 clock: Callable[[], int] = now_micros, clients: KafkaClients | None = None,
                 fencing_wait_s: float = FENCING_WAIT_S,
                 call_deadline_s: float = CALL_DEADLINE_S) -> None:
        self.config = config
        self.metrics = metrics or WriterMetrics()
        self.names = config.topics.names
        self._clock = clock
        self._clients = clients or KafkaClients()
        self._fencing_wait_s = fencing_wait_s
        self._deadline_s = call_deadline_s
        # Names this process in the brokers' logs and in the group's member list.
        self.client_id = f"evidence-writer/{config.writer_id}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self._writer = {"writer_id": config.writer_id, "transactional_id": config.transactional_id,
                        "version": version()}
        self.sealer = Sealer(self._writer, config.topics.max_message_bytes,
                             config.dedup_window_s * 1_000_000, config.dedup_max_ids,
                             partitions=config.topics.partitions)
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._reader: Consumer | None = None
        self._loop: SealLoop | None = None
        self._stop = False
        self._failure: WriterError | None = None  # set from librdkafka callbacks
        self._rebalances = 0  # rebalance callbacks run; see kafka_io.consume_batch
        self._sessions = 0
        self._session_at = 0.0
        self._backoff = BACKOFF_MIN_S
        self._fencings = Fencings()
        self._member_ids: set[str] = set()  # every group member id our consumers have had
        self._kept: dict[int, tuple[int, dict]] = {}  # revoked and kept: (offset, trees)

    # -- life cycle ---------------------------------------------------------------------------
    def request_stop(self) -> None:
        self._stop = True

    def start(self) -> None:
        """Check topics (waiting while Kafka does not answer), fence any previous writer, join
        the group. Raises ``TopicConfigError`` for missing or wrong topics and
        ``SigningKeyError`` for a log key it must not sign with; a Kafka error of the first
        connection is left to :meth:`run`, which heals it."""
        cfg = self.config
        self._load_key()
        self._check_topics()
        self.metrics.serve(cfg.metrics_port, cfg.metrics_host)
        log("info", "started", transactional_id=cfg.transactional_id, group_id=cfg.group_id,
            group_instance_id=cfg.instance_id, writer_id=cfg.writer_id, prefix=self.names.prefix,
            client_id=self.client_id, batch_max_messages=cfg.batch_max_messages,
            batch_linger_ms=cfg.batch_linger_ms)
        if self._stop:
            return
        try:
            self._connect()
        except WriterError as e:
            self._disconnect(wedged=isinstance(e, WedgedError))
            self._failure = e  # run() heals it

    def _load_key(self) -> None:
        """The log key, read once: checkpoints are signed with it, or off without it."""
        cfg = self.config
        key = None
        if cfg.log_signing_key_file:
            key = load_log_key(cfg.log_signing_key_file, cfg.log_name)
            log("info", "checkpoints_on", log_name=cfg.log_name, key_id=f"{key.verifier.key_id:08x}",
                interval_s=cfg.checkpoint_interval_s)
        else:
            log("info", "checkpoints_off", log_name=cfg.log_name,
                message="EVIDENCE_LOG_SIGNING_KEY_FILE is not set: no signed checkpoints "
                        "(the trees are still kept) and no erasure receipts (requests are "
                        "refused, logged as errors)")
        self.sealer.trees = Trees(key, cfg.log_name, cfg.checkpoint_interval_s)
        self.sealer.receipts = Receipts(key, cfg.log_name)

    def _check_topics(self) -> None:
        backoff = BACKOFF_MIN_S
        while True:
            try:
                check_topics_of(self._clients, self.config)
                return
            except WriterError as e:
                if self._stop:
                    return
                log("warning", "waiting_for_kafka", error=str(e), retry_in_s=backoff)
                self._pause(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _connect(self) -> None:
        """One session: a producer whose init_transactions fences any previous writer with our
        transactional id (and aborts its open transaction) *before* we read any state, so the
        heads we restore cannot move under us; then the reader and the intake consumer."""
        cfg, make = self.config, self._clients
        self._failure = None
        self._sessions += 1
        self._session_at = time.monotonic()
        producer = self._producer = make.producer(
            producer_config(cfg, self._on_producer_error, self.client_id))
        with kafka_errors("init_transactions"):
            bounded("init_transactions", lambda: producer.init_transactions(TIMEOUT_S),
                    self._deadline_s)
        self._reader = make.consumer(reader_config(cfg, self._on_consumer_error, self.client_id))
        self._consumer = make.consumer(
            consumer_config(cfg, self._on_consumer_error, self.client_id))
        self._consumer.subscribe([self.names.intake], on_assign=self._on_assign,
                                 on_revoke=self._on_revoke, on_lost=self._on_lost)
        self._loop = SealLoop(self._producer, self._consumer, self.sealer, cfg, self.metrics,
                              self._clock, self._raise_failure, lambda: self._rebalances,
                              self._deadline_s)
        if self._sessions > 1:
            log("info", "reconnected", session=self._sessions)

    def _disconnect(self, wedged: bool = False) -> None:
        """Let go of this session's clients and of every partition's in-memory state.

        The producer is not flushed nor used again: the next session's init_transactions
        aborts what it left open (and a wedged one is still inside a call on another thread).
        """
        consumer, reader = self._consumer, self._reader
        self._consumer = self._reader = self._producer = None
        self._loop = None
        for c in (consumer, reader):
            if c is not None:
                with contextlib.suppress(Exception):
                    c.close()
        self.sealer.abort()
        self._kept = {}
        for p in self.sealer.owned():
            self.sealer.revoke(p)
        if wedged:
            log("warning", "client_abandoned",
                message="a librdkafka call outlived its deadline; that producer is left to "
                        "its thread and a new one made")

    def close(self) -> None:
        """Clean shutdown: close the consumers (no transaction is open), flush the producer."""
        producer = self._producer
        self._disconnect()
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.flush(5)

    def run(self) -> int:
        """Seal until ``request_stop()``, healing what can be healed (module docstring).

        0 on a clean stop, :data:`EXIT_FENCED` when a live rival holds our identity, 1 when
        writer-state disagrees with the log.
        """
        try:
            while not self._stop:
                try:
                    if self._loop is None and self._failure is None:
                        self._connect()
                    self._raise_failure()
                    assert self._loop is not None
                    self._loop.step()
                except StateMismatchError as e:
                    return self._fatal(e)
                except WriterError as e:
                    e = self._named(e)
                    if isinstance(e, FencedError):
                        rival = self._rival(e)
                        if rival is not None:
                            return self._fenced(e, rival)
                        self._heal(e, pause=False)
                    else:
                        self._heal(e)
            log("info", "stopped", reason="stop requested; no transaction open")
            return 0
        finally:
            self.close()

    def _named(self, e: WriterError) -> WriterError:
        """``e``, or the fencing behind a generic ``_FATAL`` (:mod:`writer.fencing` says why it
        can hide there): both clients' error events are served for ``FATAL_EVENT_WAIT_S`` at
        most. Whatever the consume returns is dropped: every path after this one drops the
        session, and the next resumes from the committed offsets."""
        producer = self._producer
        if isinstance(e, FencedError) or not isinstance(e, WriterKafkaError) \
                or e.code != KafkaError._FATAL or producer is None:
            return e
        deadline = time.monotonic() + FATAL_EVENT_WAIT_S
        while self._failure is None and time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                producer.poll(0.05)
            if self._failure is None:
                self._serve_consumer()
        return self._failure if isinstance(self._failure, FencedError) else e

    def _serve_consumer(self) -> None:
        """One short consume of the intake consumer, for its fencing (in the error callback,
        in place of a message, or raised); the messages are dropped (``_named``)."""
        consumer = self._consumer
        if consumer is None:
            return
        try:
            consume_batch(consumer, 1, 0, 0.05)
        except FencedError as err:
            self._failure = self._failure or err
        except Exception:  # noqa: BLE001 - anything else: the caller heals anyway
            pass

    def _heal(self, e: WriterError, pause: bool = True) -> None:
        """Drop the session after ``e``; wait (unless ``pause`` is false); the loop reconnects."""
        loop = self._loop
        if (loop is not None and loop.commits) or \
                time.monotonic() - self._session_at >= HEALTHY_AFTER_S:
            self._backoff = BACKOFF_MIN_S
        wait = self._backoff if pause else 0.0
        self.metrics.reconnects.labels(type(e).__name__).inc()
        log("warning", "reconnecting", error=str(e), error_type=type(e).__name__,
            code=getattr(e, "name", None), retry_in_s=wait, session=self._sessions,
            message="making the Kafka clients anew; the open transaction, if any, is aborted "
                    "and its batch sealed again")
        self._disconnect(wedged=isinstance(e, WedgedError))
        self._failure = None
        if pause:
            self._pause(wait)
            self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)

    def _pause(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stop and time.monotonic() < deadline:
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def _fatal(self, e: WriterError) -> int:
        log("error", "fatal", error=str(e), error_type=type(e).__name__,
            message="the writer cannot continue; exiting")
        return 1

    def _fenced(self, e: FencedError, rival: str) -> int:
        log("error", "fenced", error=str(e), code=e.name, transactional_id=self.config.transactional_id,
            rival=rival, exit_code=EXIT_FENCED,
            message="another writer with this transactional id / group instance id took over; "
                    "exiting, not to be restarted")
        return EXIT_FENCED

    # -- fencing: a rival, or the coordinator? -----------------------------------------------------
    def _rival(self, e: FencedError) -> str | None:
        """Who fenced us, if a live rival did (a description of it); None when no one did."""
        counted = self._fencings.add()
        if counted is not None:
            return counted
        holder = self._identity_holder()
        if holder is not None:
            return describe(holder)
        log("warning", "fenced_without_rival", error=str(e), code=e.name,
            fencings=len(self._fencings),
            message="fenced, but no other writer holds our group.instance.id: the coordinator "
                    "aborted a timed-out transaction or a stalled broker expired our session; "
                    "re-initialising")
        return None

    def _identity_holder(self) -> GroupMember | None:
        """A live rival holding our group.instance.id (:func:`writer.fencing.live_rival`),
        watched with our clients closed; or None. A group the coordinator does not describe
        counts as no rival (the fencing count still holds)."""
        cfg = self.config
        if self._consumer is not None:
            self._note_member_id(self._consumer)
        self._disconnect()

        def members() -> list[GroupMember] | None:
            try:
                return self._clients.group_members(cfg.bootstrap, cfg.group_id)
            except WriterError as err:
                log("info", "group_unknown", error=str(err))
                return None

        return live_rival(members, cfg.instance_id, self._member_ids, cfg.session_timeout_ms,
                          self._fencing_wait_s, lambda: self._stop, self._pause)

    # -- librdkafka callbacks (run inside poll/consume on this thread) ---------------------------
    def _on_producer_error(self, err: KafkaError) -> None:
        self._on_error(err, consumer=False)

    def _on_consumer_error(self, err: KafkaError) -> None:
        self._on_error(err, consumer=True)

    def _on_error(self, err: KafkaError, consumer: bool) -> None:
        if is_fatal(err):
            translated = translate(err, "kafka client", consumer)
            # Fencing names the cause best; let it replace a generic fatal error seen first.
            if self._failure is None or (isinstance(translated, FencedError)
                                         and not isinstance(self._failure, FencedError)):
                self._failure = translated
        else:
            log("warning", "kafka_error", code=err.name(), error=err.str())

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalances += 1
        reader = self._reader
        try:
            assert reader is not None, "start() creates the reader before subscribing"
            t0 = time.monotonic()
            # Stable offsets (KIP-447): any transaction still carrying offsets for these
            # partitions (a dead writer's) is waited for, so the heads read next are those
            # of the last committed transaction, matching where we resume.
            committed = stable_committed(consumer, partitions, self.config.stable_offsets_wait_s,
                                         lambda: self._stop)
            t1 = time.monotonic()
            kept = self._keep(committed)
            for tp in committed:
                if tp.partition in kept:
                    continue
                heads, window, trees = restore(reader, self.config, self.sealer, tp.partition,
                                               self._clock)
                self.sealer.assign(tp.partition, heads, window, trees)
                self.sealer.receipts.assign(tp.partition, read_receipted(
                    reader, self.names.erasures, tp.partition))
                log("info", "partition_assigned", partition=tp.partition, committed_offset=tp.offset,
                    streams=len(heads), dedup_ids=len(window))
            self.metrics.checkpoint_refused.set(len(self.sealer.trees.refused()))
            consumer.assign(committed)
            self._note_member_id(consumer)
            log("info", "assigned", partitions=[tp.partition for tp in committed],
                kept=sorted(kept), offsets_wait_s=round(t1 - t0, 3),
                restore_s=round(time.monotonic() - t1, 3))
        except WriterError as e:
            self._failure = self._failure or e
            consumer.assign([])  # own nothing we could not restore
        except Exception as e:  # noqa: BLE001 - an exception must not vanish in a callback
            self._failure = self._failure or WriterError(f"partition assignment failed: {e!r}")
            consumer.assign([])

    def _note_member_id(self, consumer: Consumer) -> None:
        with contextlib.suppress(Exception):
            member_id = consumer.memberid()
            if member_id:
                self._member_ids.add(member_id)

    def _keep(self, committed: list[TopicPartition]) -> set[int]:
        """The kept partitions assigned again at the committed offset of their revoke (no
        transaction sealed or receipted on them since: each commits its intake offsets, so
        a restore would read back what is held); the others are let go."""
        kept, self._kept = self._kept, {}
        now = {tp.partition: tp.offset for tp in committed}
        held = {p for p, (offset, _trees) in kept.items()
                if now.get(p) == offset and self.sealer.owns(p)}
        for p in self.sealer.owned():
            if p not in held:
                self.sealer.revoke(p)
        for p in held:
            self.sealer.trees.assign(p, kept[p][1])
        return held

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Eager rebalancing revokes every partition. Callbacks run inside consume(), between
        transactions: each partition's state is the last commit's, kept with its offset for
        :meth:`_keep`. Its trees are put aside (an idle writer signs what is due of the trees
        it holds). Messages an earlier consume call of the batch returned are dropped.

        A revoke while the session lets go of this consumer (:meth:`_disconnect`, on a stop
        or a heal) keeps nothing, as everything is dropped then: asking for the committed
        offsets from inside ``close()`` never gets an answer, and a stop waited out the whole
        ``KEEP_ASK_S`` for it."""
        self._rebalances += 1
        self._kept = {}
        owned = [tp for tp in partitions if self.sealer.owns(tp.partition)]
        try:
            if owned and consumer is self._consumer:
                with kafka_errors("committed offsets at revoke"):
                    offsets = consumer.committed(owned, timeout=KEEP_ASK_S)
                self._kept = {tp.partition: (tp.offset, self.sealer.trees.of(tp.partition))
                              for tp in offsets if tp.error is None and tp.offset >= 0}
        except WriterError as e:  # restored if assigned again
            log("info", "revoke_offsets_unknown", error=str(e))
        for tp in partitions:
            if tp.partition in self._kept:
                self.sealer.trees.revoke(tp.partition)
            else:
                self.sealer.revoke(tp.partition)
        log("info", "revoked", partitions=[tp.partition for tp in partitions],
            kept=sorted(self._kept))
        with contextlib.suppress(Exception):
            consumer.unassign()

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The group took the partitions away (our session expired): another writer may have
        sealed on them since, so nothing is kept."""
        self._rebalances += 1
        self._kept = {}
        for tp in partitions:
            self.sealer.revoke(tp.partition)
        log("info", "revoked", partitions=[tp.partition for tp in partitions], lost=True)
        with contextlib.suppress(Exception):
            consumer.unassign()

