"""The witness against a fake log (httpx MockTransport): cosigns what extends what it cosigned,
refuses the rest on record, keeps its state, and speaks the C2SP tlog-witness push API."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import httpx
import pytest

from evidence_contract.merkle import MerkleTree, leaf_hash
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, Checkpoint, SignerKey, format_checkpoint, format_note, format_skey,
    open_note, parse_note, sign,
)
from evidence_contract.tlog import DEFAULT_LOG_NAME, checkpoint_origin
from witness import Witness, WitnessConfig, WitnessError, keygen, load_key
from witness.core import (
    INCONSISTENT, ROOT_CHANGED, SMALLER, BAD_SIGNATURE, parse_add_checkpoint,
)

STREAM = "acme:chat"
ORIGIN = checkpoint_origin(DEFAULT_LOG_NAME, STREAM)
LOG = SignerKey(DEFAULT_LOG_NAME, 1, hashlib.sha256(b"log").digest())
OTHER_LOG = SignerKey(DEFAULT_LOG_NAME, 1, hashlib.sha256(b"not the log").digest())
W1 = SignerKey("witness.test/w1", SIG_COSIGNATURE_V1, hashlib.sha256(b"w1").digest())


class FakeLog:
    """Serves a stream's checkpoint and proofs over ``leaves``; takes cosignatures."""

    def __init__(self, leaves: list[bytes], signer: SignerKey = LOG) -> None:
        self.leaves, self.signer = leaves, signer
        self.submitted: list[bytes] = []
        self.served_extra = b""

    def note(self, size: int | None = None) -> bytes:
        tree = MerkleTree(self.leaves)
        size = tree.size if size is None else size
        text = format_checkpoint(Checkpoint(ORIGIN, size, tree.root(size)))
        return format_note(text, [sign(self.signer, text)]) + self.served_extra

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == f"/streams/{STREAM}/checkpoint":
            if not self.leaves:
                return httpx.Response(404, json={"message": "none"})
            return httpx.Response(200, content=self.note())
        if path == f"/streams/{STREAM}/proof/consistency":
            a, b = int(request.url.params["first"]), int(request.url.params["second"])
            tree = MerkleTree(self.leaves)
            if b > tree.size or a > b:
                return httpx.Response(422, json={"message": "bad sizes"})
            return httpx.Response(200, json={"first": a, "second": b, "tree_size": b,
                                             "hashes": [h.hex() for h in
                                                        tree.consistency_proof(a, b)]})
        if path == f"/streams/{STREAM}/checkpoint/cosignatures":
            self.submitted.append(request.content)
            return httpx.Response(202, json={})
        return httpx.Response(404)


def _leaves(n: int, label: bytes = b"record") -> list[bytes]:
    return [leaf_hash(label + b" %d" % i) for i in range(n)]


def _witness(tmp_path: Path, log: FakeLog, name: str = "w") -> Witness:
    w = Witness(WitnessConfig(key=W1, log_key=LOG.verifier, state_dir=tmp_path / name,
                              log_url="http://log", streams=[STREAM]))
    w._client = httpx.Client(base_url="http://log", transport=httpx.MockTransport(log.handle))
    return w


def test_cosigns_on_first_use_then_only_consistent_growth(tmp_path):
    log = FakeLog(_leaves(5))
    w = _witness(tmp_path, log)
    assert w.follow(STREAM) == "cosigned"
    kept = w.checkpoint(ORIGIN)
    assert log.submitted == [kept]
    opened = open_note(kept, [LOG.verifier, W1.verifier])
    assert len(opened.verified) == 2 and len(opened.signatures) == 2
    assert w.follow(STREAM) == "unchanged"  # served without our cosignature: submitted again
    assert len(log.submitted) == 2
    log.served_extra = next(s for s in parse_note(kept).signatures if s.name == W1.name) \
        .line().encode()
    assert w.follow(STREAM) == "unchanged" and len(log.submitted) == 2
    log.served_extra = b""
    log.leaves += _leaves(12)[5:]
    assert w.follow(STREAM) == "cosigned"
    assert w.state.load(ORIGIN).size == 12
    assert w.refusals() == []


@pytest.mark.parametrize("attack, kind", [
    ("rewrite_larger", INCONSISTENT), ("rewrite_same_size", ROOT_CHANGED),
    ("truncate", SMALLER), ("other_key", BAD_SIGNATURE)])
def test_refuses_loudly_keeps_state_and_records_why(tmp_path, caplog, attack, kind):
    log = FakeLog(_leaves(8))
    w = _witness(tmp_path, log)
    assert w.follow(STREAM) == "cosigned"
    before = w.checkpoint(ORIGIN)
    if attack == "rewrite_larger":
        log.leaves = _leaves(11, b"rewritten")
    elif attack == "rewrite_same_size":
        log.leaves = _leaves(8, b"rewritten")
    elif attack == "truncate":
        log.leaves = log.leaves[:6]
    else:
        log.signer = OTHER_LOG
        log.leaves = log.leaves + _leaves(9)[8:]
    submitted = len(log.submitted)
    with caplog.at_level("ERROR", logger="evidence.witness"):
        assert w.follow(STREAM) == "refused"
        assert w.follow(STREAM) == "refused"  # recorded once
    assert w.checkpoint(ORIGIN) == before and len(log.submitted) == submitted
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and errors[0].getMessage() == "checkpoint_refused"
    (refusal,) = w.refusals()
    assert refusal["kind"] == kind and refusal["reason"] and refusal["origin"] == ORIGIN
    assert refusal["log_signed"] is (kind != BAD_SIGNATURE)
    assert refusal["last_cosigned"]["size"] == 8
    assert refusal["note"].encode() == log.note()
    lines = (tmp_path / "w" / "refusals.jsonl").read_text().splitlines()
    assert [json.loads(x)["kind"] for x in lines] == [kind]
    # a new process over the same state directory still refuses, and does not record it again
    again = _witness(tmp_path, log)
    assert again.follow(STREAM) == "refused" and len(again.refusals()) == 1


def test_state_survives_a_restart_and_writes_atomically(tmp_path):
    log = FakeLog(_leaves(3))
    w = _witness(tmp_path, log)
    w.follow(STREAM)
    files = os.listdir(tmp_path / "w" / "checkpoints")
    assert files == ["evidence-store.local%2Flog%2Facme%3Achat"]  # no temporary file left
    log.leaves = _leaves(3, b"rewritten")
    assert _witness(tmp_path, log).follow(STREAM) == "refused"


def test_the_key_file_is_0600_and_of_the_cosignature_type(tmp_path):
    key = keygen("witness.test/kg", tmp_path / "kg.skey")
    assert os.stat(tmp_path / "kg.skey").st_mode & 0o777 == 0o600
    assert load_key(tmp_path / "kg.skey") == key
    assert (tmp_path / "kg.skey.vkey").read_text().startswith("witness.test/kg+")
    with pytest.raises(WitnessError, match="never overwritten"):
        keygen("witness.test/kg", tmp_path / "kg.skey")
    os.chmod(tmp_path / "kg.skey", 0o644)
    with pytest.raises(WitnessError, match="readable by others"):
        load_key(tmp_path / "kg.skey")
    plain = tmp_path / "plain.skey"
    plain.write_text(format_skey(LOG) + "\n")
    os.chmod(plain, 0o600)
    with pytest.raises(WitnessError, match="cosignature/v1"):
        load_key(plain)


def _body(old: int, proof: list[bytes], note: bytes) -> bytes:
    lines = [f"old {old}"] + [base64.b64encode(p).decode() for p in proof]
    return ("\n".join(lines) + "\n\n").encode() + note


def test_add_checkpoint_speaks_the_tlog_witness_protocol(tmp_path):
    log = FakeLog(_leaves(20))
    w = _witness(tmp_path, log)
    tree = MerkleTree(log.leaves)
    a = w.add_checkpoint(_body(0, [], log.note(7)))
    assert a.status == 200, a.body
    line = a.body.decode()
    assert line.startswith("\u2014 witness.test/w1 ") and line.endswith("\n")
    note7 = log.note(7)
    assert len(open_note(note7 + a.body, [LOG.verifier, W1.verifier]).verified) == 2
    stale = w.add_checkpoint(_body(0, [], log.note(9)))
    assert (stale.status, stale.body, stale.content_type) == (409, b"7\n", "text/x.tlog.size")
    bad = w.add_checkpoint(_body(7, [bytes(32)] * 3, log.note(20)))
    assert bad.status == 422 and w.refusals()[0]["kind"] == INCONSISTENT
    good = w.add_checkpoint(_body(7, tree.consistency_proof(7, 20), log.note(20)))
    assert good.status == 200 and w.state.load(ORIGIN).size == 20
    assert w.add_checkpoint(_body(20, [], log.note(20))).status == 200  # idempotent
    assert w.add_checkpoint(_body(21, [], log.note(20))).status == 400  # old above size
    assert w.add_checkpoint(b"old 1\nnot base64!\n\n" + log.note(20)).status == 400
    assert w.add_checkpoint(_body(20, [], FakeLog(log.leaves, OTHER_LOG).note())).status == 403
    text = format_checkpoint(Checkpoint("another.log/x", 1, bytes(32)))
    assert w.add_checkpoint(_body(0, [], format_note(text, [sign(LOG, text)]))).status == 404
    rewritten = FakeLog(_leaves(20, b"rewritten"))
    assert w.add_checkpoint(_body(20, [], rewritten.note())).status == 422  # same size, new root


def test_the_http_endpoint_serves_checkpoints_refusals_and_add_checkpoint(tmp_path):
    log = FakeLog(_leaves(4))
    w = _witness(tmp_path, log)
    w.follow(STREAM)
    host, port = w.serve()
    try:
        with httpx.Client(base_url=f"http://{host}:{port}") as c:
            r = c.get(f"/checkpoints/{ORIGIN}")
            assert r.status_code == 200 and r.content == w.checkpoint(ORIGIN)
            assert c.get("/checkpoints/nope/x").status_code == 404
            assert c.get("/checkpoints").json() == {"origins": [ORIGIN]}
            assert c.get("/refusals").json()["refusals"] == []
            r = c.post("/add-checkpoint", content=_body(3, [], log.note(4)))
            assert r.status_code == 409 and r.text == "4\n"
            assert r.headers["content-type"] == "text/x.tlog.size"
            assert c.post("/add-checkpoint", content=b"x" * 20000).status_code == 413
    finally:
        w.close()


def test_parse_add_checkpoint_is_strict():
    req = parse_add_checkpoint(b"old 3\n" + base64.b64encode(bytes(32)) + b"\n\nnote\n")
    assert (req.old_size, req.proof, req.checkpoint) == (3, [bytes(32)], b"note\n")
    for body in (b"old 03\n\nx", b"old 3\nx", b"new 3\n\nx", b"old 3\n\n",
                 b"old 3\n" + base64.b64encode(bytes(31)) + b"\n\nx"):
        with pytest.raises(ValueError):
            parse_add_checkpoint(body)


def _deployment_note(leaves: list[bytes], size: int, signer: SignerKey = LOG,
                     extensions: tuple[str, ...] = ()) -> bytes:
    # The publisher's checkpoint: origin = the log key's name, the tree of stream checkpoints.
    tree = MerkleTree(leaves)
    text = format_checkpoint(Checkpoint(signer.name, size, tree.root(size), extensions))
    return format_note(text, [sign(signer, text)])


def test_add_checkpoint_takes_the_deployment_origin_beside_the_streams(tmp_path):
    from evidence_contract.tlog import open_log_checkpoint

    w = _witness(tmp_path, FakeLog(_leaves(20)))
    leaves = _leaves(12, b"stream checkpoint")
    tree = MerkleTree(leaves)
    first = w.add_checkpoint(_body(0, [], _deployment_note(leaves, 5)))
    assert first.status == 200, first.body
    cp, note = open_log_checkpoint(_deployment_note(leaves, 5) + first.body, LOG.verifier,
                                   [W1.verifier])
    assert cp.origin == DEFAULT_LOG_NAME and len(note.verified) == 2
    assert w.add_checkpoint(_body(0, [], _deployment_note(leaves, 9))).body == b"5\n"
    good = w.add_checkpoint(_body(5, tree.consistency_proof(5, 9), _deployment_note(leaves, 9)))
    assert good.status == 200 and w.state.load(DEFAULT_LOG_NAME).size == 9
    fork = w.add_checkpoint(_body(9, [], _deployment_note(_leaves(12, b"forged"), 9)))
    assert fork.status == 422 and w.refusals()[-1]["kind"] == ROOT_CHANGED
    assert w.refusals()[-1]["origin"] == DEFAULT_LOG_NAME and w.refusals()[-1]["stream"] is None
    assert w.add_checkpoint(_body(9, [], _deployment_note(leaves, 9, OTHER_LOG))).status == 403
    with_ext = w.add_checkpoint(_body(9, [], _deployment_note(leaves, 9, extensions=("x",))))
    assert with_ext.status == 403
    # The streams' origins are still followed, each on its own.
    log = FakeLog(_leaves(20))
    assert w.add_checkpoint(_body(0, [], log.note(7))).status == 200
    assert sorted(w.state.origins()) == sorted([DEFAULT_LOG_NAME, ORIGIN])


def test_an_mldsa44_witness_cosigns_and_its_key_file_loads(tmp_path):
    from evidence_contract.note import SIG_MLDSA44, parse_vkey

    key = keygen("witness.test/pq", tmp_path / "pq.skey", SIG_MLDSA44)
    assert load_key(tmp_path / "pq.skey") == key
    vkey = parse_vkey((tmp_path / "pq.skey.vkey").read_text().strip())
    assert vkey == key.verifier and vkey.sig_type == SIG_MLDSA44
    w = Witness(WitnessConfig(key=key, log_key=LOG.verifier, state_dir=tmp_path / "pqstate"))
    note = _deployment_note(_leaves(4), 4)
    a = w.add_checkpoint(_body(0, [], note))
    assert a.status == 200, a.body
    assert len(open_note(note + a.body, [LOG.verifier, vkey]).verified) == 2
    with pytest.raises(WitnessError, match="cosignature key"):
        keygen("witness.test/plain", tmp_path / "plain2.skey", 0x01)
