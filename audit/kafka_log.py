"""Reading the log and the writer's heads straight from Kafka (the audit's only Kafka module).

The audit never trusts the projections for the chain: it reads ``<prefix>.log`` itself,
read_committed, from offset 0 of every partition to the end it finds when it starts. Kafka
client errors become :class:`~audit.errors.AuditKafkaError` by :mod:`server.kafka`.
"""

from __future__ import annotations

import time
import uuid
from typing import Callable, Iterator, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from audit.errors import AuditError, AuditKafkaError
from evidence_contract import DecodeError, decode
from server.kafka import CATCH_UP, translate, translate_exception


def consumer_config(bootstrap: str) -> dict:
    """The librdkafka settings of a log read's consumer (one per read, never committed)."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"evidence-audit-{uuid.uuid4().hex[:8]}",  # never committed
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 32 * 1024 * 1024,
        **CATCH_UP,  # reads whole partitions: no pause at a full queue
    }


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(consumer_config(bootstrap))


class _Span:
    """What a read covers of each partition: from ``firsts`` to ``ends`` (as found when it
    starts), the next offset ``reached`` (for the progress count) and the partitions still
    ``pending``."""

    def __init__(self, firsts: dict[int, int], ends: dict[int, int]) -> None:
        self.firsts, self.ends, self.reached = firsts, ends, dict(firsts)
        self.total = sum(max(0, ends[p] - firsts[p]) for p in firsts)
        self.pending = {p for p in firsts if ends[p] > firsts[p]}

    @classmethod
    def find(cls, c: Consumer, bootstrap: str, topic: str, start: Mapping[int, int],
             ends: dict[int, int]) -> "_Span":
        """Each partition of ``topic`` from ``start`` (else its beginning) to its end now;
        ``ends`` is filled with those end offsets."""
        md = c.list_topics(topic, timeout=15).topics.get(topic)
        if md is None or md.error is not None:
            raise AuditError(f"topic {topic} does not exist on {bootstrap}")
        firsts: dict[int, int] = {}
        for p in sorted(md.partitions):
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=15,
                                                cached=False)
            ends[p], firsts[p] = high, max(low, start.get(p, low))
        return cls(firsts, ends)

    def at_eof(self, p: int, offset: int) -> None:
        self.pending.discard(p)
        self.reached[p] = max(self.reached[p], min(offset, self.ends[p]))

    def take(self, p: int, o: int) -> bool:
        """Whether the message at offset ``o`` of partition ``p`` is in the read."""
        if o >= self.ends[p]:  # appended after the read started: the next audit's
            self.pending.discard(p)
            return False
        self.reached[p] = o + 1
        if o + 1 >= self.ends[p]:
            self.pending.discard(p)
        return True

    def done(self) -> int:
        return sum(self.reached[p] - self.firsts[p] for p in self.firsts)


def read_topic(bootstrap: str, topic: str, idle_timeout: float = 30.0,
               progress: Callable[[int, int], None] | None = None,
               start: Mapping[int, int] | None = None,
               ends: dict[int, int] | None = None,
               with_headers: bool = False,
               ) -> Iterator[tuple]:
    """Yield ``(partition, offset, key, value)`` of every committed message, partition by
    partition interleaved in fetch order (offset order within a partition).

    Reads from ``start[partition]`` (default: the beginning) to the end each partition has
    when the read starts; ``ends``, if given, is filled with those end offsets. Transaction
    markers and aborted messages take offsets but are never yielded; a partition is done at
    its end-of-partition event. ``progress(done, total)`` is called after every batch.
    ``with_headers``: yield ``(partition, offset, key, value, headers)``.
    """
    c = _consumer(bootstrap)
    try:
        span = _Span.find(c, bootstrap, topic, dict(start or {}), {} if ends is None else ends)
        if progress is not None:
            progress(0, span.total)
        if not span.pending:
            return
        c.assign([TopicPartition(topic, p, span.firsts[p]) for p in sorted(span.pending)])
        last_progress = time.monotonic()
        while span.pending:
            msgs = c.consume(1000, timeout=0.5)
            if not msgs and time.monotonic() - last_progress > idle_timeout:
                raise AuditError(
                    f"reading {topic} stalled at partitions {sorted(span.pending)} for "
                    f"{idle_timeout:.0f} s (an open transaction holds the stable offset back?)")
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        span.at_eof(m.partition(), m.offset())
                        continue
                    raise translate(err, f"reading {topic}", AuditKafkaError) from KafkaException(err)
                last_progress = time.monotonic()
                if not span.take(m.partition(), m.offset()):
                    continue
                if with_headers:
                    yield m.partition(), m.offset(), m.key(), m.value(), m.headers()
                else:
                    yield m.partition(), m.offset(), m.key(), m.value()
            if progress is not None:
                progress(span.done(), span.total)
    except KafkaException as e:
        raise translate_exception(e, f"Kafka at {bootstrap}", AuditKafkaError) from e
    finally:
        c.close()


def read_heads(bootstrap: str, topic: str) -> dict[str, tuple[int, bytes]]:
    """The writer's latest head per stream from ``<prefix>.writer-state`` (last value wins)."""
    heads: dict[str, tuple[int, bytes]] = {}
    for _p, _o, key, value in read_topic(bootstrap, topic):
        if value is None:  # a tombstone
            if key is not None:
                heads.pop(key.decode(errors="replace"), None)
            continue
        try:
            name, head = decode(value)
        except DecodeError:
            continue
        if name == "WriterHead":
            heads[head["stream"]] = (head["seq"], bytes(head["record_digest"]))
    return heads


def fetch_message(bootstrap: str, topic: str, partition: int, offset: int,
                  timeout: float = 15.0) -> bytes:
    """The committed message at ``partition``/``offset`` of ``topic``, verbatim."""
    c = _consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise translate(m.error(), f"reading {topic}[{partition}]@{offset}", AuditKafkaError)
            if m.offset() == offset:
                return m.value()
            break
        raise AuditError(f"{topic} has no committed message at partition {partition} "
                         f"offset {offset}")
    except KafkaException as e:
        raise translate_exception(e, f"Kafka at {bootstrap}", AuditKafkaError) from e
    finally:
        c.close()


def fetch_messages(bootstrap: str, topic: str, positions: set[tuple[int, int]],
                   idle_timeout: float = 30.0) -> dict[tuple[int, int], bytes | None]:
    """The committed messages at ``positions`` ``(partition, offset)`` of ``topic``, verbatim
    (None where no committed message is): each partition read from its first wanted offset
    to its last, and only the wanted messages kept (a range audit's records, not the log)."""
    out: dict[tuple[int, int], bytes | None] = dict.fromkeys(positions)
    by_partition: dict[int, set[int]] = {}
    for p, o in positions:
        by_partition.setdefault(p, set()).add(o)
    if not by_partition:
        return out
    c = _consumer(bootstrap)
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=15,
                                           cached=False)[1] for p in by_partition}
        pending = {p: max(o for o in offs if o < ends[p]) for p, offs in by_partition.items()
                   if any(o < ends[p] for o in offs)}
        if not pending:
            return out
        c.assign([TopicPartition(topic, p, min(by_partition[p])) for p in sorted(pending)])
        last_progress = time.monotonic()
        while pending:
            msgs = c.consume(1000, timeout=0.5)
            if not msgs and time.monotonic() - last_progress > idle_timeout:
                raise AuditError(f"reading {topic} stalled at partitions {sorted(pending)} for "
                                 f"{idle_timeout:.0f} s")
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.pop(m.partition(), None)
                        continue
                    raise translate(err, f"reading {topic}", AuditKafkaError) \
                        from KafkaException(err)
                last_progress = time.monotonic()
                p, o = m.partition(), m.offset()
                if o in by_partition.get(p, ()):
                    out[(p, o)] = m.value()
                if p in pending and o >= pending[p]:
                    pending.pop(p)
        return out
    except KafkaException as e:
        raise translate_exception(e, f"Kafka at {bootstrap}", AuditKafkaError) from e
    finally:
        c.close()
