"""A real third-party witness (litewitness, filippo.io/torchwood v0.9.0, built from the Go module
proxy) cosigns checkpoints of the shape the log pushes: the deployment checkpoint, origin = the
log key's name, over a tree whose entries are stream checkpoints (docs/witnessing.md).

Signed with evidence_contract.note, proved with evidence_contract.merkle, sent as C2SP
tlog-witness ``POST /add-checkpoint``; the cosignature litewitness answers verifies with the
verifier key it printed at start, read as a line of the witnesses file would give it. The
witness takes a consistent extension, refuses forks (422: at a larger size with a proof from
another tree, and at the same size with another root), answers a wrong old size with 409 and
its size as ``text/x.tlog.size``, an unknown origin with 404 and another key with 403.
"""

from __future__ import annotations

import time
import uuid

import pytest

from evidence_contract.merkle import MerkleTree, leaf_hash, verify_consistency
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, Checkpoint, SignerKey, cosignature_timestamp, format_checkpoint,
    format_note, format_vkey, generate_signer, parse_note, sign, verify,
)
from evidence_contract.tlog import checkpoint_origin, open_log_checkpoint
from server.witnesses import parse_witnesses
from tests.fixtures.litewitness import BUILD_TIMEOUT, Litewitness

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT + 120)


def _entries(log: SignerKey, count: int, tag: str = "") -> list[bytes]:
    """Stream checkpoints, as the writer signs them: the deployment tree's entries."""
    out = []
    for i in range(count):
        stream = f"acme:s{i % 3}"
        text = format_checkpoint(Checkpoint(checkpoint_origin(log.name, stream), i + 1,
                                            leaf_hash(f"{tag}{stream}/{i}".encode())))
        out.append(format_note(text, [sign(log, text)]))
    return out


def _deployment_checkpoint(log: SignerKey, tree: MerkleTree, size: int) -> bytes:
    text = format_checkpoint(Checkpoint(log.name, size, tree.root(size)))
    return format_note(text, [sign(log, text)])


@pytest.fixture
def log() -> SignerKey:
    return generate_signer(f"evidence-store.test/{uuid.uuid4().hex[:10]}/log")


def _cosigned(w: Litewitness, log: SignerKey, note: bytes, body: bytes) -> bytes:
    """The note with the witness's answer appended; checked as the publisher checks it."""
    (sig,) = [s for s in parse_note(note + body).signatures if s.name == w.name]
    (witness,) = parse_witnesses(f"{w.vkey} {w.url}\n")
    assert witness.key == w.verifier and witness.key.sig_type == SIG_COSIGNATURE_V1
    assert witness.key.name == w.name
    text = parse_note(note).text
    assert verify(witness.key, text, sig)
    assert abs(cosignature_timestamp(sig) - time.time()) < 3600
    cosigned = note + sig.line().encode()
    assert cosigned == note + body  # the answer is exactly its one cosignature line
    cp, opened = open_log_checkpoint(cosigned, log.verifier, [witness.key])
    assert [s.name for s in opened.verified] == [log.name, w.name]
    return cosigned


def test_litewitness_cosigns_the_deployment_checkpoint_and_its_extension(litewitness, log):
    w = litewitness
    w.add_log(log.name, log.verifier)
    entries = _entries(log, 12)
    tree = MerkleTree(leaf_hash(e) for e in entries)

    first = _deployment_checkpoint(log, tree, 5)
    r = w.add_checkpoint(first, old_size=0)
    assert r.status_code == 200, r.text
    _cosigned(w, log, first, r.content)

    second = _deployment_checkpoint(log, tree, 9)
    proof = tree.consistency_proof(5, 9)
    verify_consistency(5, 9, proof, tree.root(5), tree.root(9))
    r = w.add_checkpoint(second, old_size=5, proof=proof)
    assert r.status_code == 200, r.text
    _cosigned(w, log, second, r.content)

    # The same checkpoint again (old = new size, no proof) is cosigned again: nothing changed.
    r = w.add_checkpoint(second, old_size=9)
    assert r.status_code == 200, r.text
    assert str(9) in w.logs() and log.name in w.logs()


def test_litewitness_refuses_forks_and_names_its_size(litewitness, log):
    w = litewitness
    w.add_log(log.name, log.verifier)
    tree = MerkleTree(leaf_hash(e) for e in _entries(log, 12))
    assert w.add_checkpoint(_deployment_checkpoint(log, tree, 9)).status_code == 200

    # A wrong old size: 409 with the size the witness holds.
    later = _deployment_checkpoint(log, tree, 12)
    r = w.add_checkpoint(later, old_size=5, proof=tree.consistency_proof(5, 12))
    assert r.status_code == 409, r.text
    assert r.headers["content-type"] == "text/x.tlog.size"
    assert r.text == "9\n"

    # A fork: the same log key signs a tree whose entry 7 was rewritten. Its own proof from 9
    # to 12 is valid for it, not for the tree the witness cosigned: 422.
    forked_entries = _entries(log, 12)
    forked_entries[7] = _entries(log, 8, tag="rewritten ")[7]
    forked = MerkleTree(leaf_hash(e) for e in forked_entries)
    assert forked.root(9) != tree.root(9)
    r = w.add_checkpoint(_deployment_checkpoint(log, forked, 12), old_size=9,
                         proof=forked.consistency_proof(9, 12))
    assert r.status_code == 422, r.text
    # The same size with another root: 422 too.
    r = w.add_checkpoint(_deployment_checkpoint(log, forked, 9), old_size=9)
    assert r.status_code == 422, r.text

    # The honest extension is still taken: the forks changed nothing.
    r = w.add_checkpoint(later, old_size=9, proof=tree.consistency_proof(9, 12))
    assert r.status_code == 200, r.text
    _cosigned(w, log, later, r.content)


def test_litewitness_knows_only_the_logs_it_was_given(litewitness, log):
    w = litewitness
    tree = MerkleTree(leaf_hash(e) for e in _entries(log, 3))
    note = _deployment_checkpoint(log, tree, 3)
    assert w.add_checkpoint(note).status_code == 404  # unknown origin
    w.add_log(log.name, log.verifier)
    impostor = generate_signer(log.name)  # the log's name, another key
    r = w.add_checkpoint(_deployment_checkpoint(impostor, tree, 3))
    assert r.status_code == 403, r.text
    # A stream checkpoint of the log is another origin: the witness follows the one origin.
    stream_cp = _entries(log, 1)[0]
    assert w.add_checkpoint(stream_cp).status_code == 404
    assert w.add_checkpoint(note).status_code == 200


def test_two_litewitnesses_have_their_own_keys(make_litewitness, log):
    a, b = make_litewitness(), make_litewitness()
    assert a.vkey != b.vkey and a.url != b.url and a.db != b.db
    tree = MerkleTree(leaf_hash(e) for e in _entries(log, 4))
    note = _deployment_checkpoint(log, tree, 4)
    for w in (a, b):
        w.add_log(log.name, format_vkey(log.verifier))
        r = w.add_checkpoint(note)
        assert r.status_code == 200, r.text
        _cosigned(w, log, note, r.content)
