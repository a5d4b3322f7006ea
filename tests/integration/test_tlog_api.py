"""The verifiable log end to end: the real writer signs checkpoints, the projector folds them
with the records' Merkle trees, the API serves checkpoints and proofs, and each is verified
with the contract's verifiers, by `evidence prove`, and by the independent Go verifier.

Also: a checkpoint whose root is not the records' is a finding (never a crash), a checkpoint
read before its records waits for them, a witness's cosignature goes through Kafka and comes
back served with the checkpoint, and a rebuild compares the trees' roots.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import time

import psycopg
import pytest

from evidence_contract.merkle import (
    MerkleTree, leaf_hash, leaf_input, record_leaf_hash, verify_consistency, verify_inclusion,
)
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, Checkpoint, SignerKey, format_checkpoint, format_note, format_vkey,
    open_note, sign,
)
from evidence_contract.tlog import checkpoint_origin, open_stream_checkpoint
from evidence_contract.topics import partition_for
from tests.fixtures.log import wait_until
from tests.fixtures.writer import log_signing_key, make_capture, produce_captures
from tests.integration.test_tlog_go_verifier import _run, tlogverify  # noqa: F401 - fixture

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

WITNESS = SignerKey("witness.test/w1", SIG_COSIGNATURE_V1, hashlib.sha256(b"tlog api w1").digest())
FAST = {"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.3"}


def _checkpoint(p, stream, size=None):
    r = p.api.get(f"/streams/{stream}/checkpoint",
                  params=None if size is None else {"tree_size": size})
    return r


def _wait_checkpoint(p, stream, size, timeout=30.0):
    def ready():
        r = _checkpoint(p, stream)
        return r.status_code == 200 and int(r.content.split(b"\n")[1]) >= size

    wait_until(f"a checkpoint of {stream} at size {size}", ready, timeout, 0.1)
    r = _checkpoint(p, stream, size)
    assert r.status_code == 200, r.text
    return r.content


def _records(p, stream):
    out, after = [], 0
    while True:
        page = p.api.get(f"/streams/{stream}/records",
                         params={"include": "bytes", "after_seq": after}).json()
        out += [base64.b64decode(r["record_b64"]) for r in page["records"]]
        if page["next_after_seq"] is None:
            return out
        after = page["next_after_seq"]


def _hex(hs):
    return [bytes.fromhex(h) for h in hs]


def _produce_checkpoint(p, stream, value, kind=b"checkpoint"):
    from confluent_kafka import Producer

    prod = Producer({"bootstrap.servers": p.projection.bootstrap})
    prod.produce(p.topics.names.checkpoints, value=value, key=stream.encode(),
                 partition=partition_for(stream, p.topics.partitions),
                 headers=[("evidence-kind", kind), ("evidence-stream", stream.encode())])
    assert prod.flush(10) == 0


def _findings(p, stream):
    return p.api.get(f"/streams/{stream}").json()["findings"]


def test_checkpoints_and_proofs_from_the_api_verify(make_pipeline, kafka_bootstrap):
    p = make_pipeline(partitions=2, env=FAST, api_options={"witness_keys": (WITNESS.verifier,)})
    log_key = log_signing_key()[0].verifier
    stream = "tl:a"
    produce_captures(kafka_bootstrap, p.topics, (make_capture(stream) for _ in range(37)))
    p.wait_records(stream, 37)
    note37 = _wait_checkpoint(p, stream, 37)
    cp37, opened, named = open_stream_checkpoint(note37, log_key, stream)
    assert named == stream and cp37.origin == checkpoint_origin(log_key.name, stream)
    records = _records(p, stream)
    tree = MerkleTree([record_leaf_hash(r) for r in records])
    assert cp37.root_hash == tree.root(37)

    for seq in range(1, 38):
        proof = p.api.get(f"/streams/{stream}/proof/inclusion",
                          params={"seq": seq, "tree_size": 37}).json()
        assert proof["leaf_hash"] == record_leaf_hash(records[seq - 1]).hex()
        verify_inclusion(seq - 1, 37, bytes.fromhex(proof["leaf_hash"]), _hex(proof["hashes"]),
                         cp37.root_hash)

    produce_captures(kafka_bootstrap, p.topics, (make_capture(stream) for _ in range(10)))
    note47 = _wait_checkpoint(p, stream, 47)
    cp47, _, _ = open_stream_checkpoint(note47, log_key, stream)
    assert _checkpoint(p, stream, 37).content == note37  # byte-exact, and kept
    for first in (1, 5, 32, 37, 47):
        proof = p.api.get(f"/streams/{stream}/proof/consistency",
                          params={"first": first, "second": 47}).json()
        verify_consistency(first, 47, _hex(proof["hashes"]),
                           open_stream_checkpoint(_checkpoint(p, stream, first).content, log_key)
                           [0].root_hash if first in (37, 47) else MerkleTree(
                               [record_leaf_hash(r) for r in _records(p, stream)]).root(first),
                           cp47.root_hash)
    assert p.api.get(f"/streams/{stream}/proof/inclusion?seq=1").json()["tree_size"] == 47

    for path, params in (("inclusion", {"seq": 48}), ("inclusion", {"seq": 1, "tree_size": 99}),
                         ("consistency", {"first": 9, "second": 8}),
                         ("consistency", {"first": 1, "second": 48})):
        r = p.api.get(f"/streams/{stream}/proof/{path}", params=params)
        assert r.status_code == 422 and r.json()["message"], r.text
    assert p.api.get("/streams/tl:none/proof/inclusion?seq=1").status_code == 404
    assert not [f for f in _findings(p, stream) if f["kind"].startswith("checkpoint")]

    # evidence checkpoint and evidence prove, as a user runs them
    env = p.env()
    run = lambda *a: subprocess.run([sys.executable, "-m", "cli.main", *a], env=env,  # noqa: E731
                                    capture_output=True, timeout=60)
    out = run("checkpoint", stream)
    assert out.returncode == 0 and out.stdout == note47, out.stderr
    out = run("prove", stream, "--seq", "5", "--tree-size", "37")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["root"] == cp37.root_hash.hex()
    out = run("prove", stream, "--consistency", "37", "47")
    assert out.returncode == 0 and json.loads(out.stdout)["verified"] is True, out.stderr
    assert run("prove", stream, "--consistency", "30", "47").returncode == 1  # no checkpoint 30
    assert run("prove", stream, "--seq", "0").returncode == 2

    # a witness cosigns; the log takes it through Kafka and serves it with the checkpoint
    text = open_note(note47, [log_key]).text
    cosigned = note47 + sign(WITNESS, text, timestamp=int(time.time())).line().encode()
    r = p.api.post(f"/streams/{stream}/checkpoint/cosignatures", content=cosigned,
                   headers={"content-type": "text/plain"})
    assert r.status_code == 202, r.text

    def served():
        return _checkpoint(p, stream, 47).content == cosigned

    wait_until("the cosignature served with its checkpoint", served, 30, 0.1)
    assert len(open_note(_checkpoint(p, stream, 47).content,
                         [log_key, WITNESS.verifier]).verified) == 2
    stranger = note47 + sign(SignerKey("witness.test/w1", SIG_COSIGNATURE_V1, b"\x09" * 32),
                             text, timestamp=1).line().encode()  # same name, another key
    line = sign(WITNESS, text, timestamp=2).line()
    raw = bytearray(base64.b64decode(line.rsplit(" ", 1)[1]))
    raw[-1] ^= 1
    forged = note47 + (line.rsplit(" ", 1)[0] + " " + base64.b64encode(raw).decode() + "\n").encode()
    for body, status in ((stranger, 403), (forged, 422)):
        r = p.api.post(f"/streams/{stream}/checkpoint/cosignatures", content=body,
                       headers={"content-type": "text/plain"})
        assert r.status_code == status and r.json()["message"], r.text


def test_the_go_verifier_checks_proofs_fetched_from_the_api(make_pipeline, kafka_bootstrap,
                                                            tlogverify, tmp_path):  # noqa: F811
    p = make_pipeline(env=FAST, api_options={"witness_keys": (WITNESS.verifier,)})
    log_key = log_signing_key()[0].verifier
    stream = "tl:go"
    produce_captures(kafka_bootstrap, p.topics, (make_capture(stream) for _ in range(23)))
    p.wait_records(stream, 23)
    note = _wait_checkpoint(p, stream, 23)
    text = open_note(note, [log_key]).text
    cosigned = note + sign(WITNESS, text, timestamp=1_700_000_000).line().encode()
    assert p.api.post(f"/streams/{stream}/checkpoint/cosignatures", content=cosigned,
                      headers={"content-type": "text/plain"}).status_code == 202
    wait_until("the cosignature served", lambda: _checkpoint(p, stream).content == cosigned, 30)
    records = _records(p, stream)
    inputs = [leaf_input(r) for r in records]
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    inclusion, consistency = [], []
    for seq in range(1, 24):
        pr = p.api.get(f"/streams/{stream}/proof/inclusion", params={"seq": seq}).json()
        inclusion.append({"index": pr["leaf_index"], "size": pr["tree_size"],
                          "leaf_hash": b64(bytes.fromhex(pr["leaf_hash"])),
                          "root": b64(open_stream_checkpoint(note, log_key)[0].root_hash),
                          "proof": [b64(h) for h in _hex(pr["hashes"])]})
    tree = MerkleTree([leaf_hash(li) for li in inputs])
    for first in range(1, 24):
        pr = p.api.get(f"/streams/{stream}/proof/consistency",
                       params={"first": first, "second": 23}).json()
        consistency.append({"first": first, "second": 23, "first_root": b64(tree.root(first)),
                            "second_root": b64(tree.root(23)),
                            "proof": [b64(h) for h in _hex(pr["hashes"])]})
    doc = {"origin": checkpoint_origin(log_key.name, stream), "log_vkey": format_vkey(log_key),
           "cosigner_vkey": format_vkey(WITNESS.verifier),
           "checkpoint": _checkpoint(p, stream).text,
           "leaf_inputs": [b64(li) for li in inputs],
           "leaf_hashes": [b64(leaf_hash(li)) for li in inputs],
           "records": [b64(r) for r in records], "inclusion": inclusion,
           "consistency": consistency}
    rc, out = _run(tlogverify, doc, tmp_path)
    assert rc == 0, out
    assert json.loads(out.strip().splitlines()[-1]) == {
        "ok": True, "origin": doc["origin"], "size": 23, "signatures": 2, "inclusion": 23,
        "consistency": 23}


def test_a_checkpoint_with_another_root_is_a_finding_and_one_ahead_of_its_records_waits(
        make_pipeline, kafka_bootstrap):
    p = make_pipeline(signing=False)  # only the checkpoints this test signs
    key = log_signing_key()[0]
    stream = "tl:forged"

    def signed(size, root):
        text = format_checkpoint(Checkpoint(checkpoint_origin(key.name, stream), size, root))
        return format_note(text, [sign(key, text)])

    # Ahead of the records: checked once the tree reaches its size.
    records = [make_capture(stream) for _ in range(6)]
    _produce_checkpoint(p, stream, b"not a note at all")
    produce_captures(kafka_bootstrap, p.topics, records[:2])
    p.wait_records(stream, 2)
    first2 = MerkleTree([record_leaf_hash(r) for r in _records(p, stream)]).root(2)
    _produce_checkpoint(p, stream, signed(2, first2))
    _produce_checkpoint(p, stream, signed(4, b"\x07" * 32))     # a root the records do not give
    wait_until("both checkpoints projected", lambda: _checkpoint(p, stream, 4).status_code == 200, 30)
    assert not [f for f in _findings(p, stream) if f["kind"] == "checkpoint_mismatch"]
    produce_captures(kafka_bootstrap, p.topics, records[2:])
    p.wait_records(stream, 6)

    def mismatch():
        return [f for f in _findings(p, stream) if f["kind"] == "checkpoint_mismatch"]

    wait_until("the mismatch found", mismatch, 30, 0.1)
    (f,) = mismatch()
    assert f["seq"] == 4 and "07070707" in f["detail"] and f["log_partition"] is None
    with psycopg.connect(p.projection.database_url, autocommit=True) as conn:
        verdicts = dict(conn.execute(
            f'select tree_size, root_matches from "{p.projection.views_schema}".checkpoints '
            f"where stream = %s", (stream,)).fetchall())
        invalid = conn.execute(
            f'select count(*) from "{p.projection.views_schema}".findings '
            f"where kind = 'checkpoint_invalid'").fetchone()[0]
    assert verdicts == {2: True, 4: False} and invalid == 1
    # The projector lives on: later records are projected.
    produce_captures(kafka_bootstrap, p.topics, [make_capture(stream)])
    p.wait_records(stream, 7)
    # A proof against the forged checkpoint verifies against the records' tree, not its root.
    pr = p.api.get(f"/streams/{stream}/proof/inclusion", params={"seq": 1}).json()
    assert pr["tree_size"] == 4
    with pytest.raises(Exception):
        verify_inclusion(0, 4, bytes.fromhex(pr["leaf_hash"]), _hex(pr["hashes"]), b"\x07" * 32)


def test_a_rebuild_compares_tree_roots(make_pipeline, kafka_bootstrap):
    from projections.errors import RebuildMismatch
    from projections.rebuild import rebuild

    p = make_pipeline(partitions=2, env=FAST)
    streams = ["tl:r1", "tl:r2", "tl:r3"]
    produce_captures(kafka_bootstrap, p.topics, (make_capture(streams[i % 3]) for i in range(60)))
    for s in streams:
        p.wait_records(s, 20)
        _wait_checkpoint(p, s, 20)
    cfg = p.projection
    result = rebuild(cfg)
    assert result.previous and result.generation != result.previous
    for s in streams:  # the new generation serves the same checkpoints and proofs
        assert _checkpoint(p, s, 20).status_code == 200
        assert p.api.get(f"/streams/{s}/proof/inclusion?seq=20").status_code == 200
    # A tree node altered in the live generation: the next rebuild refuses to swap.
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        conn.execute(f'update "{result.generation}".tree_nodes set hash = %s '
                     f"where stream = 'tl:r2' and level = 4 and idx = 0", (b"\x01" * 32,))
    with pytest.raises(RebuildMismatch) as e:
        rebuild(cfg)
    assert any(d.startswith("tree tl:r2 at size 20") for d in e.value.differences), \
        e.value.differences


def test_evidence_checkpoint_issue_asks_the_writer_and_waits(make_pipeline, kafka_bootstrap):
    p = make_pipeline(env={"EVIDENCE_CHECKPOINT_INTERVAL_S": "3600"})
    stream = "tl:issue"
    produce_captures(kafka_bootstrap, p.topics, (make_capture(stream) for _ in range(5)))
    # A checkpoint the writer issues by itself commits with the records it covers (and the
    # next is an hour away): whatever it issues for these is there with them.
    p.wait_records(stream, 5)
    produce_captures(kafka_bootstrap, p.topics, (make_capture(stream) for _ in range(3)))
    p.wait_records(stream, 8)
    before = _checkpoint(p, stream)
    assert before.status_code == 404 or int(before.content.split(b"\n")[1]) < 8
    out = subprocess.run([sys.executable, "-m", "cli.main", "checkpoint", stream, "--issue"],
                         env=p.env(), capture_output=True, timeout=90)
    assert out.returncode == 0, out.stderr
    cp, _, _ = open_stream_checkpoint(out.stdout, log_signing_key()[0].verifier, stream)
    assert cp.size == 8 and out.stdout == _checkpoint(p, stream).content
