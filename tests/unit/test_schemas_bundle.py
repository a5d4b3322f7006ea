"""evidence_contract.bundle: the check every verifying reader runs, table-driven over the
ways a bundle can lie (a tampered record, proof, checkpoint, a rollback, a fork, a missing
cosignature), on the contract's sealed test vectors."""

from __future__ import annotations

import base64
import copy

import pytest

from evidence_contract import encode
from evidence_contract.bundle import (
    RolledBack,
    Tampered,
    Trust,
    Uncovered,
    Unwitnessed,
    parse_bundle,
    verify_bundle,
)
from evidence_contract.merkle import MerkleTree, record_leaf_hash
from evidence_contract.note import (
    SIG_COSIGNATURE_V1,
    Checkpoint,
    format_checkpoint,
    format_note,
    generate_signer,
    sign,
)
from evidence_contract.vectors import sealed_records

LOG = generate_signer("evidence-store.local/log")
WITNESS = generate_signer("witness.example/w1", SIG_COSIGNATURE_V1)
FIRST, SECOND = (encode("EvidenceRecord", r) for r in sealed_records())
STREAM = "tenant-a:support.chat"
ORIGIN = f"evidence-store.local/log/{STREAM}"
TREE = MerkleTree([record_leaf_hash(FIRST), record_leaf_hash(SECOND)])


def note(size: int, root: bytes | None = None, cosigned: bool = False) -> str:
    text = format_checkpoint(Checkpoint(ORIGIN, size, root or TREE.root(size)))
    sigs = [sign(LOG, text)] + ([sign(WITNESS, text, 1_796_000_000)] if cosigned else [])
    return format_note(text, sigs).decode()


def doc(seq: int = 1, size: int = 2, **over) -> dict:
    record = (FIRST, SECOND)[seq - 1]
    out = {"stream": STREAM, "seq": seq, "record_b64": base64.b64encode(record).decode(),
           "leaf_hash": record_leaf_hash(record).hex(), "checkpoint": note(size),
           "inclusion": None if seq > size else {
               "leaf_index": seq - 1, "tree_size": size,
               "hashes": [h.hex() for h in TREE.inclusion_proof(seq - 1, size)]},
           "consistency": None}
    out.update(over)
    return out


def check(d: dict, known: Checkpoint | None = None, trust: Trust | None = None, **kw):
    return verify_bundle(parse_bundle(d), trust or Trust(LOG.verifier), known, **kw)


def test_a_true_bundle_verifies_and_hands_back_the_decoded_record():
    v = check(doc(1))
    assert (v.stream, v.seq, v.checkpoint.size) == (STREAM, 1, 2)
    assert v.record == FIRST and v.body["stream"] == STREAM and v.witnesses == ()


def _flip(b64: str) -> str:
    raw = bytearray(base64.b64decode(b64))
    raw[-40] ^= 1
    return base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize("change, match", [
    (lambda d: d.update(record_b64=_flip(d["record_b64"])), "record"),
    (lambda d: d.update(leaf_hash="00" * 32), "leaf"),
    (lambda d: d["inclusion"].update(hashes=["11" * 32]), "signed tree"),
    (lambda d: d.update(checkpoint=note(2, root=b"\x22" * 32)), "signed tree"),
    (lambda d: d.update(checkpoint=d["checkpoint"].replace("\n2\n", "\n3\n")), "checkpoint"),
    (lambda d: d.update(checkpoint=format_note(format_checkpoint(Checkpoint(
        ORIGIN, 2, TREE.root(2))), [sign(generate_signer(LOG.name), format_checkpoint(
            Checkpoint(ORIGIN, 2, TREE.root(2))))]).decode()), "checkpoint"),
    (lambda d: d.update(stream="tenant-b:other"), "checkpoint"),
    (lambda d: d.update(seq=2), "not the"),
    (lambda d: d["inclusion"].update(tree_size=1), "size"),
])
def test_each_lie_is_tampered(change, match):
    d = doc(1)
    change(d)
    with pytest.raises(Tampered, match=match):
        check(d)


def test_the_content_key_asked_for_must_be_the_records():
    with pytest.raises(Tampered, match="content_key"):
        check(doc(1), content_key=b"\x01" * 32)


def test_a_record_no_checkpoint_covers_is_uncovered_not_tampered():
    with pytest.raises(Uncovered):
        check(doc(2, size=1, inclusion=None))
    with pytest.raises(Uncovered):
        check(doc(1, checkpoint=None, inclusion=None))
    with pytest.raises(Tampered):  # covered, but the proof withheld
        check(doc(1, inclusion=None))


def test_rollback_fork_and_consistency_against_the_last_verified_checkpoint():
    one = Checkpoint(ORIGIN, 1, TREE.root(1))
    two = Checkpoint(ORIGIN, 2, TREE.root(2))
    with pytest.raises(RolledBack, match="went back"):
        check(doc(1, size=1), known=two)
    with pytest.raises(RolledBack, match="forked"):
        check(doc(1), known=Checkpoint(ORIGIN, 2, b"\x33" * 32))
    with pytest.raises(Tampered, match="no consistency proof"):
        check(doc(1), known=one)
    proved = doc(1, consistency={"first": 1, "second": 2,
                                 "hashes": [h.hex() for h in TREE.consistency_proof(1, 2)]})
    assert check(proved, known=one).checkpoint == two
    forged = copy.deepcopy(proved)
    forged["consistency"]["hashes"] = ["44" * 32]
    with pytest.raises(RolledBack, match="does not extend"):
        check(forged, known=one)
    assert check(doc(1), known=two).checkpoint == two  # the same checkpoint again


def test_required_witnesses():
    trust = Trust(LOG.verifier, (WITNESS.verifier,), 1)
    with pytest.raises(Unwitnessed, match="0 valid cosignature"):
        check(doc(1), trust=trust)
    v = check(doc(1, checkpoint=note(2, cosigned=True)), trust=trust)
    assert v.witnesses == (WITNESS.name,)
    with pytest.raises(ValueError):
        Trust(LOG.verifier, (), 1)


def test_a_withheld_record_proves_its_leaf_only():
    v = check(doc(1, record_b64=None))
    assert v.record is None and v.body is None
    with pytest.raises(Tampered):
        check(doc(1, record_b64=None, leaf_hash=record_leaf_hash(SECOND).hex()))
