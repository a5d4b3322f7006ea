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
from server.kafka import translate, translate_exception


def _consumer(bootstrap: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"evidence-audit-{uuid.uuid4().hex[:8]}",  # never committed
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 32 * 1024 * 1024,
    })


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
    start = dict(start or {})
    c = _consumer(bootstrap)
    try:
        md = c.list_topics(topic, timeout=15).topics.get(topic)
        if md is None or md.error is not None:
            raise AuditError(f"topic {topic} does not exist on {bootstrap}")
        parts = sorted(md.partitions)
        ends = {} if ends is None else ends
        firsts: dict[int, int] = {}
        for p in parts:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=15,
                                                cached=False)
            ends[p], firsts[p] = high, max(low, start.get(p, low))
        total = sum(max(0, ends[p] - firsts[p]) for p in parts)
        pending = {p for p in parts if ends[p] > firsts[p]}
        if progress is not None:
            progress(0, total)
        if not pending:
            return
        c.assign([TopicPartition(topic, p, firsts[p]) for p in sorted(pending)])
        reached = dict(firsts)  # next offset per partition, for the progress count
        last_progress = time.monotonic()
        while pending:
            msgs = c.consume(1000, timeout=0.5)
            if not msgs and time.monotonic() - last_progress > idle_timeout:
                raise AuditError(
                    f"reading {topic} stalled at partitions {sorted(pending)} for "
                    f"{idle_timeout:.0f} s (an open transaction holds the stable offset back?)")
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(m.partition())
                        reached[m.partition()] = max(reached[m.partition()],
                                                     min(m.offset(), ends[m.partition()]))
                        continue
                    raise translate(err, f"reading {topic}", AuditKafkaError) from KafkaException(err)
                last_progress = time.monotonic()
                p, o = m.partition(), m.offset()
                if o >= ends[p]:  # appended after the read started: the next audit's
                    pending.discard(p)
                    continue
                reached[p] = o + 1
                if o + 1 >= ends[p]:
                    pending.discard(p)
                if with_headers:
                    yield p, o, m.key(), m.value(), m.headers()
                else:
                    yield p, o, m.key(), m.value()
            if progress is not None:
                progress(sum(reached[p] - firsts[p] for p in parts), total)
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
