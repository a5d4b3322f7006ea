"""The projector's Kafka consumer: :class:`LogReader` (read_committed, positioned by its
caller from the positions stored in PostgreSQL; nothing is ever committed to Kafka).

With :mod:`projections.heartbeat`, the only modules of the projections that import
confluent-kafka. A reader takes every partition of its topic, a set another reader owns
(:meth:`LogReader.own`), or what a consumer group gives it (``group``: the projector's log
consumer, :mod:`projections.service`).
"""

from __future__ import annotations

import time
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Callable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from server.kafka import CATCH_UP, kafka_errors, translate
from server.logs import event_logger

from .config import ProjectorConfig
from .errors import LogError
from .heartbeat import list_end_offsets

__all__ = ["Batch", "LogReader"]

# Errors a consumer reports in place of a message while librdkafka reconnects by itself.
_PASSING = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE,
                      KafkaError._TIMED_OUT})

log = event_logger("evidence.projector")


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

    def consumer_config(self) -> dict:
        """The librdkafka settings of this reader's consumer."""
        return {
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
            **CATCH_UP,  # a catch-up or a rebuild reads a backlog: no pause at a full queue
        }

    def start(self, wait_s: float = 60.0) -> "LogReader":
        with _kafka_errors("create consumer"):
            self._consumer = Consumer(self.consumer_config())
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
