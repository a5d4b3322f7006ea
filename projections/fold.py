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
from operator import attrgetter
from typing import Any, Iterable, Mapping

from evidence_contract import DecodeError
from evidence_contract.chain import DUPLICATE, Finding, Head, Link, Sighting, advance, undecodable

from . import fastrows
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
    "decode_messages",
    "fold",
    "row_event_key",
    "sighting",
    "sightings",
]

_POSITION = attrgetter("partition", "offset")
_OCCURRED_AT_US = RECORD_COLUMNS.index("occurred_at_us")
_EVENT_ID = RECORD_COLUMNS.index("event_id")
_PARTITION = RECORD_COLUMNS.index("log_partition")
_OFFSET = RECORD_COLUMNS.index("log_offset")


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


@dataclass(slots=True)
class Record:
    """A decoded EvidenceRecord at a log position; ``row`` is its ``records`` row.

    Decoded by the compiled row path (:mod:`projections.fastrows`), it also carries ``copy``,
    the row as a binary COPY tuple, and ``leaf``, its Merkle leaf hash; None otherwise.

    Treated as immutable, but not ``frozen``: one is made per record projected, and a frozen
    dataclass costs ~3 us more to make (each field set through ``object.__setattr__``)."""

    partition: int
    offset: int
    row: tuple[Any, ...]
    copy: bytes | None = None
    leaf: bytes | None = None

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


def decode_message(partition: int, offset: int, value: bytes | None,
                   redaction: Any = None) -> Message:
    """Decode one log message; never raises for bad bytes (they become ``Undecodable``).
    ``redaction``: the projection's policy (:mod:`projections.redact`), applied to the row."""
    if value is None:
        return Undecodable(partition, offset, "message has no value")
    if redaction is None:
        got = fastrows.decode(value, partition, offset)
        if got is not None:
            return Record(partition, offset, *got)
    return _decode_pure(partition, offset, value, redaction)


def _decode_pure(partition: int, offset: int, value: bytes, redaction: Any) -> Message:
    # The reference path, and the one that words every error.
    try:
        return Record(partition, offset, record_row(value, partition, offset, redaction))
    except DecodeError as e:
        return Undecodable(partition, offset, str(e))


def decode_messages(messages: Iterable[tuple[int, int, bytes | None]],
                    redaction: Any = None) -> list[Message]:
    """:func:`decode_message` of each ``(partition, offset, value)``, the compiled row path
    decoding the batch in one call."""
    messages = list(messages)
    if redaction is not None:
        return [decode_message(p, o, v, redaction) for p, o, v in messages]
    got = fastrows.decode_batch([(v, p, o) for p, o, v in messages if v is not None])
    out: list[Message] = []
    i = 0
    for p, o, v in messages:
        if v is None:
            out.append(Undecodable(p, o, "message has no value"))
            continue
        g, i = got[i], i + 1
        out.append(Record(p, o, *g) if g is not None else _decode_pure(p, o, v, None))
    return out


def fold(heads: Mapping[str, ProjectedHead], messages: Iterable[Message]) -> Folded:
    """Apply ``messages`` (in (partition, offset) order) to ``heads``; see the module rules.

    ``heads`` needs the current head of each stream in the batch; a stream without one is
    new (``Head.genesis``). ``heads`` is not modified.
    """
    # Per stream: [chain head, records, first_at, last_at], made a ProjectedHead once at the
    # end rather than once per record (the fold runs once per record of every batch).
    state: dict[str, list[Any]] = {}
    rows: list[tuple[Any, ...]] = []
    findings: list[Finding] = []
    next_offsets: dict[int, int] = {}
    for m in sorted(messages, key=_POSITION):
        next_offsets[m.partition] = m.offset + 1
        if isinstance(m, Undecodable):
            findings.append(undecodable(m.reason, m.partition, m.offset))
            continue
        row = m.row
        stream, at = row[STREAM], row[OCCURRED_AT]
        s = state.get(stream)
        if s is None:
            before = heads.get(stream)
            s = state[stream] = ([before.chain, before.record_count, before.first_at,
                                  before.last_at, None] if before is not None
                                 else [Head.genesis(stream), 0, at, at, None])
        seq, prev = row[SEQ], row[PREV_DIGEST]
        last = s[4]
        cur_seq, cur_digest = (s[0].seq, s[0].digest) if last is None else last[:2]
        if seq == cur_seq + 1 and prev == cur_digest:
            # The record that follows the head: advance() finds nothing and moves the head to
            # it with the same gaps. Kept as (seq, digest, occurred_at), made a Head only
            # when a record is not that one, or at the end (_head): a Link and a Head per
            # record were most of the fold's time.
            s[4] = (seq, row[RECORD_DIGEST], row[_OCCURRED_AT_US])
        else:
            head, finding = advance(
                _head(stream, s),
                Link(stream, seq, prev, row[RECORD_DIGEST], row[_OCCURRED_AT_US]))
            if finding:
                findings.append(finding.at(m.partition, m.offset))
            s[0], s[4] = head, None
        rows.append(row)
        s[1] += 1
        if at < s[2]:
            s[2] = at
        if at > s[3]:
            s[3] = at
    current = {stream: ProjectedHead(_head(stream, s), s[1], s[2], s[3])
               for stream, s in state.items()}
    return Folded(rows, current, findings, next_offsets)


def _head(stream: str, s: list[Any]) -> Head:
    """The chain head of a fold's per-stream state: ``s[0]``, or the record after it (as
    ``advance`` makes the head of a record it follows; see :func:`fold`)."""
    last = s[4]
    if last is None:
        return s[0]
    return Head(stream, last[0], last[1], last[2], "", s[0].missing)


def row_event_key(row: tuple[Any, ...]) -> Any:
    """The event_id of a ``records`` row as the row holds it (a ``uuid.UUID``): hashable and
    equal exactly when the ids are, without making its text."""
    return row[_EVENT_ID]


def sighting(row: tuple[Any, ...]) -> Sighting:
    """The event_id sighting of a ``records`` row."""
    return Sighting(str(row[_EVENT_ID]), row[STREAM], row[SEQ], row[_OCCURRED_AT_US],
                    row[_PARTITION], row[_OFFSET])


def sightings(folded: Folded) -> list[Sighting]:
    """The batch's records to judge for ``duplicate_event_id``
    (:func:`evidence_contract.chain.event_id_findings`): all but those the chain step calls
    a ``duplicate`` (the same seq again, whose event_id repeats with it)."""
    again = {(f.partition, f.offset) for f in folded.findings if f.kind == DUPLICATE}
    return [sighting(r) for r in folded.rows if (r[_PARTITION], r[_OFFSET]) not in again]
