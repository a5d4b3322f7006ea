"""The audit of the deployment tree (audit.logtree) and the tlog-witness exchange
(audit.witnesses.ask_witness) against the answers the C2SP spec allows, without a broker.

The exchange is driven through httpx's MockTransport playing a witness that keeps one tree
(size and root) and checks consistency proofs as the spec says; the real third-party witness
(litewitness) is in tests/integration/test_audit_tlog_witness.py.
"""

from __future__ import annotations

import base64
import hashlib

import httpx
import pytest

from audit.errors import AuditError
from audit.logtree import DeploymentAudit
from audit.tlog import CHECKPOINT_MISMATCH, REWRITTEN_SINCE_WITNESSED, WITNESS_REFUSED, TreeAudit
from audit.witnesses import ask_witness
from evidence_contract.merkle import (
    CompactRange, ProofError, compose_leaf_input, leaf_hash, verify_consistency,
)
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, Checkpoint, SignerKey, format_checkpoint, format_note, parse_checkpoint,
    parse_note, sign,
)
from evidence_contract.tlog import (
    KIND_CHECKPOINT, KIND_HEADER, KIND_LOG_CHECKPOINT, STREAM_HEADER, checkpoint_origin,
)
from publisher.core import sign_checkpoint

LOG = SignerKey("evidence-store.test/log", 1, hashlib.sha256(b"logtree log").digest())
W = SignerKey("witness.test/w", SIG_COSIGNATURE_V1, hashlib.sha256(b"logtree w").digest())


def _record(stream: str, seq: int, salt: str = "") -> tuple[bytes, bytes]:
    value = f"{stream} {seq}{salt}".encode()
    return hashlib.sha256(b"digest " + value).digest(), value


def _stream_root(stream: str, size: int, salt: str = "") -> bytes:
    cr = CompactRange()
    for seq in range(1, size + 1):
        digest, value = _record(stream, seq, salt)
        cr.append(leaf_hash(compose_leaf_input(digest, hashlib.sha256(value).digest())))
    return cr.root()


def _entry(stream: str, size: int, salt: str = "") -> tuple[bytes, list]:
    text = format_checkpoint(Checkpoint(checkpoint_origin(LOG.name, stream), size,
                                        _stream_root(stream, size, salt)))
    return format_note(text, [sign(LOG, text)]), [(KIND_HEADER, KIND_CHECKPOINT.encode()),
                                                  (STREAM_HEADER, stream.encode())]


ENTRIES = [("a", 1), ("b", 2), ("a", 3), ("b", 4), ("a", 5)]


def _audit(entries=ENTRIES, salt: str = "", signed_at=(3, 5)) -> tuple[TreeAudit, DeploymentAudit]:
    trees = TreeAudit(LOG.verifier)
    deploy = DeploymentAudit(trees)
    offset, leaves = 0, []
    for stream, size in entries:
        note, headers = _entry(stream, size, salt)
        deploy.add_message(offset, note, headers)
        leaves.append(leaf_hash(note))
        offset += 1
        if len(leaves) in signed_at:
            cr = CompactRange()
            cr.extend(leaves)
            _t, cp = sign_checkpoint(LOG, len(leaves), cr.root())
            deploy.add_message(offset, cp, [(KIND_HEADER, KIND_LOG_CHECKPOINT.encode())])
            offset += 1
    return trees, deploy


def _feed_log(trees: TreeAudit, rewritten: str | None = None) -> None:
    for stream, top in (("a", 5), ("b", 4)):
        for seq in range(1, top + 1):
            salt = " rewritten" if stream == rewritten else ""
            trees.add_record(stream, seq, *_record(stream, seq, salt))


def test_an_honest_tree_and_log_have_no_finding():
    trees, deploy = _audit()
    assert deploy.size == 5 and deploy.latest_signed().size == 5
    _feed_log(trees)
    assert trees.finish() == []
    assert trees.summary()["deployment"]["latest_signed_size"] == 5


def test_a_stream_rewritten_in_the_log_shows_against_its_entries():
    trees, deploy = _audit()
    deploy.witnessed(3, "witness w", ["witness.test/w"])
    _feed_log(trees, rewritten="a")
    kinds = {(f.kind, f.stream, f.seq) for f in trees.finish()}
    # Entries 0 and 2 (sizes 1, 3 of stream a) are below the witnessed size: rewritten since
    # witnessed; entry 4 (size 5) only contradicts what the log signed.
    assert kinds == {(REWRITTEN_SINCE_WITNESSED, "a", 1), (REWRITTEN_SINCE_WITNESSED, "a", 3),
                     (CHECKPOINT_MISMATCH, "a", 5)}


def test_a_signed_deployment_checkpoint_that_is_not_the_entries_tree():
    trees, deploy = _audit(signed_at=())
    _t, bad = sign_checkpoint(LOG, 4, b"\x07" * 32)
    deploy.add_message(99, bad, [(KIND_HEADER, KIND_LOG_CHECKPOINT.encode())])
    _t, beyond = sign_checkpoint(LOG, 9, b"\x07" * 32)
    deploy.add_message(100, beyond, [(KIND_HEADER, KIND_LOG_CHECKPOINT.encode())])
    assert deploy.latest_signed() is None  # never shown to a witness
    _feed_log(trees)
    found = [(f.kind, f.stream, f.seq) for f in trees.finish()]
    assert sorted(found) == [(CHECKPOINT_MISMATCH, None, 4), (CHECKPOINT_MISMATCH, None, 9)]


class _SpecWitness:
    """A tlog-witness over one origin: holds (size, root), checks ``old`` and the proof."""

    def __init__(self, size: int = 0, root: bytes | None = None, busy: int = 0) -> None:
        self.size, self.root, self.busy, self.calls = size, root, busy, []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        head, _, note = request.content.partition(b"\n\n")
        lines = head.decode().split("\n")
        old = int(lines[0].removeprefix("old "))
        proof = [base64.b64decode(x) for x in lines[1:] if x]
        text = parse_note(note).text
        cp = parse_checkpoint(text)
        self.calls.append(old)
        if self.busy:
            self.busy -= 1
            return httpx.Response(503, headers={"retry-after": "0"})
        if old != self.size:
            return httpx.Response(409, content=f"{self.size}\n",
                                  headers={"content-type": "text/x.tlog.size"})
        if old:
            try:
                verify_consistency(old, cp.size, proof, self.root, cp.root_hash)
            except ProofError as e:
                return httpx.Response(422, content=str(e))
        self.size, self.root = cp.size, cp.root_hash
        signed = format_note(text, [sign(W, text, 1_700_000_000)]).decode()
        return httpx.Response(200, content=signed.removeprefix(text + "\n"))


def _client(witness) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(witness))


def test_the_exchange_learns_the_size_then_sends_the_proof_and_is_cosigned():
    trees, deploy = _audit()
    first = deploy.tree().root(3)
    w = _SpecWitness(3, first)
    said = ask_witness(deploy, "http://w", [W.verifier], _client(w))
    assert said["outcome"] == "cosigned" and said["old"] == 3 and said["size"] == 5
    assert w.calls == [0, 3] and w.size == 5
    assert deploy.witnessed_by == [{"source": "witness http://w", "size": 5,
                                    "cosigners": [W.name]}]


def test_a_witness_that_saw_another_tree_refuses_it():
    trees, deploy = _audit()
    w = _SpecWitness(3, b"\x01" * 32)  # it cosigned another history at size 3
    said = ask_witness(deploy, "http://w", [W.verifier], _client(w))
    assert said["outcome"] == "refused"
    [f] = deploy.findings
    assert f.kind == WITNESS_REFUSED and "not an extension" in f.detail


def test_a_witness_holding_more_than_the_log_signed_is_a_rollback_after_catching_up():
    trees, deploy = _audit()
    w = _SpecWitness(9, b"\x01" * 32)
    caught = []
    said = ask_witness(deploy, "http://w", [W.verifier], _client(w),
                       catch_up=lambda: caught.append(1))
    assert caught == [1]  # it may only be ahead of this read: read on first
    assert said["outcome"] == "refused" and said["holds"] == 9
    assert "went back" in deploy.findings[0].detail


def test_a_busy_witness_is_asked_again_and_a_wrong_key_is_an_error():
    trees, deploy = _audit()
    w = _SpecWitness(0, None, busy=1)
    said = ask_witness(deploy, "http://w", [W.verifier], _client(w))
    assert said["outcome"] == "cosigned" and said["old"] == 0
    other = SignerKey("witness.test/other", SIG_COSIGNATURE_V1, b"\x05" * 32)
    with pytest.raises(AuditError, match="no cosignature in its answer verifies"):
        ask_witness(deploy, "http://w", [other.verifier],
                    _client(_SpecWitness(0, None)))


def test_no_signed_checkpoint_yet_is_said_not_guessed():
    trees, deploy = _audit(signed_at=())
    said = ask_witness(deploy, "http://w", [], _client(_SpecWitness()))
    assert said["outcome"] == "no_checkpoint" and "5 entries" in said["detail"]
