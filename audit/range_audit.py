"""The audit of a range of one stream from a verified checkpoint (pure): what
``evidence audit --stream S --seq A..B`` (``--last N``, ``--since/--until``) checks.

The full audit reads the log from offset 0. A range audit starts from a signed checkpoint of
the stream instead (verified by the caller with the log key, and the witnesses' keys where
given, :func:`audit.tlog.open_witnessed`) and reads only the range's records, the one before
it and, for a time window, the one after it. Where they are on the log comes from the
projection, which is not trusted: each message read must be the record the projection said
(stream and seq), and what it leaves out shows as a seq missing from the span. Then:

1. every record read goes through :class:`audit.verify.LogAuditor` from a head just below the
   record before the range: ``record_digest`` and every body digest recompute, each record
   links to the one before it (gaps, duplicates, forks, broken links), and the first record of
   the range links to the record before it (its ``prev_digest``);
2. every record read is in the checkpoint's tree at its seq: its leaf, recomputed from its
   bytes, folds with an inclusion proof to the signed root. The proofs are computed from the
   projection's tree nodes (the hashes the public tiles serve) and verified here, so altered
   nodes cannot pass: when a proof fails, the tree's own leaf at that seq is tried with the
   same proof, to tell a log record the checkpoint did not sign (``not_in_checkpoint``) from
   nodes that do not lead to the root (``projection_altered``);
3. for a time window, each record of the span was sealed inside it, the record before it
   before ``since`` and the one after it at or after ``until`` (``range_bound_mismatch``
   otherwise): ``occurred_at`` never decreases along a stream, so the span is the window's.

:data:`PROVES` and :data:`DOES_NOT_PROVE` say, in the report and on the terminal, what that
establishes and what it leaves to the full audit.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from evidence_contract import DecodeError, split_record
from evidence_contract.chain import Finding, Head
from evidence_contract.merkle import ProofError, inclusion_nodes, inclusion_proof_from, \
    record_leaf_hash, verify_inclusion

from audit.range_spec import RangeSpec, Span
from audit.tlog import Witnessed
from audit.verify import KINDS as AUDIT_KINDS
from audit.verify import LogAuditor, StreamState

__all__ = ["DOES_NOT_PROVE", "KINDS", "NOT_IN_CHECKPOINT", "PROVES", "RANGE_BOUND_MISMATCH",
           "Located", "RangeCheck", "RangeReport", "check_range", "needed_nodes", "read_seqs"]

NOT_IN_CHECKPOINT = "not_in_checkpoint"
RANGE_BOUND_MISMATCH = "range_bound_mismatch"
KINDS = AUDIT_KINDS + (NOT_IN_CHECKPOINT, RANGE_BOUND_MISMATCH)
"""The full audit's kinds, then the range audit's own."""

PROVES = (
    "every record of the range and the record before it were read from the log itself, and "
    "their record_digest and every digest their bodies keep bytes for recompute",
    "the range's records link one to the next with no gap, duplicate or fork, and the first "
    "links to the record before it (its prev_digest is that record's record_digest)",
    "every record read is in the tree of the checkpoint below, signed by the log key (and "
    "cosigned by the witnesses named): its leaf, recomputed from its bytes, folds to the "
    "signed root at its seq, so these are the records the log committed to",
    "for a time window: the span's ends are the window's, checked on the log's records (the "
    "one before the span was sealed before --since, the one after it at or after --until)",
)
DOES_NOT_PROVE = (
    "records outside the range were not read: they are covered only by the checkpoint's "
    "tree (one signed root over all of them), not re-hashed or chain-checked here; "
    "`evidence audit` without a range reads every record",
    "records the checkpoint does not cover yet (past its size) are not audited",
    "that no other tree of the stream was signed, or that the checkpoint is the latest: "
    "witnesses (--witness-key) and `evidence monitor` watch for a fork or a rollback",
    "the writer's heads and the projection's rows are not compared with the log (the "
    "projection is only used to find the records, and what it got wrong is a finding); "
    "event ids are checked for duplicates within the range only",
)


@dataclass(frozen=True)
class Located:
    """Where the projection says a record of the stream is: seq, log position."""

    seq: int
    partition: int
    offset: int


def read_seqs(span: Span, size: int, spec: RangeSpec) -> tuple[int, int]:
    """The seqs to read for ``span`` in a tree of ``size``: from the record before it (none
    before seq 1) to its last, and for a window with an end one more, when the tree has it."""
    after = spec.until is not None and span.last < size
    return max(1, span.first - 1), span.last + (1 if after else 0)


def needed_nodes(seqs: Sequence[int], size: int) -> list[tuple[int, int]]:
    """The tree nodes the inclusion proofs of ``seqs`` read (and each seq's own leaf)."""
    out: dict[tuple[int, int], None] = {}
    for seq in seqs:
        if 1 <= seq <= size:
            out[(0, seq - 1)] = None
            out.update(dict.fromkeys(inclusion_nodes(seq - 1, size)))
    return list(out)


@dataclass
class RangeCheck:
    """One record read, checked: its log position, message and (when it is in the tree)
    the inclusion proof that verified; what an export of the range is made of."""

    seq: int
    partition: int
    offset: int
    message: bytes
    proof: list[bytes] | None = None
    key_id: str | None = None


@dataclass
class RangeReport:
    stream: str
    spec: RangeSpec
    span: Span
    checkpoint: Witnessed
    read: list[RangeCheck] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    output_checks: dict[str, int] = field(default_factory=dict)
    encrypted: int = 0
    erased: int = 0
    head: int | None = None
    """The stream's last seq as the projection has it (untrusted: only said, not checked)."""
    passed_over: list[int] = field(default_factory=list)
    """Sizes of larger signed checkpoints whose root the projection's tree does not
    reproduce: the range was checked against a smaller one (:mod:`audit.range_run`)."""

    @property
    def clean(self) -> bool:
        return not self.findings

    @property
    def records(self) -> int:
        """Records of the span read (the ones before and after it not counted)."""
        return len({c.seq for c in self.read if self.span.first <= c.seq <= self.span.last})

    def by_kind(self) -> dict[str, int]:
        counts = Counter(f.kind for f in self.findings)
        return {k: counts[k] for k in KINDS if k in counts}

    def to_dict(self) -> dict[str, Any]:
        """The full audit's report (:meth:`audit.run.AuditReport.to_dict`) where it applies,
        with ``range``, ``checkpoint``, ``read``, ``proves`` and ``does_not_prove``."""
        cp = self.checkpoint.checkpoint
        before = [c.seq for c in self.read if c.seq < self.span.first]
        after = [c.seq for c in self.read if c.seq > self.span.last]
        not_covered = None if self.head is None else max(0, self.head - cp.size)
        return {
            "clean": self.clean,
            "messages": len(self.read),
            "streams": [{"stream": self.stream, "records": self.records,
                         "findings": len(self.findings),
                         "encrypted_records": self.encrypted,
                         "erased_records": self.erased}],
            "findings_by_kind": self.by_kind(),
            "findings": [f.to_dict() for f in self.findings],
            "output_digest_checks": self.output_checks,
            "projection_checked": False,
            "projection_lag": 0,
            "range": {"stream": self.stream, "asked": self.spec.describe(),
                      "first_seq": self.span.first, "last_seq": self.span.last,
                      "since_us": self.spec.since, "until_us": self.spec.until,
                      "records_after_checkpoint": not_covered},
            "checkpoint": {"source": self.checkpoint.source, "origin": cp.origin,
                           "tree_size": cp.size, "root": cp.root_hash.hex(),
                           "cosigners": list(self.checkpoint.cosigners),
                           "passed_over": list(self.passed_over)},
            "read": {"records": self.records,
                     "before": before[0] if before else None,
                     "after": after[0] if after else None,
                     "positions": sorted({(c.partition, c.offset) for c in self.read})},
            "proves": list(PROVES),
            "does_not_prove": list(DOES_NOT_PROVE),
        }


def _decode(value: bytes | None) -> dict[str, Any] | None:
    try:
        return split_record(value or b"")[1]
    except DecodeError:
        return None


def check_range(stream: str, spec: RangeSpec, span: Span, checkpoint: Witnessed,
                located: Sequence[Located], messages: Mapping[tuple[int, int], bytes | None],
                lookup: Callable[[int, int], bytes], erased_keys: set[str] | None = None,
                ) -> RangeReport:
    """Check the records read for ``span`` (see the module docstring).

    ``located``: the projection's positions of seqs :func:`read_seqs` (every copy it holds);
    ``messages``: the log's message at each of those positions (None: none committed there);
    ``lookup(level, index)``: the projection's tree node (KeyError when it has none);
    ``erased_keys``: key ids that verified erasure receipts name.
    """
    cp = checkpoint.checkpoint
    lo, hi = read_seqs(span, cp.size, spec)
    report = RangeReport(stream, spec, span, checkpoint)
    good: list[tuple[Located, bytes, dict[str, Any]]] = []
    for loc in sorted(located, key=lambda x: (x.seq, x.partition, x.offset)):
        value = messages.get((loc.partition, loc.offset))
        record = _decode(value)
        found = None if record is None else (record["body"]["stream"], record["seal"]["seq"])
        if found != (stream, loc.seq):
            what = ("no committed message" if value is None else
                    "no EvidenceRecord" if record is None else f"{found[0]} #{found[1]}")
            report.findings.append(Finding(
                "projection_extra", stream, loc.seq,
                f"the projection places seq {loc.seq} at {loc.partition}:{loc.offset}, where "
                f"the log holds {what}", loc.partition, loc.offset))
            continue
        good.append((loc, value, record))
    have = {loc.seq for loc, _v, _r in good}
    for seq in range(lo, hi + 1):
        if seq not in have:
            report.findings.append(Finding(
                "projection_missing", stream, seq,
                f"the checkpoint of size {cp.size} covers seq {seq}, but the projection "
                f"locates no record of it on the log: it was not read (run `evidence audit` "
                f"without a range to read the whole log)"))

    auditor = LogAuditor(stream=stream, erased_keys=erased_keys)
    if good and good[0][0].seq > 1:
        # From a head just below the first record read (the one before the range): its own
        # link is outside the range, the range's first link is checked against it.
        first = good[0]
        auditor.streams[stream] = StreamState(
            Head(stream, first[0].seq - 1, bytes(first[2]["seal"]["prev_digest"])))
    for loc, value, record in good:
        auditor.add(loc.partition, loc.offset, value)
        enc = record["body"].get("encryption")
        check = RangeCheck(loc.seq, loc.partition, loc.offset, bytes(value),
                           key_id=None if enc is None else enc["key_id"])
        report.read.append(check)
        _include(report, check, cp.size, cp.root_hash, lookup)
        if spec.windowed:
            _bound(report, spec, span, check, record["seal"]["occurred_at"])
    report.findings = auditor.findings + report.findings
    report.output_checks = dict(auditor.output_checks)
    in_span = {c.seq for c in report.read if span.first <= c.seq <= span.last}
    report.encrypted = sum(1 for c in report.read if c.seq in in_span and c.key_id)
    report.erased = sum(1 for c in report.read if c.seq in in_span and c.key_id
                        and c.key_id in (erased_keys or ()))
    return report


def _include(report: RangeReport, check: RangeCheck, size: int, root: bytes,
             lookup: Callable[[int, int], bytes]) -> None:
    """The record's leaf folds to the checkpoint's root at its seq; else say why not."""
    seq, where = check.seq, (check.partition, check.offset)
    leaf = record_leaf_hash(check.message)
    proof = inclusion_proof_from(seq - 1, size, lookup)
    try:
        verify_inclusion(seq - 1, size, leaf, proof, root)
        check.proof = proof
        return
    except ProofError:
        pass
    tree_leaf = lookup(0, seq - 1)
    try:
        verify_inclusion(seq - 1, size, tree_leaf, proof, root)
    except ProofError:
        report.findings.append(Finding(
            "projection_altered", report.stream, seq,
            f"the projection's tree nodes do not lead to the checkpoint's root (size {size}): "
            f"the inclusion of seq {seq} could not be checked", *where))
        return
    report.findings.append(Finding(
        NOT_IN_CHECKPOINT, report.stream, seq,
        f"the log's record at {where[0]}:{where[1]} is not the record the checkpoint of size "
        f"{size} signed at seq {seq}: its leaf is {leaf.hex()[:16]}…, the signed tree's "
        f"{tree_leaf.hex()[:16]}…", *where))


def _bound(report: RangeReport, spec: RangeSpec, span: Span, check: RangeCheck,
           occurred_at: int) -> None:
    """A time window's records: the span's inside it, the one before it before ``since``,
    the one after it at or after ``until``."""
    from evidence_contract import iso_micros

    seq, when = check.seq, iso_micros(occurred_at)
    if check.seq < span.first:
        bad = spec.since is not None and occurred_at >= spec.since
        why = f"seq {seq}, before the span, was sealed at {when}, inside the window"
    elif check.seq > span.last:
        bad = spec.until is not None and occurred_at < spec.until
        why = f"seq {seq}, after the span, was sealed at {when}, inside the window"
    else:
        bad = not spec.in_window(occurred_at)
        why = f"seq {seq}, in the span, was sealed at {when}, outside the window"
    if bad:
        report.findings.append(Finding(
            RANGE_BOUND_MISMATCH, report.stream, seq,
            f"{why} ({spec.describe()}): the projection's times are not the log's",
            check.partition, check.offset))
