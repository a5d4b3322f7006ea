"""The writer's Kafka clients: the only module of ``writer`` that imports confluent_kafka.

What the rest of the writer needs from librdkafka, as small functions over a producer or a
consumer it is handed:

- :class:`KafkaClients` — how the producer and consumers are made (confluent_kafka's by
  default; tests pass fakes), how topics are checked and how the group's members are listed;
- ``*_config(cfg, error_cb)`` — the three clients' settings, and why;
- :func:`kafka_errors` / :func:`translate` — :mod:`server.kafka`'s mapping into
  :class:`~writer.errors.WriterKafkaError` and :class:`~writer.errors.FencedError`;
- :func:`produce`, :func:`consume_batch`, :func:`rewind`, :func:`stable_committed`,
  :func:`read_partition`,
  :func:`watermarks`, :func:`offset_for_time` — the calls, with librdkafka's quirks handled;
- :func:`bounded` — a blocking call with a deadline of our own, for librdkafka calls that
  do not always keep theirs (:class:`~writer.errors.WedgedError`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from server import kafka as _kafka
from server.logs import event_logger
from topics import TopicSettings, check_topics
from writer.config import WriterConfig
from writer.errors import FencedError, WedgedError, WriterError, WriterKafkaError

__all__ = [
    "Consumer",
    "GroupMember",
    "KafkaClients",
    "KafkaError",
    "KafkaException",
    "Message",
    "Producer",
    "TIMEOUT_S",
    "TopicPartition",
    "bounded",
    "check_topics_of",
    "consume_batch",
    "consumer_config",
    "error_of",
    "group_members",
    "is_fatal",
    "is_fenced",
    "kafka_errors",
    "offset_for_time",
    "produce",
    "producer_config",
    "read_partition",
    "reader_config",
    "stable_committed",
    "rewind",
    "translate",
    "watermarks",
]

TIMEOUT_S = 30.0
READ_DEADLINE_S = 120.0  # reading one partition of writer-state or the log to its end
STABLE_ASK_S = 2.0  # one ask for stable committed offsets; asked again until the caller's wait
MAX_POLL_INTERVAL_MS = 300_000
FETCH_MIN_BYTES = 512 * 1024  # the intake consumer's fetches (consumer_config)
QUEUED_KBYTES = 16 * 1024  # the intake consumer's prefetched captures, at most (consumer_config)

ErrorCallback = Callable[[KafkaError], None]
T = TypeVar("T")
log = event_logger("evidence.writer")
error_of = _kafka.error_of
is_fatal = _kafka.is_fatal
is_fenced = _kafka.is_fenced


@dataclass(frozen=True)
class GroupMember:
    """One member of a consumer group, as the group coordinator describes it."""

    member_id: str
    client_id: str
    group_instance_id: str | None


def group_members(bootstrap: str, group_id: str, timeout: float = 5.0) -> list[GroupMember]:
    """The members of ``group_id`` now; raises :class:`WriterKafkaError` when the
    coordinator does not answer."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with kafka_errors(f"describe group {group_id}"):
        desc = admin.describe_consumer_groups([group_id], request_timeout=timeout)[group_id]
        group = desc.result(timeout)
    return [GroupMember(m.member_id, m.client_id, m.group_instance_id) for m in group.members]


@dataclass(frozen=True)
class KafkaClients:
    """How the writer gets its clients; each is called with a confluent_kafka config dict
    (``check_topics`` with the bootstrap servers and the topic settings, ``group_members``
    with the bootstrap servers and a group id)."""

    producer: Callable[[dict[str, Any]], Producer] = Producer
    consumer: Callable[[dict[str, Any]], Consumer] = Consumer
    check_topics: Callable[[str, TopicSettings], None] = check_topics
    group_members: Callable[[str, str], list[GroupMember]] = group_members


def check_topics_of(clients: KafkaClients, cfg: WriterConfig) -> None:
    """``clients.check_topics``; Kafka not answering is a :class:`WriterKafkaError` (wait
    and try again), a topic that is missing or wrong a ``TopicConfigError`` (do not start)."""
    with kafka_errors("check topics"):
        clients.check_topics(cfg.bootstrap, cfg.topics)


def bounded(what: str, call: Callable[[], T], deadline_s: float) -> T:
    """``call()``, waited for at most ``deadline_s``; past it, :class:`WedgedError`.

    librdkafka's blocking transactional calls take a timeout but do not always keep it:
    ``send_offsets_to_transaction`` waits for a group coordinator it cached before a broker
    restart, without end (librdkafka #5456, #5511), while the consumer's poll interval and the
    transaction timeout run out behind it. So the call runs on a daemon thread and the caller
    waits for it with a deadline of its own. Past the deadline the client is left to that
    thread (it returns some day, or never; a daemon thread does not hold up the exit) and the
    caller makes a new one; it must not touch the abandoned client again. Exceptions of the
    call are raised here, in the caller's thread.
    """
    done = threading.Event()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=target, name=f"kafka-{what}", daemon=True).start()
    if not done.wait(deadline_s):
        raise WedgedError(f"{what}: no answer from librdkafka in {deadline_s:.0f} s, past "
                          f"its own timeout; the client is abandoned",
                          code=KafkaError._TIMED_OUT, name="_TIMED_OUT", fatal=True)
    if "error" in box:
        raise box["error"]
    return cast(T, box.get("result"))


def translate(err: KafkaError, what: str, consumer: bool = False) -> WriterKafkaError:
    """``err`` as a writer error (:class:`FencedError` when fenced); see :mod:`server.kafka`."""
    return cast(WriterKafkaError, _kafka.translate(err, what, WriterKafkaError,
                                                   fenced_cls=FencedError, consumer=consumer))


def kafka_errors(what: str, consumer: bool = False) -> Any:
    """Context manager: a ``KafkaException`` inside becomes a :class:`WriterKafkaError`."""
    return _kafka.kafka_errors(what, WriterKafkaError, fenced_cls=FencedError, consumer=consumer)


# -- the three clients ----------------------------------------------------------------------
# ``client_id`` names this writer process to the brokers (one per process): in their logs and
# in the group's member list (not a reliable owner mark there: a static member that replaces
# another keeps the replaced one's client id).
def producer_config(cfg: WriterConfig, error_cb: ErrorCallback,
                    client_id: str = "evidence-writer") -> dict[str, Any]:
    return {
        "bootstrap.servers": cfg.bootstrap,
        "client.id": client_id,
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
        "error_cb": error_cb,
    }


def reader_config(cfg: WriterConfig, error_cb: ErrorCallback,
                  client_id: str = "evidence-writer") -> dict[str, Any]:
    """The restore reader: assigned partition by partition, never subscribes or commits."""
    return {
        "bootstrap.servers": cfg.bootstrap,
        "client.id": client_id,
        "group.id": f"{cfg.group_id}.restore",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        # Short fetch waits: a fetch parked at the partition end would otherwise hold the
        # connection, and the next watermark query behind it, for 500 ms per read.
        "fetch.wait.max.ms": 10,
        **_kafka.CATCH_UP,  # a restore reads whole partitions: no pause at a full queue
        "error_cb": error_cb,
    }


def consumer_config(cfg: WriterConfig, error_cb: ErrorCallback,
                    client_id: str = "evidence-writer") -> dict[str, Any]:
    """The intake consumer; its offsets are committed only inside the writer's transactions."""
    return {
        "bootstrap.servers": cfg.bootstrap,
        "client.id": client_id,
        "group.id": cfg.group_id,
        "group.instance.id": cfg.instance_id,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": cfg.session_timeout_ms,
        # librdkafka's default, said here because the writer depends on it: a partition
        # assignment (its wait for stable offsets and its restore, writer.config) and a
        # transaction's commit retries both run between two polls.
        "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
        # Fewer, fuller fetches: by default a fetch returns as soon as one byte is there, so
        # under load the consumer asked the broker once per producer batch that landed (the
        # gateways' 5 ms lingers: hundreds of fetches a second at 5k captures/s). A fetch now
        # waits for FETCH_MIN_BYTES or fetch_wait_ms (20 by default), whichever comes first:
        # at most 50 a second, and a lone capture waits at most fetch_wait_ms more, beside
        # the batch's linger and transaction_interval_ms (writer.config, which also says
        # what the empty fetches of an idle writer cost the broker).
        "fetch.min.bytes": FETCH_MIN_BYTES,
        "fetch.wait.max.ms": cfg.fetch_wait_ms,
        # A backlog (a writer catching up, a pre-loaded intake) is fetched as fast as it is
        # sealed (server.kafka.CATCH_UP), into a queue of 16 MiB rather than librdkafka's 64:
        # two and a half batches of 5,000 1 KiB captures. The writer's peak RSS sealing 200k
        # of them (bench/seal_rate.py): 138-151 MiB in five runs, against 198-211 MiB in four
        # with the 64 MiB queue at the same rate.
        **_kafka.CATCH_UP,
        "queued.max.messages.kbytes": QUEUED_KBYTES,
        "error_cb": error_cb,
    }


# -- calls ----------------------------------------------------------------------------------
def produce(producer: Producer, topic: str, value: bytes | None, key: bytes | None,
            partition: int, headers: list | None = None) -> None:
    """Produce one message; a full local queue is drained and the message produced again."""
    while True:
        try:
            producer.produce(topic, value, key, partition=partition, headers=headers)
            return
        except BufferError:
            producer.poll(0.05)  # local queue full: let deliveries drain, then retry


def consume_batch(consumer: Consumer, max_messages: int, linger_ms: int,
                  idle_wait_s: float, rebalances: Callable[[], int] = lambda: 0,
                  not_before: float = 0.0) -> list[Message]:
    """The next batch: what is already fetched, plus what arrives within the linger.

    ``Consumer.consume(n, t)`` returns early only when ``n`` messages are there, so with
    ``t`` as the linger every batch under light load would wait the whole linger before it
    even started. Instead, as Kafka's producer does with linger.ms: the linger starts when
    a batch has its first message. Idle, this waits for that first message at most
    ``idle_wait_s`` (then the caller checks for a stop request and comes back). Under load
    the prefetched messages fill the batch at once and nothing waits.

    A rebalance may run inside any of these calls (the callbacks run there). Within one call
    librdkafka drops what it fetched for a partition before that partition was revoked; across
    two calls nobody does: what the first returned may belong to a partition the second
    revoked. ``rebalances()`` counts the rebalance callbacks run so far; when it moved during
    the linger call, the messages of the earlier call are dropped. Dropping them loses nothing:
    after a rebalance every partition this writer still owns was assigned again at its
    committed offset (eager protocol: revoke all, assign at committed), so they come again.

    ``not_before`` (``time.monotonic()``; the caller's pacing, ``loop.SealLoop``): a batch
    that has a message lingers at least until then, unless it fills up first.

    A fatal error in place of a message raises; other errors are logged and skipped.
    """
    with kafka_errors("consume"):
        msgs = consumer.consume(max_messages, 0)
        if not msgs:
            first = consumer.poll(idle_wait_s)
            msgs = [first] if first is not None else []
        linger_s = max(linger_ms / 1000, not_before - time.monotonic()) if msgs else 0.0
        if len(msgs) < max_messages and linger_s > 0:
            seen = rebalances()
            more = consumer.consume(max_messages - len(msgs), linger_s)
            if rebalances() != seen:
                dropped = [m for m in msgs if m.error() is None]
                if dropped:
                    log("info", "batch_dropped_after_rebalance", messages=len(dropped),
                        partitions=sorted({m.partition() for m in dropped}))
                msgs = [m for m in msgs if m.error() is not None]
            msgs += more
    good = []
    for m in msgs:
        err = m.error()
        if err is None:
            good.append(m)
        elif is_fatal(err):
            raise translate(err, "consume", consumer=True)
        elif err.code() != KafkaError._PARTITION_EOF:
            log("warning", "consume_error", code=err.name(), error=err.str())
    return good


def rewind(consumer: Consumer) -> None:
    """Seek every assigned partition back to the group's committed offset (the beginning
    when nothing is committed), dropping whatever was fetched past it."""
    with kafka_errors("rewind"):
        for tp in consumer.committed(consumer.assignment(), timeout=TIMEOUT_S):
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            consumer.seek(TopicPartition(tp.topic, tp.partition, offset))


def stable_committed(consumer: Consumer, partitions: list[TopicPartition], wait_s: float,
                     stopping: Callable[[], bool] = lambda: False) -> list[TopicPartition]:
    """The group's committed offsets of ``partitions``, once they are stable.

    A read_committed consumer asks for stable offsets (KIP-447): while a transaction still
    carries offsets for a partition, the broker answers UNSTABLE_OFFSET_COMMIT and librdkafka
    asks again until the call's timeout, then fails with ``_TIMED_OUT``. When the transaction
    is a dead writer's, it is open until the coordinator aborts it (``writer.config``: the
    transaction timeout plus the broker's check interval). So this asks in short calls
    (``STABLE_ASK_S``) and asks again at once, for up to ``wait_s`` in all: the offsets come
    as soon as the abort lands, and ``stopping()`` is heeded between two asks. Past
    ``wait_s``, or on any other error, :class:`WriterKafkaError`.
    """
    deadline = time.monotonic() + wait_s
    waited = False
    while True:
        try:
            with kafka_errors("committed offsets"):
                return consumer.committed(
                    partitions, timeout=max(0.1, min(STABLE_ASK_S, deadline - time.monotonic())))
        except WriterKafkaError as e:
            if e.code not in (KafkaError._TIMED_OUT, KafkaError.UNSTABLE_OFFSET_COMMIT) \
                    or e.fatal or stopping() or time.monotonic() >= deadline:
                raise
            if not waited:
                waited = True
                log("info", "waiting_for_stable_offsets",
                    partitions=[tp.partition for tp in partitions], wait_s=round(wait_s, 1),
                    message="a transaction still carries offsets of these partitions (a dead "
                            "writer's, until the coordinator aborts it); asking again")


def watermarks(reader: Consumer, topic: str, partition: int) -> tuple[int, int]:
    """(low, high) of a partition, asked of the broker (read_committed: the stable end)."""
    with kafka_errors(f"watermarks of {topic}[{partition}]"):
        return reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S,
                                            cached=False)


def offset_for_time(reader: Consumer, topic: str, partition: int, ms: int) -> int:
    """The first offset with a timestamp at or after ``ms``; negative when there is none."""
    with kafka_errors(f"offsets of {topic}[{partition}]"):
        return reader.offsets_for_times([TopicPartition(topic, partition, ms)],
                                        timeout=TIMEOUT_S)[0].offset


def read_partition(reader: Consumer, topic: str, partition: int,
                   start: int = OFFSET_BEGINNING) -> Iterator[Message]:
    """Yield the committed messages of one partition from ``start`` to its current end."""
    lo, hi = watermarks(reader, topic, partition)
    start = max(start, lo)
    if start >= hi:
        return
    reader.assign([TopicPartition(topic, partition, start)])
    deadline = time.monotonic() + READ_DEADLINE_S
    try:
        while True:
            msg = reader.poll(0.5)
            if msg is None:
                if time.monotonic() > deadline:
                    raise WriterError(f"reading {topic}[{partition}] did not reach its end in time")
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return
                raise translate(err, f"reading {topic}[{partition}]", consumer=True)
            yield msg
    finally:
        reader.unassign()
