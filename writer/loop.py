"""The writer's loop: consume a batch of intake, seal it in one Kafka transaction, repeat.

:class:`SealLoop` is handed a started transactional producer, the subscribed intake consumer
and the :class:`~writer.core.Sealer` (which decides everything about a message); it only moves
bytes and handles Kafka's failure modes:

- abortable error (``txn_requires_abort``), or any other non-fatal error inside the
  transaction: abort, forget the batch's in-memory heads, rewind the consumer to its
  committed offsets, and consume the batch again, so the same messages get the same seqs;
- retriable error on commit: retry the commit, with backoff (librdkafka allows it, the
  outcome is kept);
- fatal error, fencing, an abort that fails, or a call that outlives its deadline
  (:func:`~writer.kafka_io.bounded`): raise :class:`~writer.errors.WriterKafkaError` /
  :class:`~writer.errors.FencedError` / :class:`~writer.errors.WedgedError`; the service
  makes its clients anew (or, fenced by a live rival, exits).

Messages of a partition this writer does not own (any more) are dropped from a batch before
it is sealed: whoever owns that partition now starts from its committed offset.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from server.logs import event_logger
from writer.config import WriterConfig
from evidence_contract import valid_stream_id
from writer.checkpoints import Issued, is_checkpoint_request
from writer.erasures import ISSUED, REFUSED, Decision, is_erase_request, receipt_headers
from writer.core import Duplicate, Rejection, Sealed, Sealer, encode_head
from writer.errors import CommitUnknownError, FencedError, WriterError, WriterKafkaError
from writer.kafka_io import (
    TIMEOUT_S,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
    bounded,
    consume_batch,
    kafka_errors,
    produce,
    rewind,
)
from writer.metrics import WriterMetrics

__all__ = ["CALL_DEADLINE_S", "IDLE_WAIT_S", "SealLoop"]

IDLE_WAIT_S = 0.2  # an idle writer checks for a stop request this often
CALL_DEADLINE_S = TIMEOUT_S + 10.0
"""How long a blocking transactional call may take before the producer counts as wedged:
librdkafka's own timeout (``TIMEOUT_S``) and a grace period."""
SEND_OFFSETS_TIMEOUT_S = 10.0
"""send_offsets_to_transaction's own timeout: it is the call that hangs past it (librdkafka
#5456, after a broker restart), so it gets a shorter one, and its deadline is this plus 5 s.
One small request to the group coordinator needs far less, even while the coordinator loads
(librdkafka retries COORDINATOR_LOAD_IN_PROGRESS within the timeout); a batch whose offsets
time out is aborted or its producer made anew, and sealed again."""
COMMIT_RETRY_MAX_S = 2.0  # the longest pause between two retries of commit_transaction
COMMIT_GIVE_UP_S = 45.0
"""How long commit_transaction is retried before its producer is given up
(:class:`~writer.errors.CommitUnknownError`): past one full librdkafka timeout, so a broker
that restarts within it is waited for, and well inside the transaction timeout."""
LAG_EVERY_S = 1.0  # how often the intake lag gauge is brought up to date

log = event_logger("evidence.writer")


@dataclass
class _Produced:
    """What steps 2–3 of one transaction produced, counted once it has committed."""

    next_offsets: dict[int, int] = field(default_factory=dict)
    sealed: int = 0
    reencoded: int = 0
    rejected: list[tuple[Rejection, Message]] = field(default_factory=list)
    duplicates: list[tuple[Duplicate, Message]] = field(default_factory=list)
    requests: int = 0
    checkpoints: list[Issued] = field(default_factory=list)
    erasures: list[Decision] = field(default_factory=list)


class SealLoop:
    """One batch per :meth:`step`. ``check_failure`` raises what librdkafka's callbacks
    reported (they run inside consume); it is called after every consume. ``rebalances``
    counts the rebalance callbacks run so far (see :func:`~writer.kafka_io.consume_batch`);
    ``call_deadline_s`` bounds each blocking transactional call. ``commits`` counts the
    transactions committed."""

    def __init__(self, producer: Producer, consumer: Consumer, sealer: Sealer,
                 config: WriterConfig, metrics: WriterMetrics, clock: Callable[[], int],
                 check_failure: Callable[[], None] = lambda: None,
                 rebalances: Callable[[], int] = lambda: 0,
                 call_deadline_s: float = CALL_DEADLINE_S) -> None:
        self.producer = producer
        self.consumer = consumer
        self.sealer = sealer
        self.config = config
        self.names = config.topics.names
        self.metrics = metrics
        self.commits = 0
        self._clock = clock
        self._check_failure = check_failure
        self._rebalances = rebalances
        self._deadline_s = call_deadline_s
        self._lag_at = 0.0
        self._began = float("-inf")  # when the last transaction began (time.monotonic)

    def step(self) -> int:
        """Consume the next batch (waiting briefly when idle) and seal it; returns its size."""
        cfg = self.config
        # Paced: under load the next transaction starts transaction_interval_ms after the
        # last one began (writer.config), so its fixed cost is paid a few times a second.
        msgs = consume_batch(self.consumer, cfg.batch_max_messages, cfg.batch_linger_ms,
                             IDLE_WAIT_S, self._rebalances,
                             self._began + cfg.transaction_interval_ms / 1000)
        self._check_failure()
        self._measure_lag()
        owned = [m for m in msgs if self.sealer.owns(m.partition())]
        if len(owned) < len(msgs):
            log("info", "unowned_dropped", messages=len(msgs) - len(owned),
                partitions=sorted({m.partition() for m in msgs} - set(self.sealer.owned())))
        if owned or self.sealer.trees.due(time.monotonic()):
            # An idle writer still signs what is due: a transaction of checkpoints and heads.
            self.process(owned)
        return len(owned)

    def _measure_lag(self) -> None:
        """The intake lag gauge: per assigned partition, its end as the consumer last fetched
        it minus the consumer's position; local calls only (no broker round trip), on this
        thread (the consumer must not be called from the metrics thread: it would wait for
        the consume in progress)."""
        now = time.monotonic()
        if now - self._lag_at < LAG_EVERY_S:
            return
        self._lag_at = now
        try:
            lag = 0
            for tp in self.consumer.position(self.consumer.assignment()):
                _lo, hi = self.consumer.get_watermark_offsets(tp, cached=True)
                if hi is not None and hi >= 0 and tp.offset >= 0:
                    lag += max(0, hi - tp.offset)
        except (KafkaException, RuntimeError):
            return  # no position yet, or a closed consumer: keep the last value
        self.metrics.intake_lag.set(lag)

    def _blocking(self, what: str, call: Callable[[], None],
                  deadline_s: float | None = None) -> None:
        with kafka_errors(what):
            bounded(what, call, min(self._deadline_s, deadline_s or self._deadline_s))

    def process(self, msgs: list[Message]) -> None:
        """Seal ``msgs`` in one transaction; abort and rewind unless the error is fatal."""
        try:
            self.transact(msgs)
        except WriterKafkaError as e:
            # Fatal and fenced errors end the writer. Anything else (abortable, or a
            # retriable error outside commit) is handled the same safe way: abort the
            # transaction and consume the batch again from the committed offsets.
            if e.fatal or isinstance(e, FencedError):
                raise
            self.abort(e)

    def abort(self, cause: WriterKafkaError) -> None:
        """Abort the open transaction and rewind, so the batch is consumed and sealed again."""
        self.metrics.aborts.inc()
        log("warning", "transaction_aborted", code=cause.name, error=str(cause))
        try:
            self._blocking("abort_transaction",
                           lambda: self.producer.abort_transaction(TIMEOUT_S))
        except WriterKafkaError as e:
            if e.code != KafkaError._STATE:
                # Fatal, fenced, or the abort itself timed out (broker gone): the service
                # makes a new producer, whose init_transactions aborts what is open.
                raise
            # No transaction was open yet (begin_transaction failed): nothing to undo.
            log("warning", "abort_failed", code=e.name, error=str(e))
        # Heads return to the last committed transaction (the overlay is dropped) and the
        # consumer to the committed offsets: the same messages get the same seqs again.
        self.sealer.abort()
        rewind(self.consumer)

    def transact(self, msgs: list[Message]) -> None:
        """Seal one batch in one Kafka transaction. The steps, and why this order is safe:

        1. begin_transaction — nothing below is visible to read_committed readers until 5.
        2. Produce the records: seal, reject or absorb each message in intake order, producing
           the record to the log (or the verbatim message to rejected) on the intake
           message's partition number. Heads advance only in the sealer's overlay.
           An erasure request (``evidence-control: erase``) is never sealed: its receipt,
           signed by the log key (``writer.erasures``), goes to the erasures topic on the
           request's partition here, so it commits with the request's offset or not at all
           (an aborted one is signed again when the batch is consumed again).
        2b. Produce the checkpoints due (grown streams past the interval, or asked for by a
           control message of this batch), signed over each stream's tree *including* this
           batch's records, to the checkpoints topic on the stream's partition: they commit
           with the records they cover or not at all, so a checkpoint never names records a
           reader cannot see, and an aborted one is never seen and its size signed again.
        3. Produce the state: the new heads, with their persisted trees, of every stream
           sealed or checkpointed (key = stream), after the records and checkpoints they
           point at, so after a crash the heads on writer-state are exactly those of the
           last committed log records and checkpoints.
        4. Send the offsets: send_offsets_to_transaction with the consumer group metadata,
           so the intake offsets commit atomically with 2 and 3 and a message is consumed
           iff its outcome is committed; the group generation also fences a zombie consumer
           (KIP-447). Sent last, when every outcome of the batch is produced. A transaction
           of checkpoints only (an idle writer) consumed nothing and sends no offsets.
        5. Commit — all of 2–4 become visible at once or not at all. A crash before this
           leaves an open transaction that the next writer's init_transactions aborts; its
           seqs are reused because no reader ever saw them.
        6. Only now apply the overlay to the in-memory heads and dedup window, and count:
           before the commit succeeded, the overlay may still be thrown away by an abort.
        """
        # 1. Open the transaction.
        self._began = time.monotonic()
        with kafka_errors("begin_transaction"):
            self.producer.begin_transaction()
        # 2., 2b. and 3. Produce the records, the checkpoints, then the state.
        with kafka_errors("produce"):
            produced = self._produce_records(msgs)
            produced.checkpoints = self._produce_checkpoints()
            self._produce_state()
        # 4. Send the intake offsets into the same transaction.
        offsets = [TopicPartition(self.names.intake, p, o)
                   for p, o in sorted(produced.next_offsets.items())]
        if offsets:
            metadata = self.consumer.consumer_group_metadata()
            self._blocking("send_offsets_to_transaction",
                           lambda: self.producer.send_offsets_to_transaction(
                               offsets, metadata, SEND_OFFSETS_TIMEOUT_S),
                           SEND_OFFSETS_TIMEOUT_S + 5.0)
        # 5. Commit.
        t0 = time.perf_counter()
        self._commit()
        # 6. Apply and count what is now committed.
        self.sealer.commit()
        self.commits += 1
        self._count(msgs, produced, time.perf_counter() - t0)

    def _produce_records(self, msgs: list[Message]) -> _Produced:
        # The writer's hot loop: each message's accessors are called once (each call copies
        # out of librdkafka's message), and what every message needs is bound once a batch.
        names, out, sealer, clock = self.names, _Produced(), self.sealer, self._clock
        handle, owns, next_offsets = sealer.handle, sealer.owns, out.next_offsets
        producer, log_topic = self.producer, names.log
        produce_now = producer.produce
        for m in msgs:
            p = m.partition()
            if not owns(p):
                raise WriterError(f"message from unowned partition {names.intake}[{p}]")
            offset = m.offset()
            next_offsets[p] = offset + 1
            headers = m.headers()
            if headers:  # most captures have none: no control header to look for
                if is_erase_request(headers):
                    # An erasure request: never sealed; a receipt (step 2) or a loud refusal.
                    out.erasures.append(self._receipt(m))
                    continue
                if is_checkpoint_request(headers):
                    # A control message: never sealed, never rejected; its offset commits.
                    self._request_checkpoint(m)
                    out.requests += 1
                    continue
            value, key = m.value(), m.key()
            outcome = handle(value, key, p, offset, clock())
            if type(outcome) is Sealed:
                try:  # kafka_io.produce, inlined: once a record
                    produce_now(log_topic, outcome.record, key, partition=p)
                except BufferError:  # local queue full: as kafka_io.produce does
                    producer.poll(0.05)
                    produce(producer, log_topic, outcome.record, key, p)
                out.sealed += 1
                out.reencoded += outcome.reencoded
            elif isinstance(outcome, Rejection):
                produce(self.producer, names.rejected, value, key, p,
                        list(headers or []) + _reason_headers(outcome, m))
                out.rejected.append((outcome, m))
            else:
                out.duplicates.append((outcome, m))
        return out

    def _receipt(self, m: Message) -> Decision:
        d = self.sealer.receipts.handle(m.partition(), m.value())
        if d.outcome == ISSUED and d.request is not None:
            produce(self.producer, self.names.erasures, d.note,
                    d.request.request_id.encode("utf-8"), m.partition(),
                    receipt_headers(d.request))
        return d

    def _request_checkpoint(self, m: Message) -> None:
        key = m.key()
        stream = key.decode("utf-8", "replace") if key else ""
        if valid_stream_id(stream):
            self.sealer.trees.request(m.partition(), stream)
        else:
            log("warning", "checkpoint_request_ignored", partition=m.partition(),
                offset=m.offset(), reason="the key is not a stream id")

    def _produce_checkpoints(self) -> list[Issued]:
        trees, now = self.sealer.trees, time.monotonic()
        issued = []
        for p, stream in trees.due(now):
            cp = trees.issue(p, stream, now)
            key, headers = stream.encode("utf-8"), cp.headers
            produce(self.producer, self.names.checkpoints, cp.note, key, p, headers)
            # The same note, an entry of the deployment tree (docs/witnessing.md): the tree
            # topic's one partition orders every writer's checkpoints as they commit.
            produce(self.producer, self.names.tree, cp.note, key, 0, headers)
            issued.append(cp)
        return issued

    def _produce_state(self) -> None:
        for (p, stream), (head, tree) in self.sealer.pending_state().items():
            produce(self.producer, self.names.writer_state, encode_head(head, p, tree),
                    stream.encode("utf-8"), p)

    def _commit(self) -> None:
        """commit_transaction, repeated while librdkafka calls the failure retriable (and
        neither abortable nor fatal): a repeated commit keeps the first call's outcome. The
        pause between attempts doubles up to ``COMMIT_RETRY_MAX_S``; a retriable failure
        that comes back at once (broker connection refused) does not spin. Past
        ``COMMIT_GIVE_UP_S`` it raises ``CommitUnknownError``: the service then makes its
        clients anew (a producer that lost its coordinator in a broker stall times out every
        retry, the request never sent)."""
        pause = 0.05
        give_up = time.monotonic() + COMMIT_GIVE_UP_S
        while True:
            timeout = max(1.0, min(TIMEOUT_S, give_up - time.monotonic()))
            try:
                self._blocking("commit_transaction",
                               lambda: self.producer.commit_transaction(timeout))
                return
            except WriterKafkaError as e:
                if not e.retriable or e.txn_requires_abort or e.fatal:
                    raise
                if time.monotonic() >= give_up:
                    raise CommitUnknownError(
                        f"commit_transaction did not complete in {COMMIT_GIVE_UP_S:.0f} s "
                        f"({e}); its outcome is unknown: making the Kafka clients anew") from e
                log("warning", "commit_retry", code=e.name, error=str(e))
                time.sleep(pause)
                pause = min(pause * 2, COMMIT_RETRY_MAX_S)

    def _count(self, msgs: list[Message], produced: _Produced, commit_s: float) -> None:
        m_ = self.metrics
        m_.commit_seconds.observe(commit_s)
        m_.last_commit.set_to_current_time()
        if msgs:
            m_.batch_size.observe(len(msgs))
        m_.sealed.inc(produced.sealed)
        m_.checkpoints.inc(len(produced.checkpoints))
        for cp in produced.checkpoints:
            m_.checkpoint_sign_seconds.observe(cp.sign_seconds)
        if produced.requests:
            log("info", "checkpoint_requested", requests=produced.requests,
                issued=[[cp.stream, cp.size] for cp in produced.checkpoints])
        for d in produced.erasures:
            m_.erasures.labels(d.outcome).inc()
            if d.outcome == ISSUED:
                log("info", "erasure_receipted", request_id=d.request_id, partition=d.partition,
                    key_ids=len(d.request.key_ids) if d.request else 0)
            elif d.outcome == REFUSED:
                log("error", "erasure_refused", request_id=d.request_id, partition=d.partition,
                    reason=d.detail, message="no receipt signed: start the writer with a log key "
                    "and send the request again with the same request id (the keys are "
                    "destroyed already)")
            else:
                log("warning" if d.outcome != "invalid" else "error", f"erasure_{d.outcome}",
                    request_id=d.request_id, partition=d.partition, reason=d.detail)
        m_.reencoded.inc(produced.reencoded)
        for rej, msg in produced.rejected:
            m_.rejected.labels(rej.reason.value).inc()
            log("warning", "rejected", reason=rej.reason.value, reason_text=rej.text,
                partition=msg.partition(), offset=msg.offset())
        for dup, msg in produced.duplicates:
            m_.duplicates.inc()
            log("info", "duplicate", stream=dup.stream, event_id=dup.event_id,
                partition=msg.partition(), offset=msg.offset())


def _reason_headers(rejection: Rejection, m: Message) -> list[tuple[str, bytes]]:
    return [
        ("evidence.reason", rejection.reason.value.encode()),
        ("evidence.reason_text", rejection.text.encode("utf-8", "replace")),
        ("evidence.source_topic", m.topic().encode()),
        ("evidence.source_partition", str(m.partition()).encode()),
        ("evidence.source_offset", str(m.offset()).encode()),
    ]
