"""The public tlog-tiles routes alone (api.routers.publiclog): the publiclog router on a bare
app over a fake read model, read back by evidence_contract.tiles.TileReader."""

import hashlib

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.deps import get_db
from api.routers import publiclog
from evidence_contract.merkle import CompactRange, MerkleTree, leaf_hash
from evidence_contract.tiles import TileReader

NOTE = b"evidence-store.local/log\n600\nAAAA\n\n\xe2\x80\x94 evidence-store.local/log abc\n"
COSIG = "\u2014 witness.test/w1 xyz\n"


class FakeDb:
    """A projection that holds ``stored`` entries of the deployment tree (and a stream
    ``s`` with the same leaves) and signed checkpoints of ``signed`` leaves."""

    def __init__(self, stored: int, signed: int | None):
        self.entries = [b"entry %d" % i + hashlib.sha256(b"%d" % i).digest()
                        for i in range(stored)]
        self.nodes = {(lv, i): h for lv, i, h in CompactRange().extend_nodes(
            leaf_hash(e) for e in self.entries)}
        self.signed = signed

    async def log_size(self):
        return self.signed

    async def log_checkpoint(self, max_cosignatures):
        if self.signed is None:
            return None, []
        return (self.signed, b"r" * 32, NOTE), [COSIG]

    async def checkpoint(self, stream, tree_size, max_cosignatures):
        if self.signed is None or stream != "s":
            return None, []
        return (self.signed, b"r" * 32, NOTE), [COSIG][:max_cosignatures]

    async def _hashes(self, level, start, count):
        return [(i, self.nodes[(level, i)]) for i in range(start, start + count)
                if (level, i) in self.nodes]

    async def log_hashes(self, level, start, count):
        return await self._hashes(level, start, count)

    async def stream_hashes(self, stream, level, start, count):
        return await self._hashes(level, start, count) if stream == "s" else []

    async def log_entries(self, start, count):
        return [(i, self.entries[i]) for i in range(start, min(start + count,
                                                               len(self.entries)))]


def client_for(db):
    from api.app import _api_error
    from api.errors import ApiError

    app = FastAPI()
    app.dependency_overrides[get_db] = lambda: db
    app.include_router(publiclog.router)
    app.add_exception_handler(ApiError, _api_error)
    return TestClient(app)  # no Authorization header: the routes are public


@pytest.fixture
def api():
    return client_for(FakeDb(stored=700, signed=600))  # the projection ahead of the checkpoint


def test_the_signed_tree_reads_back_and_verifies(api):
    db = FakeDb(700, 600)
    tree = MerkleTree([leaf_hash(e) for e in db.entries])
    for prefix in ("/log", "/log/streams/s"):
        reader = TileReader(lambda path: _ok(api.get(f"{prefix}/{path}")), 600)
        assert reader.root() == tree.root(600)
        assert reader.root(37) == tree.root(37)
    reader = TileReader(lambda path: _ok(api.get(f"/log/{path}")), 600)
    assert reader.entries(tree.root(600)) == db.entries[:600]


def _ok(r):
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/octet-stream"
    return r.content


@pytest.mark.parametrize("path, status, cache", [
    ("tile/0/000", 200, publiclog.CACHE_FULL_TILE),
    ("tile/0/001", 200, publiclog.CACHE_FULL_TILE),
    ("tile/0/002.p/88", 200, publiclog.CACHE_PARTIAL_TILE),  # the checkpoint's own width
    ("tile/0/002.p/1", 200, publiclog.CACHE_PARTIAL_TILE),  # an older checkpoint's
    ("tile/1/000.p/2", 200, publiclog.CACHE_PARTIAL_TILE),
    ("tile/entries/001", 200, publiclog.CACHE_FULL_TILE),
    ("tile/entries/002.p/88", 200, publiclog.CACHE_PARTIAL_TILE),
    ("tile/0/002", 404, None),  # stored, but not signed whole
    ("tile/0/002.p/89", 404, None),
    ("tile/0/003.p/1", 404, None),
    ("tile/1/000.p/3", 404, None),
    ("tile/2/000.p/1", 404, None),
    ("tile/63/000.p/1", 404, None),
    ("tile/entries/002", 404, None),
    ("tile/0/x000/002", 400, None),
    ("tile/0/002.p/256", 400, None),
    ("tile/8/0/000", 400, None),
    ("tile/data/000", 400, None),
])
def test_what_is_served_is_what_is_signed(api, path, status, cache):
    r = api.get(f"/log/{path}")
    assert r.status_code == status, r.text
    assert r.headers.get("cache-control") == cache
    if status == 400:
        assert r.json()["error"] == "invalid_request"
        assert "not a tlog-tiles path" in r.json()["message"]
    if status == 200 and "entries" not in path:
        width = int(path.rsplit("/", 1)[1]) if ".p/" in path else 256
        assert len(r.content) == 32 * width


def test_a_full_tile_not_yet_signed_names_the_partial_width(api):
    r = api.get("/log/tile/0/002")
    assert r.status_code == 404
    assert "beyond the deployment log's signed tree of 600 leaves" in r.json()["message"]
    assert ".p/88" in r.json()["message"]


def test_a_stream_serves_no_entry_bundles(api):
    r = api.get("/log/streams/s/tile/entries/000.p/5")
    assert r.status_code == 404
    assert "entries are its records" in r.json()["message"]
    assert api.get("/log/streams/s/tile/0/000").status_code == 200
    assert api.get("/log/streams/other/tile/0/000").status_code == 404
    assert api.get("/log/streams/s/tile/0/00").status_code == 400
    assert api.get("/log/streams/bad%20id/tile/0/000").status_code == 422


def test_checkpoints_come_with_their_cosignatures_and_are_not_cached(api):
    for path in ("/log/checkpoint", "/log/streams/s/checkpoint"):
        r = api.get(path)
        assert r.status_code == 200
        assert r.content == NOTE + COSIG.encode()
        assert r.headers["content-type"] == "text/plain; charset=utf-8"
        assert r.headers["cache-control"] == publiclog.CACHE_CHECKPOINT
    assert api.get("/log/streams/other/checkpoint").status_code == 404


def test_nothing_before_the_first_checkpoint():
    api = client_for(FakeDb(stored=10, signed=None))
    for path in ("/log/checkpoint", "/log/tile/0/000.p/1", "/log/tile/entries/000.p/1",
                 "/log/streams/s/checkpoint", "/log/streams/s/tile/0/000.p/1"):
        r = api.get(path)
        assert r.status_code == 404, path
        assert "checkpoint" in r.json()["message"]


def test_a_signed_tile_the_projection_has_not_stored_is_a_503():
    api = client_for(FakeDb(stored=500, signed=600))  # the projection behind the checkpoint
    assert api.get("/log/tile/0/000").status_code == 200
    for path in ("/log/tile/0/001", "/log/tile/0/002.p/88", "/log/tile/entries/002.p/88",
                 "/log/streams/s/tile/0/002.p/88"):
        r = api.get(path)
        assert r.status_code == 503, path
        assert r.headers["retry-after"] == "2"
