"""The writer's Kafka shell (service, loop, restore) against a fake producer and consumer.

The fakes keep what the shell relies on from librdkafka: a transaction's records and offsets
become visible together at commit or never; an error is librdkafka's own ``KafkaError``,
built with its flags (retriable, txn_requires_abort, fatal) and raised as ``KafkaException``
from the call that failed; after an abortable error every transactional call fails until
``abort_transaction``; after a fatal one every call fails. A producer's init_transactions
fences the older producer of its transactional id, and a consumer joining with a static
group.instance.id fences the older consumer of that id (librdkafka reports it as ``_FATAL``);
the group's members are listed with their client ids. The real thing is tested in
tests/integration/test_writer*.py; these reach the abort, rewind, retry and healing paths that
a healthy broker never takes.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass
from typing import Any, Callable

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from evidence_contract import GENESIS, record_digest, split_record
from evidence_contract.topics import partition_for
from server import kafka as server_kafka
from tests.fixtures.writer import encode_capture, make_capture
from topics import TopicSettings
from writer.config import WriterConfig
from writer.core import Sealer, encode_head
from writer import service as service_module
from writer.errors import FencedError, StateMismatchError, WriterError, WriterKafkaError
from writer.kafka_io import GroupMember, KafkaClients
from writer.loop import SealLoop
from writer.metrics import WriterMetrics
from writer.service import EXIT_FENCED, WriterService

pytestmark = pytest.mark.timeout(30)

SETTINGS = TopicSettings(partitions=2)
NAMES = SETTINGS.names
CONFIG = WriterConfig(bootstrap="fake:9092", topics=SETTINGS, transactional_id="tx-1",
                      group_id="g-1", writer_id="w-1", batch_linger_ms=0, metrics_port=0,
                      session_timeout_ms=200)
STREAM = "acme:shell"  # one stream, so one partition: Kafka's murmur2 puts it on 0 of 2


def kafka_error(code: int, *, retriable: bool = False, txn_requires_abort: bool = False,
                fatal: bool = False) -> KafkaError:
    """librdkafka's error object, carrying the verdict flags the shell branches on."""
    return KafkaError(code, f"injected {code}", fatal=fatal, retriable=retriable,
                      txn_requires_abort=txn_requires_abort)


# -- the fake cluster -----------------------------------------------------------------------
@dataclass(frozen=True)
class Stored:
    key: bytes | None
    value: bytes | None
    headers: list | None
    timestamp_ms: int


@dataclass(frozen=True)
class GroupMetadata:
    group_id: str


class Cluster:
    """Topics as lists of committed messages, the groups' committed offsets, the current
    producer of each transactional id and the static members of each group."""

    def __init__(self, partitions: int = SETTINGS.partitions) -> None:
        self.partitions = partitions
        self.topics: dict[tuple[str, int], list[Stored]] = defaultdict(list)
        self.group_offsets: dict[tuple[str, str, int], int] = {}
        self.transactional: dict[str, FakeProducer] = {}
        self.static: dict[tuple[str, str], FakeConsumer] = {}
        self.group_unknown = False  # the coordinator does not answer DescribeGroups
        self.session_timeout_s = 0.2  # a closed static member is listed this long after
        self._ms = itertools.count(1_800_000_000_000)

    def group_members(self, bootstrap: str, group: str) -> list[GroupMember]:
        if self.group_unknown:
            raise WriterKafkaError("describe group: injected", code=KafkaError._TIMED_OUT,
                                   name="_TIMED_OUT")
        now = time.monotonic()
        return [GroupMember(c.member_id, c.client_id, iid)
                for (g, iid), c in self.static.items() if g == group
                and (c.closed_at is None or now - c.closed_at < self.session_timeout_s)]

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               headers: list | None = None) -> None:
        self.topics[(topic, partition)].append(Stored(key, value, headers, next(self._ms)))

    def message(self, topic: str, partition: int, offset: int) -> Message:
        s = self.topics[(topic, partition)][offset]
        return Message(topic=topic, partition=partition, offset=offset, key=s.key, value=s.value,
                       headers=s.headers, error=None, timestamp=(1, s.timestamp_ms))

    def values(self, topic: str, partition: int = 0) -> list[bytes | None]:
        return [s.value for s in self.topics[(topic, partition)]]


class FakeProducer:
    """A transactional producer. ``fail(method, err)`` makes the next call of ``method``
    raise ``KafkaException(err)``; the error's flags set the producer's state as librdkafka's
    would (abortable: until abort; fatal: for good)."""

    def __init__(self, cluster: Cluster, config: dict[str, Any]) -> None:
        self.cluster, self.config = cluster, config
        self.calls: Counter[str] = Counter()
        self._failures: dict[str, deque[KafkaError]] = defaultdict(deque)
        self._open = False
        self._records: list[tuple[str, int, bytes | None, bytes | None, list | None]] = []
        self._offsets: list[tuple[str, str, int, int]] = []
        self._abortable: KafkaError | None = None
        self._fatal: KafkaError | None = None
        self.buffer_full = 0  # produce() raises BufferError this many times first
        self.hang: dict[str, threading.Event] = {}  # method -> blocks until the event is set
        self.report: deque[KafkaError] = deque()  # given to error_cb inside the next poll
        self.report_after_polls = 0  # ...or only after this many more polls (queued late)

    def fail(self, method: str, err: KafkaError, times: int = 1) -> None:
        self._failures[method].extend([err] * times)

    def _call(self, method: str, transactional: bool = True) -> None:
        self.calls[method] += 1
        if method in self.hang:
            self.hang[method].wait()
        if self._fatal is not None:
            raise KafkaException(self._fatal)
        if self._failures[method]:
            err = self._failures[method].popleft()
            if err.fatal():
                self._fatal = err
            elif err.txn_requires_abort():
                self._abortable = err
            raise KafkaException(err)
        if transactional and self._abortable is not None:
            raise KafkaException(self._abortable)

    def _require_open(self) -> None:
        if not self._open:
            raise KafkaException(KafkaError(KafkaError._STATE, "no transaction is open"))

    def init_transactions(self, timeout: float) -> None:
        self._call("init_transactions", transactional=False)
        tid = self.config.get("transactional.id")
        older = self.cluster.transactional.get(tid)
        if older is not None and older is not self:
            # A new epoch: the older producer is fenced and its open transaction aborted.
            older._fatal = KafkaError(KafkaError._FENCED, "fenced by a newer instance",
                                      fatal=True)
            older._open, older._records, older._offsets = False, [], []
        self.cluster.transactional[tid] = self

    def begin_transaction(self) -> None:
        self._call("begin_transaction")
        if self._open:
            raise KafkaException(KafkaError(KafkaError._STATE, "a transaction is already open"))
        self._open, self._records, self._offsets = True, [], []

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                partition: int = -1, headers: list | None = None) -> None:
        if self.buffer_full:
            self.buffer_full -= 1
            raise BufferError("Local: Queue full")
        self._call("produce")
        self._require_open()
        self._records.append((topic, partition, key, value, headers))

    def poll(self, timeout: float = 0) -> int:
        self.calls["poll"] += 1
        if self.report_after_polls:
            self.report_after_polls -= 1
            return 0
        while self.report:
            self.config["error_cb"](self.report.popleft())
        return 0

    def send_offsets_to_transaction(self, offsets: list[TopicPartition], metadata: GroupMetadata,
                                    timeout: float) -> None:
        self._call("send_offsets_to_transaction")
        self._require_open()
        self._offsets = [(metadata.group_id, tp.topic, tp.partition, tp.offset) for tp in offsets]

    def commit_transaction(self, timeout: float) -> None:
        self._call("commit_transaction")
        self._require_open()
        for topic, partition, key, value, headers in self._records:
            self.cluster.append(topic, partition, key, value, headers)
        for group, topic, partition, offset in self._offsets:
            self.cluster.group_offsets[(group, topic, partition)] = offset
        self._open = False

    def abort_transaction(self, timeout: float) -> None:
        self._call("abort_transaction", transactional=False)
        self._require_open()
        self._open, self._records, self._offsets, self._abortable = False, [], [], None

    def flush(self, timeout: float = 0) -> int:
        return 0


class FakeConsumer:
    """A read_committed consumer of the cluster: the intake consumer (subscribed, assigned
    every partition at its first consume) or the restore reader (assigned)."""

    def __init__(self, cluster: Cluster, config: dict[str, Any]) -> None:
        self.cluster, self.config = cluster, config
        self.group = config["group.id"]
        self.client_id = config.get("client.id", "rdkafka")
        self.member_id = f"{config.get('group.instance.id', 'dynamic')}-{id(self):x}"
        self.closed_at: float | None = None
        self.on_consume: deque[Callable[["FakeConsumer"], None]] = deque()  # one per consume
        self.error_cb: Callable[[KafkaError], None] = config.get("error_cb", lambda err: None)
        self.positions: dict[tuple[str, int], int] = {}
        self.seeks: list[tuple[int, int]] = []
        self.raise_on_consume: deque[KafkaError] = deque()
        self.report: deque[KafkaError] = deque()  # given to error_cb inside the next consume
        self._eof_sent: set[tuple[str, int]] = set()
        self._subscription: tuple[list[str], Callable, Callable] | None = None
        self._rebalanced = False

    def subscribe(self, topics: list[str], on_assign: Callable, on_revoke: Callable,
                  on_lost: Callable | None = None) -> None:
        self._subscription = (topics, on_assign, on_revoke)
        iid = self.config.get("group.instance.id")
        if iid is not None:
            older = self.cluster.static.get((self.group, iid))
            if older is not None and older is not self:
                older.report.append(KafkaError(KafkaError._FATAL, "fenced instance id",
                                               fatal=True))
            self.cluster.static[(self.group, iid)] = self

    def rebalance(self, revoke: list[int], assign: list[int] | None = None) -> None:
        """Run the revoke (then the assign) callbacks, as librdkafka does inside a consume."""
        assert self._subscription is not None
        topics, on_assign, on_revoke = self._subscription
        on_revoke(self, [TopicPartition(topics[0], p) for p in revoke])
        if assign is not None:
            on_assign(self, [TopicPartition(topics[0], p) for p in assign])

    def _serve(self) -> None:
        while self.report:
            self.error_cb(self.report.popleft())
        if self.on_consume:
            self.on_consume.popleft()(self)
        if self._subscription is not None and not self._rebalanced:
            self._rebalanced = True
            topics, on_assign, _ = self._subscription
            on_assign(self, [TopicPartition(t, p) for t in topics for p in range(self.cluster.partitions)])
        if self.raise_on_consume:
            raise KafkaException(self.raise_on_consume.popleft())

    def _resolve(self, tp: TopicPartition) -> int:
        if tp.offset >= 0:
            return tp.offset
        if tp.offset == OFFSET_END:
            return len(self.cluster.topics[(tp.topic, tp.partition)])
        if tp.offset == OFFSET_BEGINNING:
            return 0
        # OFFSET_INVALID / OFFSET_STORED: the group's offset, else auto.offset.reset=earliest
        return self.cluster.group_offsets.get((self.group, tp.topic, tp.partition), 0)

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition,
                               self.cluster.group_offsets.get((self.group, tp.topic, tp.partition), -1001))
                for tp in partitions]

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.positions = {(tp.topic, tp.partition): self._resolve(tp) for tp in partitions}
        self._eof_sent = set()

    def unassign(self) -> None:
        self.positions = {}

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self.positions]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.positions[(tp.topic, tp.partition)])
                for tp in partitions]

    def seek(self, tp: TopicPartition) -> None:
        self.positions[(tp.topic, tp.partition)] = self._resolve(tp)
        self._eof_sent.discard((tp.topic, tp.partition))
        self.seeks.append((tp.partition, tp.offset))

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        self._serve()
        out: list[Message] = []
        for (topic, p), pos in sorted(self.positions.items()):
            end = len(self.cluster.topics[(topic, p)])
            while pos < end and len(out) < num_messages:
                out.append(self.cluster.message(topic, p, pos))
                pos += 1
            self.positions[(topic, p)] = pos
            if (self.config.get("enable.partition.eof") and pos >= end
                    and (topic, p) not in self._eof_sent and len(out) < num_messages):
                self._eof_sent.add((topic, p))
                out.append(Message(topic=topic, partition=p, offset=pos,
                                   error=KafkaError(KafkaError._PARTITION_EOF)))
        return out

    def poll(self, timeout: float | None = None) -> Message | None:
        msgs = self.consume(1, timeout or 0)
        return msgs[0] if msgs else None

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int]:
        return 0, len(self.cluster.topics[(tp.topic, tp.partition)])

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        out = []
        for tp in partitions:
            stored = self.cluster.topics[(tp.topic, tp.partition)]
            first = next((i for i, s in enumerate(stored) if s.timestamp_ms >= tp.offset), -1)
            out.append(TopicPartition(tp.topic, tp.partition, first))
        return out

    def consumer_group_metadata(self) -> GroupMetadata:
        return GroupMetadata(self.group)

    def memberid(self) -> str:
        return self.member_id

    def close(self) -> None:
        if self._subscription is not None and self.positions:
            self._subscription[2](self, self.assignment())
        self.closed_at = time.monotonic()  # a static member stops heartbeating, stays listed


class Fakes:
    """A cluster, the clients the writer made from it, and a running WriterService."""

    def __init__(self, **config: Any) -> None:
        self.cluster = Cluster()
        self.producers: list[FakeProducer] = []
        self.consumers: list[FakeConsumer] = []
        self.config = WriterConfig(**{**CONFIG.__dict__, **config})
        self.clock = itertools.count(1_800_000_000_000_000, 1_000).__next__
        self.service = self.new_service()

    def new_service(self, **kw: Any) -> WriterService:
        """A writer process on this cluster (its own client id), with this config."""
        return WriterService(self.config, WriterMetrics(), clock=self.clock,
                             clients=self.clients(), **{"fencing_wait_s": 0.5, **kw})

    def clients(self) -> KafkaClients:
        return KafkaClients(self._producer, self._consumer, lambda bootstrap, topics: None,
                            self.cluster.group_members)

    def _producer(self, config: dict[str, Any]) -> FakeProducer:
        self.producers.append(FakeProducer(self.cluster, config))
        return self.producers[-1]

    def _consumer(self, config: dict[str, Any]) -> FakeConsumer:
        self.consumers.append(FakeConsumer(self.cluster, config))
        return self.consumers[-1]

    @property
    def producer(self) -> FakeProducer:
        return self.producers[-1]

    @property
    def intake_consumer(self) -> FakeConsumer:
        return [c for c in self.consumers if c.group == self.config.group_id][-1]

    def run_until(self, done: Callable[[], bool], timeout: float = 10.0,
                  service: WriterService | None = None) -> int:
        """``service.run()`` on a thread until ``done()`` (then a stop request) or until it
        returns by itself; its exit code."""
        service = service or self.service
        result: list[int] = []
        t = threading.Thread(target=lambda: result.append(service.run()), daemon=True)
        t.start()
        deadline = time.monotonic() + timeout
        while t.is_alive() and not done():
            assert time.monotonic() < deadline, "run_until: condition not reached"
            time.sleep(0.005)
        service.request_stop()
        t.join(10)
        assert not t.is_alive(), "run() did not return after a stop request"
        return result[0]

    def start(self) -> "Fakes":
        self.service.start()
        return self

    def captures(self, n: int, partition: int = 0) -> list[str]:
        """Produce ``n`` captures of STREAM to intake (as the gateway would); their ids."""
        assert partition_for(STREAM, SETTINGS.partitions) == partition, "not the stream's partition"
        ids = []
        for _ in range(n):
            event = make_capture(STREAM)
            self.cluster.append(NAMES.intake, partition, STREAM.encode(), encode_capture(event))
            ids.append(event["event_id"])
        return ids

    def step(self) -> None:
        self.service._raise_failure()
        assert self.service._loop is not None
        self.service._loop.step()

    def sealed(self, partition: int = 0) -> list[tuple[int, str, bytes, bytes]]:
        """(seq, event_id, prev_digest, record_digest) of each committed log record."""
        out = []
        for value in self.cluster.values(NAMES.log, partition):
            body, rec = split_record(value)
            seal = rec["seal"]
            assert seal["record_digest"] == record_digest(seal["prev_digest"], seal["seq"],
                                                          seal["occurred_at"], body)
            out.append((seal["seq"], rec["body"]["event_id"], seal["prev_digest"],
                        seal["record_digest"]))
        return out

    def intake_offset(self, partition: int = 0) -> int | None:
        return self.cluster.group_offsets.get((self.config.group_id, NAMES.intake, partition))


def assert_gapless_chain(sealed: list[tuple[int, str, bytes, bytes]], event_ids: list[str]) -> None:
    assert [s[0] for s in sealed] == list(range(1, len(event_ids) + 1)), "a gap or a duplicate seq"
    assert [s[1] for s in sealed] == event_ids, "not sealed once each, in intake order"
    prev = GENESIS
    for seq, _eid, prev_digest, digest in sealed:
        assert prev_digest == prev, f"seq {seq} does not link to its predecessor"
        prev = digest


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, Any]]:
    return [{"event": r.getMessage(), **getattr(r, "evidence_fields", {})}
            for r in caplog.records if r.name == "evidence.writer" and r.getMessage() == name]


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_module, "BACKOFF_MIN_S", 0.01)


@pytest.fixture
def fakes(caplog: pytest.LogCaptureFixture) -> Fakes:
    caplog.set_level(logging.INFO, logger="evidence.writer")
    return Fakes().start()


# -- commit retry -----------------------------------------------------------------------------
def test_a_commit_that_fails_retriable_is_retried_then_succeeds(fakes, caplog):
    ids = fakes.captures(3)
    fakes.producer.fail("commit_transaction", kafka_error(KafkaError._TIMED_OUT, retriable=True), times=2)
    fakes.step()
    assert fakes.producer.calls["commit_transaction"] == 3
    assert fakes.producer.calls["abort_transaction"] == 0
    assert_gapless_chain(fakes.sealed(), ids)
    assert fakes.intake_offset() == 3
    assert len(events(caplog, "commit_retry")) == 2
    assert fakes.service.metrics.aborts._value.get() == 0


def test_a_commit_that_keeps_timing_out_gives_the_producer_up_and_heals(caplog, monkeypatch):
    """After a broker stall a producer may never reach its coordinator again: every
    commit_transaction times out with the request still queued (seen in CI, retried for 90 s
    and more). Past COMMIT_GIVE_UP_S the clients are made anew, without an abort on the old
    producer (the commit's outcome is unknown), and the batch is sealed once."""
    import writer.loop as loop_module

    monkeypatch.setattr(loop_module, "COMMIT_GIVE_UP_S", 0.3)
    monkeypatch.setattr(loop_module, "COMMIT_RETRY_MAX_S", 0.05)
    f = Fakes()
    f.start()
    ids = f.captures(3)
    stuck = f.producer
    stuck.fail("commit_transaction", kafka_error(KafkaError._TIMED_OUT, retriable=True),
               times=10_000)
    caplog.set_level(logging.INFO, logger="evidence.writer")
    assert f.run_until(lambda: len(f.sealed()) == 3) == 0
    assert_gapless_chain(f.sealed(), ids)
    assert len(f.producers) == 2 and f.producers[1].calls["init_transactions"] == 1
    assert stuck.calls["abort_transaction"] == 0 and stuck.calls["commit_transaction"] >= 2
    [healing] = events(caplog, "reconnecting")
    assert healing["error_type"] == "CommitUnknownError"
    assert "outcome is unknown" in healing["error"]
    assert f.intake_offset() == 3


def test_a_retriable_commit_error_that_also_requires_abort_is_not_retried(fakes, caplog):
    ids = fakes.captures(2)
    fakes.producer.fail("commit_transaction", kafka_error(
        KafkaError._TIMED_OUT, retriable=True, txn_requires_abort=True))
    fakes.step()
    assert fakes.producer.calls["commit_transaction"] == 1
    assert fakes.producer.calls["abort_transaction"] == 1
    assert not events(caplog, "commit_retry")
    fakes.step()
    assert_gapless_chain(fakes.sealed(), ids)


# -- abort and rewind -------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["produce", "send_offsets_to_transaction", "commit_transaction"])
def test_an_abortable_error_aborts_rewinds_and_reseals_the_same_captures_with_the_same_seqs(
        fakes, caplog, method):
    first = fakes.captures(2)
    fakes.step()  # a committed batch first: the rewind must go back to it, not to 0
    assert fakes.intake_offset() == 2
    second = fakes.captures(3)
    fakes.producer.fail(method, kafka_error(KafkaError.INVALID_TXN_STATE if method != "produce"
                                            else KafkaError._STATE, txn_requires_abort=True))
    fakes.step()
    assert fakes.producer.calls["abort_transaction"] == 1
    assert fakes.intake_consumer.seeks == [(0, 2), (1, OFFSET_BEGINNING)], \
        "every assigned partition rewound to its last committed offset"
    assert fakes.intake_offset() == 2
    assert_gapless_chain(fakes.sealed(), first)  # nothing of the aborted batch is visible
    assert [e["code"] for e in events(caplog, "transaction_aborted")] == [
        KafkaError(KafkaError.INVALID_TXN_STATE if method != "produce" else KafkaError._STATE).name()]
    fakes.step()
    assert_gapless_chain(fakes.sealed(), first + second)
    assert fakes.intake_offset() == 5
    assert fakes.service.metrics.aborts._value.get() == 1
    assert fakes.service.metrics.sealed._value.get() == 5
    assert not events(caplog, "duplicate"), "a re-sealed capture is not a duplicate"
    heads = fakes.cluster.values(NAMES.writer_state)
    assert len(heads) == 2 and heads[-1] == encode_head(
            fakes.service.sealer.head(0, STREAM), 0,
            fakes.service.sealer.trees.tree(0, STREAM).state(signing=False))


def test_a_failed_begin_transaction_aborts_nothing_and_rewinds(fakes, caplog):
    ids = fakes.captures(2)
    fakes.producer.fail("begin_transaction", kafka_error(KafkaError._TRANSPORT, retriable=True))
    fakes.step()
    assert [e["code"] for e in events(caplog, "abort_failed")] == ["_STATE"]
    assert fakes.intake_consumer.seeks == [(0, OFFSET_BEGINNING), (1, OFFSET_BEGINNING)], \
        "nothing committed: from the start"
    assert fakes.sealed() == []
    fakes.step()
    assert_gapless_chain(fakes.sealed(), ids)


def test_a_full_local_queue_waits_for_deliveries_and_produces_again(fakes):
    ids = fakes.captures(2)
    fakes.producer.buffer_full = 3
    fakes.step()
    assert fakes.producer.calls["poll"] == 3
    assert_gapless_chain(fakes.sealed(), ids)


def test_rejected_and_duplicate_messages_commit_with_the_batch(fakes, caplog):
    ids = fakes.captures(1)
    fakes.cluster.append(NAMES.intake, 0, STREAM.encode(), b"not avro")
    fakes.cluster.append(NAMES.intake, 0, STREAM.encode(), fakes.cluster.values(NAMES.intake)[0])
    fakes.step()
    assert_gapless_chain(fakes.sealed(), ids)
    [rejected] = fakes.cluster.topics[(NAMES.rejected, 0)]
    assert rejected.value == b"not avro"
    assert dict(rejected.headers)["evidence.reason"] == b"NOT_AVRO"
    assert dict(rejected.headers)["evidence.source_offset"] == b"1"
    assert [e["event_id"] for e in events(caplog, "duplicate")] == ids
    assert fakes.intake_offset() == 3


# -- fatal errors and fencing -----------------------------------------------------------------
def test_a_fatal_error_exits_the_loop_with_the_writer_kafka_error(fakes, caplog):
    fakes.captures(1)
    fakes.producer.fail("commit_transaction", kafka_error(KafkaError._INCONSISTENT, fatal=True))
    with pytest.raises(WriterKafkaError) as e:
        fakes.step()
    assert not isinstance(e.value, FencedError)
    assert (e.value.fatal, e.value.name, e.value.code) == (True, "_INCONSISTENT", KafkaError._INCONSISTENT)
    assert isinstance(e.value, server_kafka.KafkaClientError) and isinstance(e.value, WriterError)
    assert isinstance(e.value.__cause__, KafkaException)
    assert fakes.producer.calls["abort_transaction"] == 0, "a fatal error is not aborted"
    assert fakes.sealed() == [] and fakes.intake_offset() is None


def test_a_fenced_producer_is_a_fenced_error(fakes):
    fakes.captures(1)
    fakes.producer.fail("commit_transaction", kafka_error(KafkaError.PRODUCER_FENCED, fatal=True))
    with pytest.raises(FencedError) as e:
        fakes.step()
    assert isinstance(e.value, server_kafka.FencedError) and isinstance(e.value, WriterKafkaError)
    assert e.value.name == "PRODUCER_FENCED" and fakes.producer.calls["abort_transaction"] == 0


def test_the_fatal_error_of_a_producer_heals_with_a_new_producer_and_the_chain_goes_on(caplog):
    f = Fakes()
    f.start()
    ids = f.captures(2)
    f.producer.fail("commit_transaction", kafka_error(KafkaError._INCONSISTENT, fatal=True))
    caplog.set_level(logging.INFO, logger="evidence.writer")
    assert f.run_until(lambda: len(f.sealed()) == 2) == 0
    assert_gapless_chain(f.sealed(), ids)
    assert len(f.producers) == 2 and f.producers[1].calls["init_transactions"] == 1
    [healing] = events(caplog, "reconnecting")
    assert healing["error_type"] == "WriterKafkaError" and healing["code"] == "_INCONSISTENT"
    assert events(caplog, "reconnected") and not events(caplog, "fatal")
    assert f.intake_offset() == 2
    assert f.service.metrics.reconnects.labels("WriterKafkaError")._value.get() == 1


def test_the_metrics_give_the_intake_lag_and_the_time_of_the_last_commit():
    f = Fakes(batch_max_messages=2).start()
    f.captures(5)
    before = time.time()
    f.step()  # two of five consumed and sealed
    m = f.service.metrics
    assert m.intake_lag._value.get() == 3
    assert m.last_commit._value.get() >= before - 1


def test_fenced_by_the_coordinator_alone_heals_at_once_and_reseals_the_same_seqs(caplog):
    """kill -9 of the broker: the coordinator aborts the timed-out transaction and bumps the
    epoch, so the writer's abort (or next call) says _FENCED although no other writer exists."""
    f = Fakes()
    f.start()
    first = f.captures(1)
    f.step()
    more = f.captures(2)
    f.producer.fail("send_offsets_to_transaction",
                    kafka_error(KafkaError._FENCED, fatal=True))
    caplog.set_level(logging.INFO, logger="evidence.writer")
    assert f.run_until(lambda: len(f.sealed()) == 3) == 0
    assert_gapless_chain(f.sealed(), first + more)
    [suspect] = events(caplog, "fenced_without_rival")
    assert suspect["code"] == "_FENCED"
    assert events(caplog, "reconnecting")[0]["retry_in_s"] == 0.0
    assert not events(caplog, "fenced")


@pytest.mark.parametrize("ghost", [False, True], ids=["own-member", "unknown-stale-member"])
def test_a_static_consumer_fenced_after_a_broker_stall_heals(caplog, ghost):
    """A broker stalled past the session timeout: librdkafka's consumer is fenced by its own
    rejoin (FENCED_INSTANCE_ID, reported as _FATAL). The member holding the id is ours, or
    one the consumer never learnt (the rejoin's), which stops heartbeating with it and expires."""
    f = Fakes()
    f.start()
    ids = f.captures(1)
    f.step()
    if ghost:
        stale = FakeConsumer(f.cluster, {"group.id": CONFIG.group_id, "client.id": "x",
                                         "group.instance.id": CONFIG.instance_id})
        stale.closed_at = time.monotonic()  # not heartbeating
        f.cluster.static[(CONFIG.group_id, CONFIG.instance_id)] = stale
    f.intake_consumer.report.append(kafka_error(KafkaError._FATAL, fatal=True))
    more = f.captures(1)
    caplog.set_level(logging.INFO, logger="evidence.writer")
    assert f.run_until(lambda: len(f.sealed()) == 2) == 0
    assert_gapless_chain(f.sealed(), ids + more)
    assert events(caplog, "fenced_without_rival") and not events(caplog, "fenced")


def test_a_live_rival_with_our_identity_ends_the_writer_with_exit_3(caplog):
    f = Fakes()
    f.start()
    ids = f.captures(2)
    f.step()
    rival = f.new_service()  # another process: same transactional and instance id
    rival.start()            # fences our producer; its consumer takes our instance id
    caplog.set_level(logging.INFO, logger="evidence.writer")
    more = f.captures(1)
    assert f.run_until(lambda: False) == EXIT_FENCED
    [fenced] = events(caplog, "fenced")
    assert rival._consumer.memberid() in fenced["rival"] and fenced["exit_code"] == 3
    assert "took over" in fenced["message"]
    assert f.sealed()[-1][1] == ids[-1], "the fenced writer sealed nothing more"
    assert f.run_until(lambda: len(f.sealed()) == 3, service=rival) == 0
    assert_gapless_chain(f.sealed(), ids + more)


def _a_rival_and_a_bare_fatal_produce(holds_the_id: bool = True) -> tuple["Fakes", FakeConsumer]:
    """A writer that sealed a batch; a rival consumer with its group.instance.id (alive and
    heartbeating as the id's holder, unless ``holds_the_id`` is false: it has not joined yet);
    the writer's next produce fails with a bare _FATAL, as a fenced producer's does."""
    f = Fakes()
    f.start()
    f.captures(1)
    f.step()
    rival = FakeConsumer(f.cluster, {"group.id": CONFIG.group_id, "client.id": "other",
                                     "group.instance.id": CONFIG.instance_id})
    if holds_the_id:
        f.cluster.static[(CONFIG.group_id, CONFIG.instance_id)] = rival
    f.captures(1)
    f.producer.fail("produce", kafka_error(KafkaError._FATAL, fatal=True))
    return f, rival


def test_a_generic_fatal_error_is_named_by_the_error_callback_and_a_rival_ends_the_writer(caplog):
    """A fenced producer fails the produce in progress with a bare _FATAL; the fencing itself
    reaches the error callback in the next poll."""
    f, rival = _a_rival_and_a_bare_fatal_produce()
    f.producer.report.append(kafka_error(KafkaError._FENCED, fatal=True))
    caplog.set_level(logging.INFO, logger="evidence.writer")
    assert f.run_until(lambda: False) == EXIT_FENCED
    [fenced] = events(caplog, "fenced")
    assert fenced["code"] == "_FENCED" and rival.member_id in fenced["rival"]
    assert not events(caplog, "reconnecting")


def test_a_fencing_event_queued_after_the_failed_call_still_names_it(caplog):
    """librdkafka marks the producer fatal before it queues the fatal error event, so the
    produce in progress can fail before a poll(0) would see the event (seen in CI: the
    fenced writer healed, fenced its rival back, and the two took turns). The writer waits
    for the event a little; a rival then ends it."""
    f, rival = _a_rival_and_a_bare_fatal_produce()
    f.producer.report.append(kafka_error(KafkaError._FENCED, fatal=True))
    f.producer.report_after_polls = 3
    caplog.set_level(logging.INFO, logger="evidence.writer")
    assert f.run_until(lambda: False) == EXIT_FENCED
    [fenced] = events(caplog, "fenced")
    assert fenced["code"] == "_FENCED"
    assert not events(caplog, "reconnecting"), "the fenced writer must not reconnect"


def test_a_fencing_only_the_consumer_reports_still_names_it(caplog):
    """The producer's fatal event never comes (a full-suite run waited its whole 10 s); the
    rival's consumer, joining with our group.instance.id, fences our intake consumer, whose
    fatal error only a consume serves. The writer serves both while it waits; a rival then
    ends it rather than a reconnect that would fence the rival back."""
    f, rival = _a_rival_and_a_bare_fatal_produce(holds_the_id=False)
    poll = f.producer.poll

    def rival_joins_after_the_failed_produce(timeout: float = 0) -> int:
        if (CONFIG.group_id, CONFIG.instance_id) not in f.cluster.static or \
                f.cluster.static[(CONFIG.group_id, CONFIG.instance_id)] is not rival:
            rival.subscribe(["intake"], lambda *a: None, lambda *a: None)  # fences ours
        return poll(timeout)

    f.producer.poll = rival_joins_after_the_failed_produce  # type: ignore[method-assign]
    caplog.set_level(logging.INFO, logger="evidence.writer")
    assert f.run_until(lambda: False) == EXIT_FENCED
    [fenced] = events(caplog, "fenced")
    assert rival.member_id in fenced["rival"]
    assert not events(caplog, "reconnecting"), "the fenced writer must not reconnect"


def test_fenced_again_and_again_with_the_group_unknown_is_a_rival(caplog):
    f = Fakes()
    f.start()
    f.cluster.group_unknown = True
    caplog.set_level(logging.INFO, logger="evidence.writer")
    f.captures(1)

    def fence_each_new_producer(config: dict[str, Any]) -> FakeProducer:
        p = FakeProducer(f.cluster, config)
        p.fail("send_offsets_to_transaction", kafka_error(KafkaError._FENCED, fatal=True))
        f.producers.append(p)
        return p

    f.service._clients = KafkaClients(fence_each_new_producer, f._consumer,
                                      lambda b, t: None, f.cluster.group_members)
    f.producer.fail("send_offsets_to_transaction", kafka_error(KafkaError._FENCED, fatal=True))
    assert f.run_until(lambda: False) == EXIT_FENCED
    assert len(events(caplog, "fenced_without_rival")) == 2
    [fenced] = events(caplog, "fenced")
    assert "fenced 3 times" in fenced["rival"]


def test_a_call_that_outlives_its_deadline_abandons_the_producer_and_a_new_one_seals(caplog):
    """librdkafka #5456/#5511: send_offsets_to_transaction waits forever for a coordinator
    it cached before a broker restart, its timeout ignored."""
    f = Fakes()
    f.service = f.new_service(call_deadline_s=0.3)
    f.start()
    ids = f.captures(3)
    stuck = threading.Event()
    f.producer.hang["send_offsets_to_transaction"] = stuck
    caplog.set_level(logging.INFO, logger="evidence.writer")
    try:
        assert f.run_until(lambda: len(f.sealed()) == 3) == 0
    finally:
        stuck.set()
    assert_gapless_chain(f.sealed(), ids)
    assert len(f.producers) == 2
    [healing] = events(caplog, "reconnecting")
    assert healing["error_type"] == "WedgedError"
    assert events(caplog, "client_abandoned")
    assert f.intake_offset() == 3


def test_an_abort_that_times_out_heals_with_a_new_producer(caplog):
    f = Fakes()
    f.start()
    ids = f.captures(2)
    f.producer.fail("commit_transaction", kafka_error(KafkaError.INVALID_TXN_STATE,
                                                      txn_requires_abort=True))
    f.producer.fail("abort_transaction", kafka_error(KafkaError._TIMED_OUT, retriable=True))
    caplog.set_level(logging.INFO, logger="evidence.writer")
    assert f.run_until(lambda: len(f.sealed()) == 2) == 0
    assert_gapless_chain(f.sealed(), ids)
    assert [e["code"] for e in events(caplog, "reconnecting")] == ["_TIMED_OUT"]


def test_a_restore_that_fails_on_a_restarted_broker_heals(caplog, monkeypatch):
    """After a broker restart offsets_for_times may answer FENCED_LEADER_EPOCH once."""
    f = Fakes()
    failures = [kafka_error(KafkaError.FENCED_LEADER_EPOCH, retriable=True)]
    real = FakeConsumer.offsets_for_times

    def flaky(self, partitions, timeout=None):
        if failures:
            raise KafkaException(failures.pop())
        return real(self, partitions, timeout)

    monkeypatch.setattr(FakeConsumer, "offsets_for_times", flaky)
    f.start()
    ids = f.captures(2)
    caplog.set_level(logging.INFO, logger="evidence.writer")
    assert f.run_until(lambda: len(f.sealed()) == 2) == 0
    assert_gapless_chain(f.sealed(), ids)
    assert [e["code"] for e in events(caplog, "reconnecting")] == ["FENCED_LEADER_EPOCH"]


def test_start_waits_while_kafka_does_not_answer(caplog):
    f = Fakes()
    answers = [KafkaException(kafka_error(KafkaError._TRANSPORT)),
               KafkaException(kafka_error(KafkaError._TIMED_OUT, retriable=True))]

    def check(bootstrap, topics):
        if answers:
            raise answers.pop(0)

    f.service._clients = KafkaClients(f._producer, f._consumer, check, f.cluster.group_members)
    caplog.set_level(logging.INFO, logger="evidence.writer")
    f.start()
    assert [e["error"].split(":")[0] for e in events(caplog, "waiting_for_kafka")] == \
        ["check topics", "check topics"]
    ids = f.captures(1)
    f.step()
    assert_gapless_chain(f.sealed(), ids)


def test_wrong_topics_still_stop_start_up():
    from topics.spec import TopicConfigError

    f = Fakes()

    def check(bootstrap, topics):
        raise TopicConfigError("x.log: topic does not exist")

    f.service._clients = KafkaClients(f._producer, f._consumer, check, f.cluster.group_members)
    with pytest.raises(TopicConfigError):
        f.start()


def test_a_fatal_consume_error_stops_the_loop(fakes):
    fakes.intake_consumer.raise_on_consume.append(kafka_error(KafkaError._FATAL, fatal=True))
    with pytest.raises(WriterKafkaError) as e:
        fakes.step()
    assert e.value.fatal


def test_a_fatal_error_in_place_of_a_message_is_the_consumers_fencing(fakes, monkeypatch):
    fenced = Message(topic=NAMES.intake, partition=0, offset=0,
                     error=kafka_error(KafkaError._FATAL, fatal=True))
    monkeypatch.setattr(fakes.intake_consumer, "consume", lambda n=1, t=-1: [fenced])
    with pytest.raises(FencedError):  # a consumer's only fatal error is fencing
        fakes.step()


# -- rebalances inside a batch ----------------------------------------------------------------
def lingering_fakes() -> Fakes:
    """A writer whose batches take two consume calls: what is fetched, then the linger."""
    return Fakes(batch_linger_ms=20).start()


def test_a_partition_revoked_inside_the_linger_call_is_not_sealed_here(caplog):
    """Another writer joined: the revoke runs inside the batch's second consume call, after
    the first returned messages of the revoked partition (was: exit 1, unowned partition)."""
    f = lingering_fakes()
    f.captures(3)
    f.intake_consumer.on_consume.extend([lambda c: None, lambda c: c.rebalance(revoke=[0, 1])])
    caplog.set_level(logging.INFO, logger="evidence.writer")
    assert f.service._loop.step() == 0
    assert f.sealed() == [] and f.intake_offset() is None
    assert not f.service.sealer.owned()
    [dropped] = events(caplog, "batch_dropped_after_rebalance")
    assert dropped["messages"] == 3 and dropped["partitions"] == [0]


def test_a_partition_revoked_and_assigned_again_inside_the_linger_is_sealed_once(caplog):
    f = lingering_fakes()
    ids = f.captures(3)
    f.intake_consumer.on_consume.extend(
        [lambda c: None, lambda c: c.rebalance(revoke=[0, 1], assign=[0, 1])])
    caplog.set_level(logging.INFO, logger="evidence.writer")
    assert f.service._loop.step() == 3
    assert_gapless_chain(f.sealed(), ids)
    assert not events(caplog, "duplicate"), "the first call's copies were sealed too"
    assert f.intake_offset() == 3
    more = f.captures(2)
    f.service._loop.step()
    assert_gapless_chain(f.sealed(), ids + more)


# -- restore ----------------------------------------------------------------------------------
def test_a_restarted_writer_continues_the_chain_from_the_restored_head(caplog):
    f = Fakes()
    f.start()
    ids = f.captures(2)
    f.step()
    f.service.close()
    f.service = WriterService(f.config, WriterMetrics(), clock=f.clock,
                              clients=KafkaClients(f._producer, f._consumer, lambda b, t: None))
    f.start()
    more = f.captures(2)
    f.step()
    assert_gapless_chain(f.sealed(), ids + more)


def test_writer_state_that_disagrees_with_the_log_stops_the_writer(caplog):
    f = Fakes()
    f.start()
    f.captures(1)
    f.step()
    f.cluster.topics[(NAMES.log, 0)].clear()  # the record is gone, its head is not
    f.service.close()
    f.service = WriterService(f.config, WriterMetrics(), clock=f.clock,
                              clients=KafkaClients(f._producer, f._consumer, lambda b, t: None))
    f.start()
    caplog.set_level(logging.INFO, logger="evidence.writer")
    assert f.service.run() == 1
    [fatal] = events(caplog, "fatal")
    assert fatal["error_type"] == StateMismatchError.__name__


def test_the_sealed_writer_identity_carries_the_installed_version(fakes):
    from importlib.metadata import version

    fakes.captures(1)
    fakes.step()
    _, rec = split_record(fakes.cluster.values(NAMES.log)[0])
    assert rec["seal"]["writer"]["version"] == version("evidence-store")
    assert rec["seal"]["writer"]["transactional_id"] == "tx-1"


def test_the_loop_works_on_any_producer_and_consumer():
    """SealLoop alone, without the service: the pieces are plain and injectable."""
    cluster = Cluster()
    producer = FakeProducer(cluster, {})
    consumer = FakeConsumer(cluster, {"group.id": CONFIG.group_id})
    consumer.assign([TopicPartition(NAMES.intake, 0)])
    sealer = Sealer({"writer_id": "w", "transactional_id": "t", "version": "v"},
                    SETTINGS.max_message_bytes, 10**12, 100)
    sealer.assign(0, {}, sealer.new_window())
    loop = SealLoop(producer, consumer, sealer, CONFIG, WriterMetrics(),
                    itertools.count(1_800_000_000_000_000).__next__)
    event = make_capture(STREAM)
    cluster.append(NAMES.intake, 0, STREAM.encode(), encode_capture(event))
    assert loop.step() == 1
    assert len(cluster.values(NAMES.log)) == 1
    assert loop.step() == 0  # idle


def test_fencings_in_the_window_mean_a_rival_and_a_live_rival_needs_a_session_timeout(
        monkeypatch):
    from writer.fencing import FENCINGS_FOR_RIVAL, Fencings, live_rival

    fencings = Fencings()
    assert [fencings.add() for _ in range(FENCINGS_FOR_RIVAL - 1)] == [None] * (FENCINGS_FOR_RIVAL - 1)
    assert fencings.add() == f"fenced {FENCINGS_FOR_RIVAL} times in 120 s"

    class M:
        def __init__(self, member_id: str) -> None:
            self.member_id, self.client_id, self.group_instance_id = member_id, "c", "w-1"

    pauses: list[float] = []
    ours, theirs = M("ours"), M("theirs")
    # Only our own member holds the id: no rival, once the join wait has passed.
    assert live_rival(lambda: [ours], "w-1", {"ours"}, 0, 0.0, lambda: False,
                      pauses.append) is None
    # Another member holds it, and is still there a session timeout (+2 s) later: a rival.
    clock = iter(range(0, 100))
    import writer.fencing as fencing

    monkeypatch.setattr(fencing.time, "monotonic", lambda: float(next(clock)))
    assert live_rival(lambda: [theirs], "w-1", {"ours"}, 1000, 5.0, lambda: False,
                      pauses.append) is theirs
    assert pauses, "the watch paused between looks"
