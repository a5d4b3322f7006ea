"""One step of the projection, pure: stream heads and decoded log messages in, rows out.

:func:`decode_message` turns a log message into a :class:`Record` (or :class:`Undecodable`);
:func:`fold` takes the current :class:`Head` of every stream in a batch plus the batch and
returns a :class:`Folded`: the ``records`` rows, the new heads, the audit findings and the
next offset per partition. The store persists all of it in one transaction (compute, then
persist); nothing here touches a database or Kafka.

Rules, per record in (partition, offset) order (a stream lives on one partition, so this is
each stream's log order):

- ``seq == head + 1`` and ``prev_digest == head.record_digest``: the chain continues.
- ``seq == head + 1`` with another ``prev_digest``: a ``broken_link`` finding.
- ``seq > head + 1``: a ``gap`` finding naming the missing seqs (the link is not checked:
  its predecessor is not known).
- ``seq <= head``: a ``duplicate`` finding (the seq was seen before, or arrives out of order).
- a message that is not an EvidenceRecord: an ``undecodable`` finding with its position.

Every decodable record is stored, whatever its findings, and the projector moves on: the log
is the evidence, the projection reports on it and never refuses it. A head keeps the highest
seq seen (and its digest), the number of records stored and the first/last ``occurred_at``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping

from evidence_contract import GENESIS, DecodeError

from .rows import OCCURRED_AT, PREV_DIGEST, RECORD_DIGEST, SEQ, STREAM, record_row

__all__ = [
    "BROKEN_LINK",
    "DUPLICATE",
    "FINDING_KINDS",
    "Finding",
    "Folded",
    "GAP",
    "Head",
    "Record",
    "UNDECODABLE",
    "Undecodable",
    "decode_message",
    "fold",
]

GAP, DUPLICATE, BROKEN_LINK, UNDECODABLE = "gap", "duplicate", "broken_link", "undecodable"
FINDING_KINDS = (GAP, DUPLICATE, BROKEN_LINK, UNDECODABLE)


@dataclass(frozen=True, slots=True)
class Head:
    """A stream's head: highest seq seen, its digest, records stored, first/last time."""

    stream: str
    seq: int
    record_digest: bytes
    record_count: int
    first_at: datetime
    last_at: datetime

    def row(self) -> tuple[Any, ...]:
        return (self.stream, self.seq, self.record_digest, self.record_count,
                self.first_at, self.last_at)


@dataclass(frozen=True, slots=True)
class Record:
    """A decoded EvidenceRecord at a log position; ``row`` is its ``records`` row."""

    partition: int
    offset: int
    row: tuple[Any, ...]

    @property
    def stream(self) -> str:
        return self.row[STREAM]

    @property
    def seq(self) -> int:
        return self.row[SEQ]


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A log message that is not an EvidenceRecord, and why."""

    partition: int
    offset: int
    reason: str


Message = Record | Undecodable


@dataclass(frozen=True, slots=True)
class Finding:
    """An audit finding; ``row()`` is in the ``findings`` table's column order."""

    kind: str
    detail: str
    stream: str | None
    seq: int | None
    log_partition: int
    log_offset: int

    COLUMNS = ("stream", "seq", "kind", "detail", "log_partition", "log_offset")

    def row(self) -> tuple[Any, ...]:
        return (self.stream, self.seq, self.kind, self.detail, self.log_partition,
                self.log_offset)


@dataclass(frozen=True)
class Folded:
    """What one batch adds to a generation."""

    rows: list[tuple[Any, ...]]
    heads: dict[str, Head]
    """The new head of every stream the batch touched."""
    findings: list[Finding]
    next_offsets: dict[int, int]
    """Per partition in the batch: the offset after its last message."""


def decode_message(partition: int, offset: int, value: bytes | None) -> Message:
    """Decode one log message; never raises for bad bytes (they become ``Undecodable``)."""
    if value is None:
        return Undecodable(partition, offset, "message has no value")
    try:
        return Record(partition, offset, record_row(value, partition, offset))
    except DecodeError as e:
        return Undecodable(partition, offset, str(e))


def fold(heads: Mapping[str, Head], messages: Iterable[Message]) -> Folded:
    """Apply ``messages`` (in (partition, offset) order) to ``heads``; see the module rules.

    ``heads`` needs the current head of each stream in the batch; a stream without one is
    new (head seq 0, digest ``GENESIS``). ``heads`` is not modified.
    """
    current: dict[str, Head] = {}
    rows: list[tuple[Any, ...]] = []
    findings: list[Finding] = []
    next_offsets: dict[int, int] = {}
    for m in sorted(messages, key=lambda m: (m.partition, m.offset)):
        next_offsets[m.partition] = m.offset + 1
        if isinstance(m, Undecodable):
            findings.append(Finding(UNDECODABLE, m.reason, None, None, m.partition, m.offset))
            continue
        row = m.row
        stream, seq, at = row[STREAM], row[SEQ], row[OCCURRED_AT]
        head = current.get(stream) or heads.get(stream)
        head_seq = head.seq if head else 0
        head_digest = head.record_digest if head else GENESIS
        finding = None
        if seq <= head_seq:
            finding = (DUPLICATE, f"seq {seq} is not above the stream's head seq {head_seq}")
        elif seq > head_seq + 1:
            missing = (f"seq {head_seq + 1}" if seq == head_seq + 2
                       else f"seqs {head_seq + 1}..{seq - 1}")
            finding = (GAP, f"{missing} missing before seq {seq}")
        elif row[PREV_DIGEST] != head_digest:
            finding = (BROKEN_LINK, f"prev_digest {row[PREV_DIGEST].hex()} is not the "
                                    f"record_digest {head_digest.hex()} of seq {head_seq}")
        if finding:
            findings.append(Finding(finding[0], finding[1], stream, seq, m.partition, m.offset))
        rows.append(row)
        if head is None:
            current[stream] = Head(stream, seq, row[RECORD_DIGEST], 1, at, at)
        else:
            higher = seq > head.seq
            current[stream] = Head(
                stream,
                seq if higher else head.seq,
                row[RECORD_DIGEST] if higher else head.record_digest,
                head.record_count + 1,
                min(head.first_at, at),
                max(head.last_at, at),
            )
    return Folded(rows, current, findings, next_offsets)
