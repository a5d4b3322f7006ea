"""evidence_contract.bundle's deployment-log path (docs/witnessing.md): record -> stream
checkpoint -> entry of the deployment tree -> deployment checkpoint cosigned by a witness;
each way the path can lie is refused, and a reader that does not ask is not affected."""

from __future__ import annotations

import copy

import pytest

from evidence_contract.bundle import Tampered, Trust, Uncovered, Unwitnessed
from evidence_contract.merkle import MerkleTree, leaf_hash
from evidence_contract.note import (
    SIG_COSIGNATURE_V1,
    Checkpoint,
    format_checkpoint,
    format_note,
    generate_signer,
    sign,
)
from tests.unit.test_schemas_bundle import LOG, STREAM, TREE, check, doc, note

LOG_WITNESS = generate_signer("witness.example/log-w1", SIG_COSIGNATURE_V1)
OTHER = generate_signer("witness.example/log-w2", SIG_COSIGNATURE_V1)


def stream_note(stream: str, size: int, root: bytes) -> bytes:
    text = format_checkpoint(Checkpoint(f"{LOG.name}/{stream}", size, root))
    return format_note(text, [sign(LOG, text)])


# The deployment tree: entries 1 and 3 are the stream's checkpoints of sizes 1 and 2.
ENTRIES = [stream_note("other:a", 5, b"\x05" * 32), note(1).encode(),
           stream_note("other:b", 9, b"\x09" * 32), note(2).encode()]
DEPLOYMENT = MerkleTree([leaf_hash(e) for e in ENTRIES])


def deployment_note(size: int = 4, root: bytes | None = None, cosigners=(LOG_WITNESS,),
                    signer=LOG) -> str:
    text = format_checkpoint(Checkpoint(LOG.name, size, root or DEPLOYMENT.root(size)))
    sigs = [sign(signer, text)] + [sign(w, text, 1_796_000_000) for w in cosigners]
    return format_note(text, sigs).decode()


def log_path(index: int = 1, size: int = 4, **over) -> dict:
    entry_size = int(ENTRIES[index].split(b"\n")[1])
    out = {"entry_index": index, "entry": ENTRIES[index].decode(),
           "record_inclusion": {"leaf_index": 0, "tree_size": entry_size,
                                "hashes": [h.hex() for h in TREE.inclusion_proof(0, entry_size)]},
           "checkpoint": deployment_note(size),
           "entry_inclusion": {"leaf_index": index, "tree_size": size, "hashes": [
               h.hex() for h in DEPLOYMENT.inclusion_proof(index, size)]}}
    out.update(over)
    return out


def asking(*keys, min_log_witnesses: int | None = None) -> Trust:
    keys = keys or (LOG_WITNESS.verifier,)
    return Trust(LOG.verifier, log_witnesses=keys,
                 min_log_witnesses=len(keys) if min_log_witnesses is None else
                 min_log_witnesses)


def test_the_path_to_a_cosigned_deployment_checkpoint_verifies():
    v = check(doc(1, log=log_path(1)), trust=asking())
    assert v.log is not None
    assert (v.log.entry_index, v.log.entry.size, v.log.checkpoint.size) == (1, 1, 4)
    assert v.log.checkpoint.origin == LOG.name and v.log.witnesses == (LOG_WITNESS.name,)
    # The entry of the bundle's own checkpoint size: its inclusion is the bundle's.
    v = check(doc(1, log=log_path(3, record_inclusion=None)), trust=asking())
    assert (v.log.entry_index, v.log.entry.size) == (3, 2)
    # At a deployment size that has the entry, not only the latest.
    assert check(doc(1, log=log_path(1, size=2)), trust=asking()).log.checkpoint.size == 2


def test_not_asked_the_path_is_not_required_nor_checked():
    assert check(doc(1)).log is None  # a bundle from before the log section
    assert check(doc(1, log=None, log_reason="no deployment checkpoint yet")).log is None
    assert check(doc(1, log=log_path(1))).log is None


def test_no_path_is_uncovered_with_the_apis_reason():
    with pytest.raises(Uncovered, match="publisher has signed none"):
        check(doc(1, log=None, log_reason="the publisher has signed none yet"),
              trust=asking())
    with pytest.raises(Uncovered):
        check(doc(1), trust=asking())


def _set(path: list, value):
    def change(p: dict) -> None:
        target = p
        for k in path[:-1]:
            target = target[k]
        target[path[-1]] = value
    return change


def _flip_root(n: str) -> str:
    lines = n.split("\n")
    lines[2] = ("B" if lines[2][0] != "B" else "C") + lines[2][1:]
    return "\n".join(lines)


@pytest.mark.parametrize("change, match", [
    # a wrong entry index (its proof then names that index too)
    (lambda p: p.update(entry_index=0, entry_inclusion={
        "leaf_index": 0, "tree_size": 4,
        "hashes": [h.hex() for h in DEPLOYMENT.inclusion_proof(1, 4)]}), "not entry 0"),
    (lambda p: p.update(entry_index=2), "entry_inclusion is of leaf 1"),
    # a tampered entry: its root changed (its signature fails), another stream's, one that
    # does not cover the record, another note of the right shape signed by another key
    (lambda p: p.update(entry=_flip_root(p["entry"])), "not a checkpoint of stream"),
    (lambda p: p.update(entry=ENTRIES[0].decode()), "not a checkpoint of stream"),
    (lambda p: p.update(entry=forged_entry()), "not a checkpoint of stream"),
    (lambda p: p.update(entry=ENTRIES[3].decode()), "not entry 1"),
    # the record's path into the entry
    (lambda p: p["record_inclusion"].update(hashes=["11" * 32]), "not in the tree of entry"),
    # a forged root: the deployment checkpoint's text changed under its signature, signed by
    # another key of the log's name, of another root signed by the log key itself, a stream
    # checkpoint passed off as the deployment checkpoint
    (lambda p: p.update(checkpoint=_flip_root(p["checkpoint"])), "deployment checkpoint"),
    (lambda p: p.update(checkpoint=deployment_note(signer=generate_signer(LOG.name))),
     "deployment checkpoint"),
    (lambda p: p.update(checkpoint=deployment_note(root=b"\x44" * 32)),
     "not entry 1 of the deployment tree"),
    (lambda p: p.update(checkpoint=note(2, cosigned=True)), "is not the log"),
    # the proof of the entry
    (lambda p: p["entry_inclusion"].update(hashes=["22" * 32]), "not entry 1"),
    (lambda p: p["entry_inclusion"].update(tree_size=3), "proof is for size 3"),
])
def test_each_lie_of_the_path_is_tampered(change, match):
    path = log_path(1)
    change(path)
    with pytest.raises(Tampered, match=match):
        check(doc(1, log=path), trust=asking())


def forged_entry() -> str:
    text = format_checkpoint(Checkpoint(f"{LOG.name}/{STREAM}", 1, TREE.root(1)))
    return format_note(text, [sign(generate_signer(LOG.name), text)]).decode()


def test_an_entry_that_does_not_cover_the_record_is_tampered():
    path = log_path(1, record_inclusion={"leaf_index": 1, "tree_size": 1, "hashes": []})
    with pytest.raises(Tampered, match="size 1, which does not cover #2"):
        check(doc(2, log=path), trust=asking())


def test_an_entry_of_another_size_needs_the_records_proof_in_it():
    path = log_path(1, record_inclusion=None)  # the entry is of size 1, the checkpoint of 2
    with pytest.raises(Tampered, match="no proof of #1 in the entry's tree of size 1"):
        check(doc(1, log=path), trust=asking())


def test_the_required_log_witnesses():
    bare = log_path(1, checkpoint=deployment_note(cosigners=()))
    with pytest.raises(Unwitnessed, match="0 valid cosignature"):
        check(doc(1, log=bare), trust=asking())
    with pytest.raises(Unwitnessed, match="1 valid cosignature.*2 required"):
        check(doc(1, log=log_path(1)), trust=asking(LOG_WITNESS.verifier, OTHER.verifier))
    with pytest.raises(Unwitnessed):  # the stream checkpoint's witness is not the log's
        check(doc(1, log=log_path(1)), trust=asking(OTHER.verifier))
    both = log_path(1, checkpoint=deployment_note(cosigners=(LOG_WITNESS, OTHER)))
    v = check(doc(1, log=both), trust=asking(LOG_WITNESS.verifier, OTHER.verifier))
    assert sorted(v.log.witnesses) == sorted([LOG_WITNESS.name, OTHER.name])
    # The path alone, without witnesses; and one of two.
    assert check(doc(1, log=bare), trust=Trust(LOG.verifier, log_witnesses=())).log
    assert check(doc(1, log=log_path(1)), trust=asking(
        LOG_WITNESS.verifier, OTHER.verifier, min_log_witnesses=1)).log.witnesses == (
        LOG_WITNESS.name,)
    with pytest.raises(ValueError):
        Trust(LOG.verifier, log_witnesses=(), min_log_witnesses=1)
    with pytest.raises(ValueError):
        Trust(LOG.verifier, min_log_witnesses=1)


def test_a_malformed_path_is_tampered_even_unasked():
    for bad in ({"entry": 1}, [], {**log_path(1), "entry_index": -1},
                {**log_path(1), "entry_inclusion": None}):
        with pytest.raises(Tampered):
            check(doc(1, log=copy.deepcopy(bad)))
    with pytest.raises(Tampered, match="log_reason"):
        check(doc(1, log=None, log_reason=7))
