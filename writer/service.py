"""The writer's Kafka shell: the only module of ``writer`` that imports confluent_kafka.

It consumes ``<prefix>.intake`` read_committed and, per batch, runs one Kafka transaction
that carries the sealed records, the new stream heads and the intake offsets (see
:meth:`WriterService._transact`). Everything decided about a message is decided by the pure
``writer.core``; this module only moves bytes and handles Kafka's failure modes:

- abortable error (``txn_requires_abort``): abort, forget the batch's in-memory heads, rewind
  the consumer to its committed offsets, and consume the batch again;
- retriable error on commit: retry the commit (librdkafka allows it, the outcome is kept);
- fatal error or fencing (a second writer with this transactional id / group instance id):
  :class:`writer.errors.FencedError` / :class:`writer.errors.KafkaError`, exit non-zero.

Start-up and every partition assignment restore the heads from ``<prefix>.writer-state``,
check them against the tail of ``<prefix>.log``, and rebuild the dedup window from the log.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, Producer, TopicPartition
from confluent_kafka import KafkaError as _KError

from evidence_contract import DecodeError, now_micros, peek_ids, split_record
from topics import check_topics
from writer import __version__
from writer.config import WriterConfig
from writer.core import (
    DedupWindow,
    Duplicate,
    Head,
    Rejection,
    Sealed,
    Sealer,
    decode_head,
    encode_head,
)
from writer.errors import FencedError, KafkaError, StateMismatchError, WriterError
from writer.logs import log
from writer.metrics import WriterMetrics

__all__ = ["WriterService"]

_FENCED_CODES = frozenset({_KError._FENCED, _KError.PRODUCER_FENCED, _KError.INVALID_PRODUCER_EPOCH,
                           _KError.FENCED_INSTANCE_ID})
_TIMEOUT_S = 30.0
_IDLE_WAIT_S = 0.2  # an idle writer checks for a stop request this often
_TAIL_PROBE = 256  # offsets scanned back from the log end to find each stream's last record


def _translate(err: _KError, what: str, consumer: bool = False) -> KafkaError:
    """The one place a librdkafka error becomes a writer error; its code is kept.

    A consumer reports a fatal error as ``_FATAL``, and the only fatal consumer error in
    librdkafka is static-membership fencing (FENCED_INSTANCE_ID): another writer joined with
    our group.instance.id. So for the consumer ``_FATAL`` means fenced.
    """
    code = err.code()
    fenced = code in _FENCED_CODES or (consumer and code == _KError._FATAL)
    fatal = err.fatal() or code == _KError._FATAL
    cls = FencedError if fenced else KafkaError
    return cls(f"{what}: {err.str()}", code=code, name=err.name(), fatal=fatal,
               retriable=err.retriable(), txn_requires_abort=err.txn_requires_abort())


def _is_fatal(err: _KError) -> bool:
    return err.fatal() or err.code() in _FENCED_CODES or err.code() == _KError._FATAL


@contextlib.contextmanager
def _kafka_errors(what: str) -> Iterator[None]:
    try:
        yield
    except KafkaException as e:
        err = e.args[0] if e.args and isinstance(e.args[0], _KError) else None
        if err is None:
            raise KafkaError(f"{what}: {e}", code=-1, name="UNKNOWN") from e
        raise _translate(err, what) from e


class WriterService:
    """The single writer. ``start()`` connects, ``run()`` seals until stopped, ``close()``.

    No I/O in ``__init__``. ``request_stop()`` is safe from a signal handler: the open
    transaction is finished (committed or aborted) before ``run()`` returns 0.
    """

    def __init__(self, config: WriterConfig, metrics: WriterMetrics | None = None,
                 clock: Callable[[], int] = now_micros) -> None:
        self.config = config
        self.metrics = metrics or WriterMetrics()
        self.names = config.topics.names
        self._clock = clock
        self._writer = {"writer_id": config.writer_id, "transactional_id": config.transactional_id,
                        "version": __version__}
        self.sealer = Sealer(self._writer, config.topics.max_message_bytes,
                             config.dedup_window_s * 1_000_000, config.dedup_max_ids)
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._reader: Consumer | None = None
        self._stop = False
        self._failure: WriterError | None = None  # set from librdkafka callbacks

    # -- life cycle ---------------------------------------------------------------------------
    def request_stop(self) -> None:
        self._stop = True

    def start(self) -> None:
        """Check topics, fence any previous writer, join the group; raises on failure."""
        cfg = self.config
        check_topics(cfg.bootstrap, cfg.topics)  # never creates: a wrong topic stops start-up
        self._producer = Producer({
            "bootstrap.servers": cfg.bootstrap,
            "transactional.id": cfg.transactional_id,
            "enable.idempotence": True,
            "acks": "all",
            "transaction.timeout.ms": cfg.transaction_timeout_ms,
            # librdkafka's default is 1 MB; a capture may be up to the topics' 64 MiB and a
            # rejected message up to the rejected topic's limit. batch.size stays 1 MB so
            # small records are never batched past a topic's max.message.bytes.
            "message.max.bytes": cfg.topics.rejected_max_message_bytes + 64 * 1024,
            "batch.size": 1_000_000,
            "linger.ms": 2,
            "error_cb": self._on_producer_error,
        })
        # init_transactions bumps the producer epoch for our transactional.id: a previous
        # writer with this id is fenced and its open transaction aborted *before* we read
        # any state, so the heads we restore cannot move under us.
        with _kafka_errors("init_transactions"):
            self._producer.init_transactions(_TIMEOUT_S)
        self._reader = Consumer({
            "bootstrap.servers": cfg.bootstrap,
            "group.id": f"{cfg.group_id}.restore",  # never subscribes or commits
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # Short fetch waits: a fetch parked at the partition end would otherwise hold the
            # connection, and the next watermark query behind it, for 500 ms per read.
            "fetch.wait.max.ms": 10,
            "error_cb": self._on_consumer_error,
        })
        self._consumer = Consumer({
            "bootstrap.servers": cfg.bootstrap,
            "group.id": cfg.group_id,
            "group.instance.id": cfg.instance_id,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": cfg.session_timeout_ms,
            "error_cb": self._on_consumer_error,
        })
        self._consumer.subscribe([self.names.intake], on_assign=self._on_assign,
                                 on_revoke=self._on_revoke, on_lost=self._on_revoke)
        self.metrics.serve(cfg.metrics_port)
        log("info", "started", transactional_id=cfg.transactional_id, group_id=cfg.group_id,
            group_instance_id=cfg.instance_id, writer_id=cfg.writer_id, prefix=self.names.prefix,
            batch_max_messages=cfg.batch_max_messages, batch_linger_ms=cfg.batch_linger_ms)

    def close(self) -> None:
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                self._consumer.close()
            self._consumer = None
        if self._reader is not None:
            with contextlib.suppress(Exception):
                self._reader.close()
            self._reader = None
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._producer.flush(5)
            self._producer = None

    def run(self) -> int:
        """Seal until ``request_stop()``; 0 on a clean stop, 1 on a fatal error or fencing."""
        assert self._consumer is not None, "start() first"
        try:
            while not self._stop:
                self._raise_failure()
                msgs = self._consume()
                if msgs:
                    self._process(msgs)
            log("info", "stopped", reason="stop requested; no transaction open")
            return 0
        except FencedError as e:
            return self._fenced(e)
        except KafkaError as e:
            # A transactional producer that is fenced often reports only a generic _FATAL on
            # the operation it was in. Our consumer shares the writer's group.instance.id, so a
            # new writer fences it too, by code (FENCED_INSTANCE_ID), at its next heartbeat:
            # wait for that before calling the failure anything else.
            fenced = self._consumer_fenced() if e.fatal else None
            if fenced is not None:
                return self._fenced(fenced)
            log("error", "fatal", error=str(e), error_type=type(e).__name__,
                message="the writer cannot continue; exiting")
            return 1
        except WriterError as e:
            log("error", "fatal", error=str(e), error_type=type(e).__name__,
                message="the writer cannot continue; exiting")
            return 1
        finally:
            self.close()

    def _fenced(self, e: FencedError) -> int:
        log("error", "fenced", error=str(e), code=e.name, transactional_id=self.config.transactional_id,
            message="another writer with this transactional id / group instance id took over; exiting")
        return 1

    def _consumer_fenced(self, timeout: float = 10.0) -> FencedError | None:
        consumer = self._consumer
        if consumer is None:
            return None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if isinstance(self._failure, FencedError):
                return self._failure
            try:
                # Serves callbacks; nothing consumed here is processed.
                for m in consumer.consume(100, 0.2):
                    err = m.error()
                    if err is not None and isinstance(
                            _translate(err, "consume", consumer=True), FencedError):
                        return _translate(err, "consume", consumer=True)
            except KafkaException as ke:
                err = ke.args[0] if ke.args and isinstance(ke.args[0], _KError) else None
                if err is not None:
                    translated = _translate(err, "consume", consumer=True)
                    if isinstance(translated, FencedError):
                        return translated
                return None
        return self._failure if isinstance(self._failure, FencedError) else None

    # -- librdkafka callbacks (run inside poll/consume on this thread) ---------------------------
    def _on_producer_error(self, err: _KError) -> None:
        self._on_error(err, consumer=False)

    def _on_consumer_error(self, err: _KError) -> None:
        self._on_error(err, consumer=True)

    def _on_error(self, err: _KError, consumer: bool) -> None:
        if _is_fatal(err):
            translated = _translate(err, "kafka client", consumer)
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
        try:
            t0 = time.monotonic()
            # committed() asks for stable offsets (KIP-447): it waits for any transaction
            # still carrying offsets for these partitions, so the heads read next are those
            # of the last committed transaction, matching where we resume.
            with _kafka_errors("committed offsets"):
                committed = consumer.committed(partitions, timeout=_TIMEOUT_S)
            for tp in committed:
                heads, window = self._restore(tp.partition)
                self.sealer.assign(tp.partition, heads, window)
                log("info", "partition_assigned", partition=tp.partition, committed_offset=tp.offset,
                    streams=len(heads), dedup_ids=len(window))
            consumer.assign(committed)
            log("info", "assigned", partitions=[tp.partition for tp in committed],
                restore_s=round(time.monotonic() - t0, 3))
        except WriterError as e:
            self._failure = self._failure or e
            consumer.assign([])  # own nothing we could not restore
        except Exception as e:  # noqa: BLE001 - an exception must not vanish in a callback
            self._failure = self._failure or WriterError(f"partition assignment failed: {e!r}")
            consumer.assign([])

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Callbacks run inside consume(), which is only called between transactions, so no
        # transaction holds records of these partitions.
        for tp in partitions:
            self.sealer.revoke(tp.partition)
        log("info", "revoked", partitions=[tp.partition for tp in partitions])
        with contextlib.suppress(Exception):
            consumer.unassign()

    # -- restore -----------------------------------------------------------------------------
    def _read(self, topic: str, partition: int, start: int) -> Iterator[Message]:
        """Yield the committed messages of one partition from ``start`` to its current end."""
        reader = self._reader
        assert reader is not None
        tp = TopicPartition(topic, partition)
        with _kafka_errors(f"watermarks of {topic}[{partition}]"):
            lo, hi = reader.get_watermark_offsets(tp, timeout=_TIMEOUT_S, cached=False)
        start = max(start, lo)
        if start >= hi:
            return
        reader.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + 120
        try:
            while True:
                msg = reader.poll(0.5)
                if msg is None:
                    if time.monotonic() > deadline:
                        raise WriterError(f"reading {topic}[{partition}] did not reach its end in time")
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == _KError._PARTITION_EOF:
                        return
                    raise _translate(err, f"reading {topic}[{partition}]", consumer=True)
                yield msg
        finally:
            reader.unassign()

    def _restore(self, partition: int) -> tuple[dict[str, Head], DedupWindow]:
        """Heads from writer-state, checked against the log; dedup window from the log."""
        heads: dict[str, Head] = {}
        for msg in self._read(self.names.writer_state, partition, OFFSET_BEGINNING):
            if msg.value() is None:
                continue
            try:
                head = decode_head(msg.value())
            except DecodeError as e:
                raise StateMismatchError(
                    f"{self.names.writer_state}[{partition}]@{msg.offset()} is not a WriterHead: {e}") from e
            heads[head.stream] = head

        log_topic, reader = self.names.log, self._reader
        assert reader is not None
        tp = TopicPartition(log_topic, partition)
        with _kafka_errors(f"offsets of {log_topic}[{partition}]"):
            lo, hi = reader.get_watermark_offsets(tp, timeout=_TIMEOUT_S, cached=False)
            now = self._clock()
            since_ms = (now - self.config.dedup_window_s * 1_000_000) // 1000
            found = reader.offsets_for_times([TopicPartition(log_topic, partition, since_ms)],
                                             timeout=_TIMEOUT_S)[0].offset
        window_start = max(lo, hi - self.config.dedup_max_ids, found if found >= 0 else hi)
        probe = _TAIL_PROBE
        while True:
            window = self.sealer.new_window()
            last: dict[str, bytes] = {}
            scan_start = min(window_start, max(lo, hi - probe))
            for msg in self._read(log_topic, partition, scan_start):
                stream, event_id = peek_ids(msg.value())
                last[stream] = msg.value()
                if msg.offset() >= window_start:
                    window.add(event_id, msg.timestamp()[1] * 1000)
            if last or scan_start <= lo:
                break
            probe *= 16  # the tail was only aborted data and markers: look further back
        window.expire(now)
        self._check_heads(partition, heads, last)
        return heads, window

    def _check_heads(self, partition: int, heads: dict[str, Head], last: dict[str, bytes]) -> None:
        if heads and not last:
            raise StateMismatchError(
                f"{self.names.writer_state}[{partition}] has {len(heads)} heads but "
                f"{self.names.log}[{partition}] has no committed records")
        for stream, raw in last.items():
            _, rec = split_record(raw)
            seal, head = rec["seal"], heads.get(stream)
            if head is None or (head.seq, head.digest) != (seal["seq"], seal["record_digest"]):
                raise StateMismatchError(
                    f"stream {stream!r}: last record in {self.names.log}[{partition}] is seq "
                    f"{seal['seq']}, writer-state says {head.seq if head else 'nothing'}; refusing to seal")

    # -- the loop ----------------------------------------------------------------------------
    def _consume(self) -> list[Message]:
        """The next batch: what is already fetched, plus what arrives within the linger.

        ``Consumer.consume(n, t)`` returns early only when ``n`` messages are there, so with
        ``t`` as the linger every batch under light load would wait the whole linger before it
        even started. Instead, as Kafka's producer does with linger.ms: the linger starts when
        a batch has its first message. Idle, the writer waits for that first message at most
        ``_IDLE_WAIT_S`` (then the loop checks for a stop request and comes back). Under load
        the prefetched messages fill the batch at once and nothing waits.
        """
        consumer, cfg = self._consumer, self.config
        assert consumer is not None
        with _kafka_errors("consume"):
            msgs = consumer.consume(cfg.batch_max_messages, 0)
            if not msgs:
                first = consumer.poll(_IDLE_WAIT_S)
                msgs = [first] if first is not None else []
            if msgs and len(msgs) < cfg.batch_max_messages and cfg.batch_linger_ms > 0:
                msgs += consumer.consume(cfg.batch_max_messages - len(msgs),
                                         cfg.batch_linger_ms / 1000)
        good = []
        for m in msgs:
            err = m.error()
            if err is None:
                good.append(m)
            elif _is_fatal(err):
                raise _translate(err, "consume", consumer=True)
            elif err.code() != _KError._PARTITION_EOF:
                log("warning", "consume_error", code=err.name(), error=err.str())
        self._raise_failure()
        return good

    def _process(self, msgs: list[Message]) -> None:
        try:
            self._transact(msgs)
        except KafkaError as e:
            # Fatal and fenced errors end the writer. Anything else (abortable, or a
            # retriable error outside commit) is handled the same safe way: abort the
            # transaction and consume the batch again from the committed offsets.
            if e.fatal or isinstance(e, FencedError):
                raise
            self._abort(e)

    def _abort(self, cause: KafkaError) -> None:
        """Abort the open transaction and rewind, so the batch is consumed and sealed again."""
        assert self._producer is not None and self._consumer is not None
        self.metrics.aborts.inc()
        log("warning", "transaction_aborted", code=cause.name, error=str(cause))
        try:
            with _kafka_errors("abort_transaction"):
                self._producer.abort_transaction(_TIMEOUT_S)
        except KafkaError as e:
            if e.fatal or isinstance(e, FencedError):
                raise
            # e.g. no transaction was open yet (begin_transaction failed): nothing to undo.
            log("warning", "abort_failed", code=e.name, error=str(e))
        # Heads return to the last committed transaction (the overlay is dropped) and the
        # consumer to the committed offsets: the same messages get the same seqs again.
        self.sealer.abort()
        with _kafka_errors("rewind"):
            assignment = self._consumer.assignment()
            for tp in self._consumer.committed(assignment, timeout=_TIMEOUT_S):
                offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                self._consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

    def _produce(self, topic: str, value: bytes | None, key: bytes | None, partition: int,
                 headers: list | None = None) -> None:
        producer = self._producer
        assert producer is not None
        while True:
            try:
                producer.produce(topic, value, key, partition=partition, headers=headers)
                return
            except BufferError:
                producer.poll(0.05)  # local queue full: let deliveries drain, then retry

    def _transact(self, msgs: list[Message]) -> None:
        """Seal one batch in one Kafka transaction. The steps, and why this order is safe:

        1. begin_transaction — nothing below is visible to read_committed readers until 5.
        2. Seal, reject or absorb each message in intake order, producing the record to the
           log (or the verbatim message to rejected) on the intake message's partition
           number. Heads advance only in the sealer's overlay, not in its state.
        3. Produce the batch's new stream heads to writer-state (key = stream): after a crash
           the heads on writer-state are exactly those of the last committed log records.
        4. send_offsets_to_transaction with the consumer group metadata: the intake offsets
           commit atomically with 2 and 3, so a message is consumed iff its outcome is
           committed; the group generation also fences a zombie consumer (KIP-447).
        5. commit_transaction — all of 2–4 become visible at once or not at all. A crash
           before this leaves an open transaction that the next writer's init_transactions
           aborts; its seqs are reused because no reader ever saw them.
        6. Only now apply the overlay to the in-memory heads and dedup window, and count.
        """
        producer, consumer = self._producer, self._consumer
        assert producer is not None and consumer is not None
        names = self.names
        # 1.
        with _kafka_errors("begin_transaction"):
            producer.begin_transaction()
        # 2.
        next_offsets: dict[int, int] = {}
        sealed = reencoded = 0
        rejected: list[tuple[Rejection, Message]] = []
        duplicates: list[tuple[Duplicate, Message]] = []
        with _kafka_errors("produce"):
            for m in msgs:
                p = m.partition()
                if not self.sealer.owns(p):
                    raise WriterError(f"message from unowned partition {names.intake}[{p}]")
                out = self.sealer.handle(m.value(), m.key(), p, m.offset(), self._clock())
                if isinstance(out, Sealed):
                    self._produce(names.log, out.record, m.key(), p)
                    sealed += 1
                    reencoded += out.reencoded
                elif isinstance(out, Rejection):
                    self._produce(names.rejected, m.value(), m.key(), p,
                                  list(m.headers() or []) + self._reason_headers(out, m))
                    rejected.append((out, m))
                else:
                    duplicates.append((out, m))
                next_offsets[p] = m.offset() + 1
            # 3.
            for (p, stream), head in self.sealer.pending_heads().items():
                self._produce(names.writer_state, encode_head(head, p), stream.encode("utf-8"), p)
        # 4.
        with _kafka_errors("send_offsets_to_transaction"):
            producer.send_offsets_to_transaction(
                [TopicPartition(names.intake, p, o) for p, o in sorted(next_offsets.items())],
                consumer.consumer_group_metadata(), _TIMEOUT_S)
        # 5.
        t0 = time.perf_counter()
        while True:
            try:
                with _kafka_errors("commit_transaction"):
                    producer.commit_transaction(_TIMEOUT_S)
                break
            except KafkaError as e:
                if not e.retriable or e.txn_requires_abort or e.fatal:
                    raise
                log("warning", "commit_retry", code=e.name, error=str(e))
        # 6.
        self.sealer.commit()
        m_ = self.metrics
        m_.commit_seconds.observe(time.perf_counter() - t0)
        m_.batch_size.observe(len(msgs))
        m_.sealed.inc(sealed)
        m_.reencoded.inc(reencoded)
        for rej, msg in rejected:
            m_.rejected.labels(rej.reason.value).inc()
            log("warning", "rejected", reason=rej.reason.value, reason_text=rej.text,
                partition=msg.partition(), offset=msg.offset())
        for dup, msg in duplicates:
            m_.duplicates.inc()
            log("info", "duplicate", stream=dup.stream, event_id=dup.event_id,
                partition=msg.partition(), offset=msg.offset())

    def _reason_headers(self, rejection: Rejection, m: Message) -> list[tuple[str, bytes]]:
        return [
            ("evidence.reason", rejection.reason.value.encode()),
            ("evidence.reason_text", rejection.text.encode("utf-8", "replace")),
            ("evidence.source_topic", m.topic().encode()),
            ("evidence.source_partition", str(m.partition()).encode()),
            ("evidence.source_offset", str(m.offset()).encode()),
        ]
