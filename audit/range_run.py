"""A range audit end to end (:mod:`audit.range_audit`): the checkpoint, the records, the tree.

In order, each step's input checked before it is used:

1. the checkpoint: a witnessed note the auditor kept (``--checkpoint FILE``), else the
   largest of the stream's checkpoints in the projection (with the cosignatures it holds)
   that the log key signed, cosigned by one of the witness keys when any are given, exactly
   as the full audit opens a witnessed checkpoint (:func:`audit.tlog.open_witnessed`), and
   whose root the projection's tree reproduces (those passed over are reported). One that
   does not verify is a ``checkpoint_invalid`` finding and the next largest is tried;
2. the span of seqs, placed in that checkpoint's tree (:meth:`RangeSpec.place`): a seq range
   past it is a :class:`~audit.range_spec.RangeError` naming the stream's head;
3. the records' log positions from the projection, the messages at those positions from the
   log itself (:func:`audit.kafka_log.fetch_messages`), the tree nodes of their inclusion
   proofs and the erasure receipts of their keys from the projection (receipts kept only when
   the log key signed them);
4. the pure check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from evidence_contract.chain import Finding
from evidence_contract.note import NoteError, VerifierKey

from audit.errors import AuditError
from audit.range_audit import Located, RangeReport, check_range, needed_nodes, read_seqs
from audit.range_spec import RangeError, RangeSpec
from audit.tlog import CHECKPOINT_INVALID, Witnessed, open_witnessed
from topics import TopicNames

__all__ = ["Receipt", "RangeRun", "run_range_audit"]


@dataclass(frozen=True)
class Receipt:
    """A verified erasure receipt of a record's key: when (µs), which request, the note."""

    erased_at: int
    request_id: str
    note: bytes


@dataclass
class RangeRun:
    """The report, and what an export of the range needs: the erasure receipts by seq."""

    report: RangeReport
    receipts: dict[int, Receipt]
    note: bytes
    """The checkpoint's note, byte for byte, with the cosignature lines it came with."""


def _candidates(database_url: str, views: str, stream: str, log_key: VerifierKey,
                witness_keys: Sequence[VerifierKey], kept: tuple[bytes, str] | None,
                findings: list[Finding]) -> list[tuple[Witnessed, bytes]]:
    """The checkpoints the range may start from, largest first, each verified: the one kept,
    else the projection's that the log key signed (and a witness key cosigned, when given)."""
    from audit.projection_db import stream_checkpoints

    keys = list(witness_keys)
    if kept is not None:
        note, source = kept
        try:
            w = open_witnessed(note, log_key, keys, source, bool(keys))
        except NoteError as e:
            raise AuditError(f"the checkpoint {source} does not verify: {e}") from e
        if w.stream != stream:
            raise AuditError(f"the checkpoint {source} is of stream {w.stream}, not {stream}")
        return [(w, note)]
    out = []
    for size, note in stream_checkpoints(database_url, stream, views):
        try:
            w = open_witnessed(note, log_key, keys, f"projection (tree size {size})", False)
        except NoteError as e:
            findings.append(Finding(
                CHECKPOINT_INVALID, stream, size,
                f"the projection's checkpoint of size {size} does not verify with the log key "
                f"{log_key.name}: {e}"))
            continue
        if w.stream != stream:
            findings.append(Finding(CHECKPOINT_INVALID, stream, size,
                                    f"the projection files a checkpoint of {w.stream} under "
                                    f"{stream}"))
        elif w.cosigners or not keys:  # else signed, not cosigned by these witnesses
            out.append((w, note))
    if not out:
        cosigned = " cosigned by a witness key given" if keys else ""
        raise AuditError(f"the projection holds no checkpoint of {stream} signed by the log "
                         f"key {log_key.name}{cosigned}: none is signed before the stream's "
                         "first record, and a witness cosigns only what it was shown")
    return out


def _choose(database_url: str, views: str, stream: str,
            candidates: list[tuple[Witnessed, bytes]], spec: RangeSpec
            ) -> tuple[Witnessed, bytes, list[int]]:
    """The largest candidate whose root the projection's tree reproduces (its proofs can
    then lead there), and the sizes passed over. A record the projection took for another
    of its seq (one not sealed by the writer, say) makes every later tree another: a range
    before it is still proved in the checkpoints signed before it. A seq range past that
    one takes the smallest checkpoint that covers it, and its proofs say what fails."""
    from audit.projection_db import tree_nodes
    from evidence_contract.merkle import root_from, root_nodes

    wanted = list(dict.fromkeys(n for w, _ in candidates for n in root_nodes(w.checkpoint.size)))
    nodes = tree_nodes(database_url, stream, wanted, views)

    def reproduced(w: Witnessed) -> bool:
        try:
            return root_from(w.checkpoint.size,
                             lambda lv, i: nodes[(lv, i)]) == w.checkpoint.root_hash
        except KeyError:
            return False

    passed: list[int] = []
    chosen = None
    for w, note in candidates:
        if reproduced(w):
            chosen = (w, note)
            break
        passed.append(w.checkpoint.size)
    need = spec.seqs.last if spec.seqs is not None else 1
    if chosen is None or chosen[0].checkpoint.size < need:
        covering = [c for c in candidates if c[0].checkpoint.size >= need] or candidates[:1]
        chosen, passed = covering[-1], []
    return chosen[0], chosen[1], passed


def run_range_audit(bootstrap: str, names: TopicNames, database_url: str, stream: str,
                    spec: RangeSpec, log_key: VerifierKey,
                    witness_keys: Sequence[VerifierKey] = (),
                    kept: tuple[bytes, str] | None = None,
                    views: str = "evidence") -> RangeRun:
    """Audit ``spec``'s records of ``stream`` (see the module docstring). ``kept``: a
    witnessed checkpoint note and where it came from. AuditError when it cannot run,
    RangeError when the range selects nothing in the checkpoint's tree."""
    from audit.kafka_log import fetch_messages
    from audit.projection_db import head_seq, range_erasures, range_rows, time_span, tree_nodes

    early: list[Finding] = []
    witnessed, note, passed = _choose(
        database_url, views, stream,
        _candidates(database_url, views, stream, log_key, witness_keys, kept, early), spec)
    size = witnessed.checkpoint.size
    head = head_seq(database_url, stream, views)
    try:
        window = (time_span(database_url, stream, spec.since, spec.until, views)
                  if spec.windowed else None)
        span = spec.place(size, window)
    except RangeError as e:
        known = ("the projection has no record of it" if head is None else
                 f"the projection's head is seq {head}")
        raise RangeError(f"{e}; {stream}: {known}") from None
    lo, hi = read_seqs(span, size, spec)
    located = [Located(*row) for row in range_rows(database_url, stream, lo, hi, views)]
    messages = fetch_messages(bootstrap, names.log, {(x.partition, x.offset) for x in located})
    wanted = needed_nodes(range(lo, hi + 1), size)
    nodes = tree_nodes(database_url, stream, wanted, views)
    missing = [n for n in wanted if n not in nodes]
    if missing:
        raise AuditError(f"the projection lacks {len(missing)} tree nodes of {stream} (e.g. "
                         f"level {missing[0][0]} index {missing[0][1]}) under the checkpoint "
                         f"of size {size}: it is catching up, or rebuild the projections")
    receipts, erased = _receipts(range_erasures(database_url, stream, lo, hi, views), log_key)
    report = check_range(stream, spec, span, witnessed, located, messages,
                         lambda level, index: nodes[(level, index)], erased_keys=erased)
    report.head, report.passed_over = head, passed
    report.findings = early + report.findings
    return RangeRun(report, receipts, note)


def _receipts(found: dict[int, tuple[int, str, bytes]], log_key: VerifierKey
              ) -> tuple[dict[int, Receipt], set[str]]:
    """The receipts the log key signed, by seq, and the key ids they name; any other
    receipt is dropped (it is no evidence of an erasure)."""
    from evidence_contract.erasure import open_receipt
    from evidence_contract.errors import EvidenceError

    out, keys = {}, set()
    for seq, (at, request_id, note) in found.items():
        try:
            req = open_receipt(note, log_key)
        except (EvidenceError, UnicodeDecodeError, ValueError):
            continue
        if req.request_id == request_id:
            out[seq] = Receipt(at, request_id, note)
            keys.update(req.key_ids)
    return out, keys
