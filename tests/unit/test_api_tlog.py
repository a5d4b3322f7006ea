"""The verifiable log's routes alone (api.routers.tlog): a fake read model, a fake producer."""

from __future__ import annotations

import hashlib

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api import Keyring, Settings
from api.deps import get_db
from api.errors import Unavailable
from api.routers import tlog
from evidence_contract.merkle import CompactRange, leaf_hash, verify_consistency, verify_inclusion
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, Checkpoint, SignerKey, format_checkpoint, format_note, format_vkey,
    open_note, sign,
)
from evidence_contract.tlog import DEFAULT_LOG_NAME, checkpoint_origin

KEY = "acme-key-0123456789abcdef0123456789"
STREAM = "acme:chat"
LOG = SignerKey(DEFAULT_LOG_NAME, 1, hashlib.sha256(b"log").digest())
WITNESS = SignerKey("witness.example/w1", SIG_COSIGNATURE_V1, hashlib.sha256(b"w1").digest())
STRANGER = SignerKey("witness.example/w9", SIG_COSIGNATURE_V1, hashlib.sha256(b"w9").digest())
LEAVES = [leaf_hash(b"record %d" % i) for i in range(21)]


def _note(size: int, root: bytes | None = None) -> tuple[str, bytes]:
    text = format_checkpoint(Checkpoint(checkpoint_origin(DEFAULT_LOG_NAME, STREAM), size,
                                        root or _root(size)))
    return text, format_note(text, [sign(LOG, text)])


def _root(size: int) -> bytes:
    cr = CompactRange()
    cr.extend(LEAVES[:size])
    return cr.root()


class FakeDb:
    def __init__(self, sizes=(7, 13), tree_size=21):
        cr = CompactRange()
        self.table = {(lv, i): h for lv, i, h in cr.extend_nodes(LEAVES[:tree_size])}
        self.tree_size = tree_size
        self.checkpoints = {n: (n, _root(n), _note(n)[1]) for n in sizes}
        self.cosigs: dict[int, list[str]] = {}
        self.node_queries = []

    async def checkpoint(self, stream, tree_size, max_cosignatures):
        if stream != STREAM or not self.checkpoints:
            return None, []
        size = max(self.checkpoints) if tree_size is None else tree_size
        cp = self.checkpoints.get(size)
        return cp, ([] if cp is None else self.cosigs.get(size, [])[:max_cosignatures])

    async def tree(self, stream):
        return (self.tree_size, _root(self.tree_size)) if stream == STREAM else None

    async def nodes(self, stream, wanted):
        self.node_queries.append(list(wanted))
        return {w: self.table[w] for w in wanted if w in self.table}


class FakeProducer:
    def __init__(self, fail=False):
        self.sent, self.fail = [], fail

    async def produce(self, stream, value, headers):
        if self.fail:
            raise Unavailable("Kafka did not take the message (test)", retry_after=5)
        self.sent.append((stream, value, dict(headers)))


def client_for(db, producer=None, **settings):
    app = FastAPI()
    from api.app import _api_error
    from api.errors import ApiError

    app.add_exception_handler(ApiError, _api_error)
    app.state.settings = Settings("postgresql://unused/unused",
                                  Keyring([("acme", KEY, ["acme:*"])]),
                                  **{"log_key": LOG.verifier,
                                     "witness_keys": (WITNESS.verifier,), **settings})
    app.state.producer = producer or FakeProducer()
    app.dependency_overrides[get_db] = lambda: db
    app.include_router(tlog.router)
    return TestClient(app, headers={"Authorization": f"Bearer {KEY}"},
                      raise_server_exceptions=False)


def test_checkpoint_is_the_note_then_its_cosignatures_byte_exact():
    db = FakeDb()
    text, note = _note(13)
    line = sign(WITNESS, text, timestamp=1_700_000_000).line()
    db.cosigs[13] = [line]
    r = client_for(db).get(f"/streams/{STREAM}/checkpoint")
    assert r.status_code == 200 and r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.content == note + line.encode()
    opened = open_note(r.content, [LOG.verifier, WITNESS.verifier])
    assert len(opened.verified) == 2
    assert client_for(db).get(f"/streams/{STREAM}/checkpoint?tree_size=7").content == _note(7)[1]
    assert client_for(db).get(f"/streams/{STREAM}/checkpoint?tree_size=8").status_code == 404


@pytest.mark.parametrize("path", ["/streams/other:x/checkpoint",
                                  "/streams/other:x/proof/inclusion?seq=1",
                                  "/streams/other:x/proof/consistency?first=1&second=2"])
def test_another_tenants_stream_is_a_404(path):
    assert client_for(FakeDb()).get(path).status_code == 404


def test_inclusion_proofs_verify_against_the_checkpoint_root_in_one_node_query():
    db = FakeDb()
    c = client_for(db)
    for size in (7, 13):
        for seq in range(1, size + 1):
            db.node_queries.clear()
            r = c.get(f"/streams/{STREAM}/proof/inclusion", params={"seq": seq, "tree_size": size})
            assert r.status_code == 200, r.text
            p = r.json()
            assert p["leaf_index"] == seq - 1 and p["tree_size"] == size
            assert p["leaf_hash"] == LEAVES[seq - 1].hex()
            verify_inclusion(seq - 1, size, LEAVES[seq - 1],
                             [bytes.fromhex(h) for h in p["hashes"]], _root(size))
            assert len(db.node_queries) == 1
    assert c.get(f"/streams/{STREAM}/proof/inclusion?seq=3").json()["tree_size"] == 13


def test_consistency_proofs_verify_against_both_roots():
    c = client_for(FakeDb())
    for a in range(1, 14):
        p = c.get(f"/streams/{STREAM}/proof/consistency?first={a}&second=13").json()
        assert p["first"] == a and p["second"] == p["tree_size"] == 13
        verify_consistency(a, 13, [bytes.fromhex(h) for h in p["hashes"]], _root(a), _root(13))


@pytest.mark.parametrize("query,words", [
    ("inclusion?seq=14", "seq 14 is not in a tree of 13"),
    ("inclusion?seq=1&tree_size=14", "beyond the latest checkpoint"),
    ("inclusion?seq=0", "greater than or equal to 1"),
    ("inclusion?seq=x", "decimal digits only"),
    ("inclusion", "Field required"),
    ("consistency?first=5&second=4", "larger than second"),
    ("consistency?first=1&second=14", "beyond the latest checkpoint"),
    ("consistency?first=0&second=4", "greater than or equal to 1"),
])
def test_bad_parameters_are_4xx_with_a_reason(query, words):
    from api.app import create_app  # noqa: F401 - the app's validation handler, below
    from api.app import _invalid
    from fastapi.exceptions import RequestValidationError

    c = client_for(FakeDb())
    c.app.add_exception_handler(RequestValidationError, _invalid)
    r = c.get(f"/streams/{STREAM}/proof/{query}")
    assert r.status_code == 422, r.text
    assert words in r.json()["message"]


def test_a_stream_without_checkpoint_is_a_404_and_an_unprojected_tree_a_503():
    assert client_for(FakeDb(sizes=())).get(
        f"/streams/{STREAM}/proof/inclusion?seq=1").status_code == 404
    r = client_for(FakeDb(tree_size=10)).get(f"/streams/{STREAM}/proof/inclusion?seq=1")
    assert r.status_code == 503 and "catching up" in r.json()["message"]
    assert "Retry-After" in r.headers


def test_log_key_is_public_text():
    c = client_for(FakeDb())
    r = c.get("/log/key", headers={"Authorization": ""})
    assert r.status_code == 200 and r.text == format_vkey(LOG.verifier) + "\n"
    assert client_for(FakeDb(), log_key=None).get("/log/key").status_code == 404


def _cosigned(size: int, *witnesses: SignerKey, root: bytes | None = None) -> bytes:
    text, _ = _note(size, root)
    return format_note(text, [sign(LOG, text)] + [sign(w, text, timestamp=1_700_000_000 + i)
                                                  for i, w in enumerate(witnesses)])


def _post(c, body, ctype="text/plain"):
    return c.post(f"/streams/{STREAM}/checkpoint/cosignatures", content=body,
                  headers={"content-type": ctype})


def test_a_valid_cosignature_is_produced_to_the_checkpoints_topic():
    producer = FakeProducer()
    c = client_for(FakeDb(), producer)
    body = _cosigned(13, WITNESS)
    r = _post(c, body)
    assert r.status_code == 202, r.text
    assert r.json() == {"stream": STREAM, "tree_size": 13, "witnesses": [WITNESS.name]}
    ((stream, value, headers),) = producer.sent
    assert stream == STREAM and value == body
    assert headers == {"evidence-kind": b"cosignature", "evidence-stream": STREAM.encode(),
                       "evidence-tree-size": b"13", "evidence-witness": WITNESS.name.encode()}


@pytest.mark.parametrize("body,status,words", [
    (lambda: _cosigned(13), 403, "no cosignature from a witness"),
    (lambda: _cosigned(13, STRANGER), 403, "no cosignature from a witness"),
    (lambda: _cosigned(8, WITNESS), 409, "holds no checkpoint"),
    (lambda: _cosigned(13, WITNESS, root=b"\x07" * 32), 409, "another root"),
    (lambda: b"not a note", 422, "not a checkpoint"),
    (lambda: _cosigned(13, WITNESS)[:-5] + b"AAAA\n", 422, "not a checkpoint"),
])
def test_a_bad_cosignature_is_refused_with_a_reason(body, status, words):
    producer = FakeProducer()
    r = _post(client_for(FakeDb(), producer), body())
    assert r.status_code == status, r.text
    assert words in r.json()["message"]
    assert not producer.sent


def test_cosignature_needs_text_plain_witness_keys_and_kafka():
    body = _cosigned(13, WITNESS)
    assert _post(client_for(FakeDb()), body, "application/json").status_code == 415
    assert _post(client_for(FakeDb(), witness_keys=()), body).status_code == 403
    r = _post(client_for(FakeDb(), FakeProducer(fail=True)), body)
    assert r.status_code == 503 and "Kafka" in r.json()["message"]


def test_the_producer_without_kafka_is_a_503_not_a_start_failure():
    import asyncio

    from api.kafka import CheckpointProducer

    with pytest.raises(Unavailable, match="EVIDENCE_KAFKA_BOOTSTRAP"):
        asyncio.run(CheckpointProducer(None).produce(STREAM, b"x", []))


def test_the_producer_with_kafka_unreachable_is_a_503_with_the_reason():
    import asyncio

    from api.kafka import CheckpointProducer

    p = CheckpointProducer("127.0.0.1:1", timeout=1.0)
    try:
        with pytest.raises(Unavailable, match="Kafka did not take the message"):
            asyncio.run(p.produce(STREAM, b"x", []))
    finally:
        p._producer = None  # nothing was delivered; do not wait on close


def test_settings_read_the_log_and_witness_keys(tmp_path):
    from api.config import Settings as S
    from evidence_contract.note import format_skey

    skey = tmp_path / "log.skey"
    skey.write_text(format_skey(LOG) + "\n")
    wfile = tmp_path / "witnesses"
    wfile.write_text(f"# witnesses\n{format_vkey(STRANGER.verifier)}\n")
    env = {"EVIDENCE_DATABASE_URL": "postgresql://x/y", "EVIDENCE_API_KEY": KEY,
           "EVIDENCE_API_KEY_STREAMS": "*", "EVIDENCE_LOG_SIGNING_KEY_FILE": str(skey),
           "EVIDENCE_WITNESS_KEYS": format_vkey(WITNESS.verifier),
           "EVIDENCE_WITNESS_KEYS_FILE": str(wfile)}
    s = S.from_env(env)
    assert s.log_key == LOG.verifier and s.kafka_bootstrap is None
    assert s.witness_keys == (WITNESS.verifier, STRANGER.verifier)
    from api.errors import ApiConfigError

    with pytest.raises(ApiConfigError, match="EVIDENCE_LOG_NAME"):
        S.from_env({**env, "EVIDENCE_LOG_NAME": "another.example/log"})
    with pytest.raises(ApiConfigError, match="witness key"):
        S.from_env({**env, "EVIDENCE_WITNESS_KEYS": "nonsense"})
