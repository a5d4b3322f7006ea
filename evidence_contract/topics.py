"""The topic names of the wire contract: where captures go and where records are read.

A producer in any language sends CaptureEvents to ``<prefix>.intake``, keyed by the stream id
(UTF-8) and partitioned as Kafka's Java client does (:func:`partition_for`: murmur2 of the key,
made positive, modulo the partition count; librdkafka's ``partitioner=murmur2_random``), so a
stream lands on one partition whichever client produced it; sealed records are on
``<prefix>.log``. The default prefix is ``evidence``. The
topics' configurations (partitions, retention) are the server's business: ``topics.spec``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TopicNames", "murmur2", "partition_for"]


@dataclass(frozen=True)
class TopicNames:
    """The topic names under one prefix; tests use a random prefix per test."""

    prefix: str = "evidence"

    @property
    def intake(self) -> str:
        return f"{self.prefix}.intake"

    @property
    def log(self) -> str:
        return f"{self.prefix}.log"

    @property
    def writer_state(self) -> str:
        return f"{self.prefix}.writer-state"

    @property
    def rejected(self) -> str:
        return f"{self.prefix}.rejected"

    @property
    def checkpoints(self) -> str:
        """Signed checkpoints and witness cosignatures, keyed by stream, on the stream's
        partition; like the log, never compacted and never expired."""
        return f"{self.prefix}.checkpoints"

    @property
    def erasures(self) -> str:
        """The writer's signed erasure receipts (``evidence_contract.erasure``), keyed by
        request id, on the request's intake partition; like the log, never compacted and
        never expired: the erasure itself is evidence."""
        return f"{self.prefix}.erasures"

    @property
    def tree(self) -> str:
        """The deployment log's one partition (docs/witnessing.md): every stream checkpoint
        the writers sign, in commit order (the entries of the one tree witnesses follow), and
        the publisher's signed deployment checkpoints and witness cosignatures; like the log,
        never compacted and never expired."""
        return f"{self.prefix}.tree"

    def all(self) -> tuple[str, str, str, str, str, str, str]:
        return (self.intake, self.log, self.writer_state, self.rejected, self.checkpoints,
                self.erasures, self.tree)


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash (``org.apache.kafka.common.utils.Utils.murmur2``), as a signed
    32-bit int."""
    m, r, mask = 0x5BD1E995, 24, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(stream: str, partitions: int) -> int:
    """The intake partition of ``stream``'s captures (Kafka's default keyed partitioner)."""
    return (murmur2(stream.encode("utf-8")) & 0x7FFFFFFF) % partitions
