"""The chain step: how one record of a stream follows the ones before it. Pure.

The writer (sealing), the projector (folding the log into rows) and the auditor (re-verifying
the log) all advance a stream's :class:`Head` with :func:`advance` and report what it finds
as a :class:`Finding` of one vocabulary (``KINDS``), so they can never disagree about the same
records again.

Rules, for a record of the head's stream, in log order:

==========================================  ==============  =======================================
record                                      finding         new head
==========================================  ==============  =======================================
``record_digest`` does not recompute        digest mismatch  as if the digest were right (the next
over ``prev ‖ seq ‖ occurred_at ‖ body``                     record links to the stored digest)
``seq == head.seq + 1``, prev = head digest —               this record
``seq == head.seq + 1``, another prev       broken link     this record
``seq > head.seq + 1``                      gap             this record; the skipped seqs are kept
                                                            as ``missing``
``seq <= head.seq``, seq in ``missing``     out of order    unchanged, less that seq
``seq <= head.seq``, otherwise              duplicate       unchanged
==========================================  ==============  =======================================

One record gets at most one finding: a digest that does not recompute says the record was
altered, and then nothing about its position can be trusted either. A message that is not an
EvidenceRecord at all is an ``undecodable`` finding (:func:`undecodable`) and does not move
any head.
"""

from __future__ import annotations

import hmac
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable

from .digests import GENESIS, record_digest

__all__ = [
    "BROKEN_LINK",
    "DIGEST_MISMATCH",
    "DUPLICATE",
    "DUPLICATE_EVENT_ID",
    "Finding",
    "GAP",
    "Head",
    "KINDS",
    "Link",
    "OUT_OF_ORDER",
    "Sighting",
    "UNDECODABLE",
    "advance",
    "event_id_findings",
    "undecodable",
]

GAP = "gap"
DUPLICATE = "duplicate"
OUT_OF_ORDER = "out_of_order"
BROKEN_LINK = "broken_link"
DIGEST_MISMATCH = "record_digest_mismatch"
UNDECODABLE = "undecodable"
DUPLICATE_EVENT_ID = "duplicate_event_id"
KINDS = (GAP, DUPLICATE, OUT_OF_ORDER, BROKEN_LINK, DIGEST_MISMATCH, UNDECODABLE,
         DUPLICATE_EVENT_ID)
"""The chain's finding kinds; the auditor adds its own body and projection kinds."""


@dataclass(frozen=True, slots=True)
class Head:
    """The last record of a stream that a chain follows from.

    ``seq`` is the highest seq seen (0 for an empty stream) and ``digest`` its record_digest
    (``GENESIS`` for an empty stream); ``occurred_at`` and ``event_id`` are that record's.
    ``missing`` lists, as inclusive ``(first, last)`` ranges, seqs skipped by a gap and not
    seen since, so a late one is told apart from a duplicate.
    """

    stream: str
    seq: int = 0
    digest: bytes = GENESIS
    occurred_at: int = 0
    event_id: str = ""
    missing: tuple[tuple[int, int], ...] = ()

    @classmethod
    def genesis(cls, stream: str) -> "Head":
        """The head of an empty stream: seq 0, 32 zero bytes."""
        return cls(stream)


@dataclass(frozen=True, slots=True)
class Link:
    """What the chain needs of one sealed record. ``body`` (the stored Avro binary of the
    record's body) is optional: without it the record digest is not recomputed."""

    stream: str
    seq: int
    prev_digest: bytes
    record_digest: bytes
    occurred_at: int
    event_id: str = ""
    body: bytes | None = None

    @classmethod
    def of(cls, record: dict[str, Any], body: bytes | None = None) -> "Link":
        """The link of a decoded EvidenceRecord (``{"body": ..., "seal": ...}``)."""
        seal = record["seal"]
        return cls(record["body"]["stream"], seal["seq"], bytes(seal["prev_digest"]),
                   bytes(seal["record_digest"]), seal["occurred_at"],
                   record["body"]["event_id"], body)


@dataclass(frozen=True, slots=True)
class Finding:
    """Something wrong with a record (or a log position), in the one vocabulary of findings.

    ``partition``/``offset`` are the record's position on the log when known.
    """

    kind: str
    stream: str | None
    seq: int | None
    detail: str
    partition: int | None = None
    offset: int | None = None

    def at(self, partition: int | None, offset: int | None) -> "Finding":
        """This finding, placed at a log position."""
        return replace(self, partition=partition, offset=offset)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _seqs(first: int, last: int) -> str:
    return f"seq {first}" if first == last else f"seqs {first}..{last}"


def _without(missing: tuple[tuple[int, int], ...], seq: int) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for a, b in missing:
        if a <= seq <= b:
            out += [r for r in ((a, seq - 1), (seq + 1, b)) if r[0] <= r[1]]
        else:
            out.append((a, b))
    return tuple(out)


def advance(head: Head, link: Link) -> tuple[Head, Finding | None]:
    """Follow ``link`` from ``head``: the stream's new head and the finding, if any."""
    if link.stream != head.stream:
        raise ValueError(f"head is for stream {head.stream!r}, the record for {link.stream!r}")
    finding: Finding | None = None
    if link.body is not None:
        computed = record_digest(link.prev_digest, link.seq, link.occurred_at, link.body)
        if not hmac.compare_digest(computed, link.record_digest):
            finding = Finding(DIGEST_MISMATCH, link.stream, link.seq,
                              f"record_digest does not recompute (stored "
                              f"{link.record_digest.hex()[:16]}…, computed "
                              f"{computed.hex()[:16]}…)")
    if link.seq <= head.seq:
        late = any(a <= link.seq <= b for a, b in head.missing)
        if finding is None:
            finding = (Finding(OUT_OF_ORDER, link.stream, link.seq,
                               f"seq {link.seq} arrives after seq {head.seq}: out of order")
                       if late else
                       Finding(DUPLICATE, link.stream, link.seq,
                               f"seq {link.seq} appears again (the stream is at seq {head.seq})"))
        return (replace(head, missing=_without(head.missing, link.seq)) if late else head), finding
    missing = head.missing
    if link.seq > head.seq + 1:
        missing = missing + ((head.seq + 1, link.seq - 1),)
        finding = finding or Finding(GAP, link.stream, link.seq,
                                     f"{_seqs(head.seq + 1, link.seq - 1)} missing before "
                                     f"seq {link.seq}")
    elif link.prev_digest != head.digest:
        finding = finding or Finding(BROKEN_LINK, link.stream, link.seq,
                                     f"prev_digest {link.prev_digest.hex()[:16]}… is not the "
                                     f"record_digest {head.digest.hex()[:16]}… of seq {head.seq}")
    return Head(link.stream, link.seq, link.record_digest, link.occurred_at, link.event_id,
                missing), finding


def undecodable(reason: str, partition: int | None = None,
                offset: int | None = None) -> Finding:
    """The finding for a log message that is not an EvidenceRecord."""
    return Finding(UNDECODABLE, None, None, reason, partition, offset)


@dataclass(frozen=True, slots=True)
class Sighting:
    """A sealed record seen under its ``event_id``, for :func:`event_id_findings`."""

    event_id: str
    stream: str
    seq: int
    occurred_at: int
    partition: int
    offset: int

    @property
    def order(self) -> tuple[int, int, int]:
        """Which of two records with one event_id came first: the earlier ``occurred_at``
        (the writer's clock), then the log position. A total order that does not depend on
        which record a reader happened to read first, so the projector, a rebuild and the
        auditor flag the same record whatever their batches."""
        return (self.occurred_at, self.partition, self.offset)


def event_id_findings(known: Iterable[Sighting], new: Iterable[Sighting]) -> list[Finding]:
    """The ``duplicate_event_id`` findings that ``new`` records add to the ``known`` ones.

    An event_id names one call: a second record with an already-sealed event_id, in any
    stream, is a finding (the writer absorbs a resent capture on its partition; another
    partition's record it cannot see). Of all the records sharing an event_id, the first by
    :attr:`Sighting.order` is the original and every other is flagged once: ``known`` are the
    sightings already judged (flagged or not), ``new`` the ones to judge now. When a new
    record comes before the known original, that original is flagged now. Records that the
    chain step already calls a ``duplicate`` (the same seq again) should not be passed: their
    finding says more.
    """
    by_id: dict[str, tuple[list[Sighting], list[Sighting]]] = {}
    for s in known:
        by_id.setdefault(s.event_id, ([], []))[0].append(s)
    for s in new:
        by_id.setdefault(s.event_id, ([], []))[1].append(s)
    out: list[Finding] = []
    for event_id, (old, fresh) in by_id.items():
        if not fresh or len(old) + len(fresh) < 2:
            continue
        first = min(old + fresh, key=lambda s: s.order)
        old_first = min(old, key=lambda s: s.order) if old else None
        flagged = [s for s in fresh if s is not first]
        if old_first is not None and old_first is not first:
            flagged.append(old_first)
        for s in sorted(flagged, key=lambda s: s.order):
            out.append(Finding(DUPLICATE_EVENT_ID, s.stream, s.seq,
                               f"event_id {event_id} was sealed before, at log position "
                               f"{first.partition}:{first.offset} (seq {first.seq} of its "
                               f"stream): one call, two records", s.partition, s.offset))
    return out
