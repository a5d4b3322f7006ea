"""The tree audit (audit.tlog): checkpoints and witnessed checkpoints against the log's trees."""

from __future__ import annotations

import hashlib

import pytest

from audit.tlog import (
    CHECKPOINT_INVALID, CHECKPOINT_MISMATCH, REWRITTEN_SINCE_WITNESSED, WITNESS_REFUSED,
    TreeAudit, open_witnessed,
)
from audit.verify import KINDS, LogAuditor
from evidence_contract import encode
from evidence_contract.merkle import MerkleTree, record_leaf_hash
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, Checkpoint, NoteError, SignerKey, format_checkpoint, format_note, sign,
)
from evidence_contract.tlog import DEFAULT_LOG_NAME, checkpoint_origin
from tests.unit.test_audit_verify import chain

STREAM = "acme:bot"
LOG = SignerKey(DEFAULT_LOG_NAME, 1, hashlib.sha256(b"audit log").digest())
ROGUE = SignerKey(DEFAULT_LOG_NAME, 1, hashlib.sha256(b"someone else").digest())
W1 = SignerKey("witness.test/w1", SIG_COSIGNATURE_V1, hashlib.sha256(b"audit w1").digest())


def _values(n: int) -> list[bytes]:
    return [encode("EvidenceRecord", r) for r in chain(STREAM, n)]


def _note(values: list[bytes], size: int, signer: SignerKey = LOG, cosign: bool = False,
          root: bytes | None = None) -> bytes:
    root = root or MerkleTree([record_leaf_hash(v) for v in values]).root(size)
    text = format_checkpoint(Checkpoint(checkpoint_origin(DEFAULT_LOG_NAME, STREAM), size, root))
    sigs = [sign(signer, text)] + ([sign(W1, text, timestamp=1_700_000_000)] if cosign else [])
    return format_note(text, sigs)


def _audit(values: list[bytes], trees: TreeAudit) -> list:
    a = LogAuditor()
    a.on_record = trees.add_record
    for off, v in enumerate(values):
        a.add(0, off, v)
    assert not a.findings
    return [(f.kind, f.seq) for f in trees.finish()]


def test_signed_and_witnessed_checkpoints_of_the_log_itself_are_clean():
    values = _values(13)
    trees = TreeAudit(LOG.verifier)
    for i, size in enumerate((1, 5, 8, 13)):
        trees.add_checkpoint_message(0, i, STREAM.encode(), _note(values, size))
    trees.add_witnessed(open_witnessed(_note(values, 8, cosign=True), LOG.verifier,
                                       [W1.verifier], "file w.note", True))
    assert _audit(values, trees) == []
    (s,) = trees.summary()["streams"]
    assert (s["tree_size"], s["checkpoints_checked"], len(s["witnessed"])) == (13, 4, 1)
    assert s["root"] == MerkleTree([record_leaf_hash(v) for v in values]).root().hex()
    assert s["witnessed"][0]["cosigners"] == [W1.name]


def test_a_rewrite_from_seq_1_with_its_own_consistent_chain_is_caught_by_the_witnessed_one():
    original, rewritten = _values(10), _values(12)  # another chain, every link recomputed
    witnessed = _note(original, 10, cosign=True)
    trees = TreeAudit(LOG.verifier)
    # The rewriter re-signed fresh checkpoints of the new chain (it holds the log key) and
    # replaced evidence.checkpoints: those check out. The witness's copy does not.
    trees.add_checkpoint_message(0, 0, STREAM.encode(), _note(rewritten, 12))
    trees.add_witnessed(open_witnessed(witnessed, LOG.verifier, [W1.verifier], "witness w1",
                                       True))
    assert _audit(rewritten, trees) == [(REWRITTEN_SINCE_WITNESSED, 10)]
    assert "rewritten since" in trees.findings[0].detail


def test_a_truncated_stream_is_caught_by_a_larger_witnessed_checkpoint():
    values = _values(9)
    trees = TreeAudit(LOG.verifier)
    trees.add_witnessed(open_witnessed(_note(values, 9, cosign=True), LOG.verifier,
                                       [W1.verifier], "witness w1", True))
    assert _audit(values[:7], trees) == [(REWRITTEN_SINCE_WITNESSED, 9)]
    assert "holds 7 records" in trees.findings[0].detail


def test_checkpoints_not_signed_by_the_log_or_not_of_its_records_are_findings():
    values = _values(6)
    trees = TreeAudit(LOG.verifier)
    trees.add_checkpoint_message(0, 0, STREAM.encode(), _note(values, 4, signer=ROGUE))
    trees.add_checkpoint_message(0, 1, STREAM.encode(), _note(values, 5, root=bytes(32)))
    trees.add_checkpoint_message(0, 2, STREAM.encode(), b"not a note")
    trees.add_checkpoint_message(0, 3, b"other:stream", _note(values, 6))  # keyed elsewhere
    beyond = _note(values, 9, root=bytes(32))  # a size the log does not reach
    trees.add_checkpoint_message(0, 4, STREAM.encode(), beyond)
    assert sorted(_audit(values, trees), key=str) == sorted([
        (CHECKPOINT_INVALID, None), (CHECKPOINT_MISMATCH, 5), (CHECKPOINT_INVALID, None),
        (CHECKPOINT_INVALID, None), (CHECKPOINT_MISMATCH, 9)], key=str)


def test_a_refusal_of_a_log_signed_checkpoint_is_a_finding_and_of_another_note_is_not():
    values, other = _values(5), _values(7)
    trees = TreeAudit(LOG.verifier)
    trees.add_refusal("witness w1", {"kind": "inconsistent", "reason": "no valid proof",
                                     "note": _note(other, 7).decode(),
                                     "last_cosigned": {"size": 5, "root": "ab" * 32}})
    trees.add_refusal("witness w1", {"kind": "bad_signature", "reason": "x",
                                     "note": _note(other, 7, signer=ROGUE).decode()})
    assert _audit(values, trees) == [(WITNESS_REFUSED, 7)]
    assert "no valid proof" in trees.findings[0].detail


def test_a_witnessed_note_must_carry_a_cosignature_of_a_given_witness_key():
    values = _values(3)
    with pytest.raises(NoteError, match="no valid cosignature"):
        open_witnessed(_note(values, 3), LOG.verifier, [W1.verifier], "file x", True)
    with pytest.raises(NoteError):
        open_witnessed(_note(values, 3, signer=ROGUE, cosign=True), LOG.verifier,
                       [W1.verifier], "file x", True)
    assert open_witnessed(_note(values, 3), LOG.verifier, [], "file x", False).cosigners == ()


def test_the_stream_filter_and_the_kinds():
    values = _values(4)
    trees = TreeAudit(LOG.verifier, stream_filter="not:this")
    trees.add_checkpoint_message(0, 0, STREAM.encode(), _note(values, 4, root=bytes(32)))
    assert _audit(values, trees) == [] and trees.trees == {}
    assert {CHECKPOINT_INVALID, CHECKPOINT_MISMATCH, REWRITTEN_SINCE_WITNESSED,
            WITNESS_REFUSED} <= set(KINDS)
