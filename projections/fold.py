"""One step of the projection, pure: stream heads and decoded log messages in, rows out.

:func:`decode_message` turns a log message into a :class:`Record` (or :class:`Undecodable`);
:func:`fold` takes the current :class:`ProjectedHead` of every stream in a batch plus the
batch and returns a :class:`Folded`: the ``records`` rows, the new heads, the findings and
the next offset per partition. The store persists all of it in one transaction (compute, then
persist); nothing here touches a database or Kafka.

Per record, in (partition, offset) order (a stream lives on one partition, so this is each
stream's log order), the stream's head advances by :func:`evidence_contract.chain.advance`,
the one chain step the writer and the auditor take too, and its finding (gap, duplicate,
out_of_order, broken_link) is the projection's; a message that is not an EvidenceRecord is
an ``undecodable`` finding with its position. The fold does not recompute ``record_digest``
(``evidence audit`` does): that needs the body's stored bytes, one more decode per record on
the projector's hot path.

Every decodable record is stored, whatever its findings, and the projector moves on: the log
is the evidence, the projection reports on it and never refuses it. A head keeps the chain
head (highest seq seen, its digest, the seqs a gap skipped that have not arrived since), the
number of records stored and the first/last ``occurred_at``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping

from evidence_contract import DecodeError
from evidence_contract.chain import Finding, Head, Link, advance, undecodable

from .rows import (
    OCCURRED_AT,
    PREV_DIGEST,
    RECORD_COLUMNS,
    RECORD_DIGEST,
    SEQ,
    STREAM,
    record_row,
)

__all__ = [
    "Folded",
    "ProjectedHead",
    "Record",
    "Undecodable",
    "decode_message",
    "fold",
]

_OCCURRED_AT_US = RECORD_COLUMNS.index("occurred_at_us")


@dataclass(frozen=True, slots=True)
class ProjectedHead:
    """A stream's chain head plus what the projection counts of the stream: records stored
    and the first/last ``occurred_at``. ``row()`` is in the ``heads`` table's column order
    (``COLUMNS``); ``missing`` is stored as text, ``"2-4,7-7"``."""

    chain: Head
    record_count: int
    first_at: datetime
    last_at: datetime

    COLUMNS = ("stream", "seq", "record_digest", "record_count", "first_at", "last_at",
               "missing")

    @property
    def stream(self) -> str:
        return self.chain.stream

    def row(self) -> tuple[Any, ...]:
        c = self.chain
        return (c.stream, c.seq, c.digest, self.record_count, self.first_at, self.last_at,
                ",".join(f"{a}-{b}" for a, b in c.missing))

    @classmethod
    def of_row(cls, row: tuple[Any, ...]) -> "ProjectedHead":
        """The head a ``row()`` was made from (the chain head's ``occurred_at`` and
        ``event_id`` are not stored: the chain step does not need them)."""
        stream, seq, digest, count, first_at, last_at, missing = row
        ranges = tuple((int(a), int(b)) for a, b in
                       (r.split("-") for r in missing.split(",") if r))
        return cls(Head(stream, seq, bytes(digest), missing=ranges), count, first_at, last_at)


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


@dataclass(frozen=True)
class Folded:
    """What one batch adds to a generation."""

    rows: list[tuple[Any, ...]]
    heads: dict[str, ProjectedHead]
    """The new head of every stream the batch touched."""
    findings: list[Finding]
    """Each placed at its log position (``partition``, ``offset``)."""
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


def fold(heads: Mapping[str, ProjectedHead], messages: Iterable[Message]) -> Folded:
    """Apply ``messages`` (in (partition, offset) order) to ``heads``; see the module rules.

    ``heads`` needs the current head of each stream in the batch; a stream without one is
    new (``Head.genesis``). ``heads`` is not modified.
    """
    current: dict[str, ProjectedHead] = {}
    rows: list[tuple[Any, ...]] = []
    findings: list[Finding] = []
    next_offsets: dict[int, int] = {}
    for m in sorted(messages, key=lambda m: (m.partition, m.offset)):
        next_offsets[m.partition] = m.offset + 1
        if isinstance(m, Undecodable):
            findings.append(undecodable(m.reason, m.partition, m.offset))
            continue
        row = m.row
        stream, at = row[STREAM], row[OCCURRED_AT]
        before = current.get(stream) or heads.get(stream)
        head, finding = advance(
            before.chain if before else Head.genesis(stream),
            Link(stream, row[SEQ], row[PREV_DIGEST], row[RECORD_DIGEST], row[_OCCURRED_AT_US]))
        if finding:
            findings.append(finding.at(m.partition, m.offset))
        rows.append(row)
        current[stream] = (ProjectedHead(head, 1, at, at) if before is None else
                           ProjectedHead(head, before.record_count + 1,
                                         min(before.first_at, at), max(before.last_at, at)))
    return Folded(rows, current, findings, next_offsets)
