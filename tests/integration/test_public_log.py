"""The public read API (/log, no API key) read by a standard tlog-tiles client.

A real API over a read model of our own (its own views schema, in the stack's PostgreSQL)
holds two streams' records and signed checkpoints, and a deployment log whose entries are
those stream checkpoints, with its signed, cosigned deployment checkpoints, in the tables
the projector fills (``log_entries``, ``log_nodes``, ``log_checkpoints``,
``log_cosignatures``). Then:

- tests/verifiers/go-tiles (golang.org/x/mod/sumdb/tlog and sumdb/note only, pinned by its
  go.sum) reads the deployment log at ``<API>/log`` holding only the log's name and
  verifier key: it checks the checkpoint's signature, the tree hash from the hash tiles,
  and every entry bundle against the authenticated leaf hashes; and reads a stream's tree at
  ``<API>/log/streams/<stream>``, the roots of its every checkpoint from its hash tiles, as
  a monitor does;
- evidence_contract.tiles.TileReader does the same in Python;
- a log whose served tiles or entries lie is refused by the Go client.

The Go build is cached under build/verifiers/go-tiles/<hash of the sources>, as the go-tlog
verifier's is; Go comes from tests.fixtures.toolchains (never skipped for).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest

from api import Keyring, Settings
from evidence_contract.merkle import CompactRange, MerkleTree, leaf_hash
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, SIG_ED25519, Checkpoint, SignerKey, format_checkpoint, format_note,
    format_vkey, open_checkpoint, sign,
)
from evidence_contract.tiles import TileReader, encode_entry_bundle
from evidence_contract.tlog import open_stream_checkpoint
from tests.fixtures import toolchains
from tests.fixtures.builds import one_builder
from tests.fixtures.api_server import serve_api
from tests.fixtures.readmodel import ReadModel

BUILD_TIMEOUT = 600  # a cold build downloads golang.org/x/mod from the Go module proxy
pytestmark = [pytest.mark.integration, pytest.mark.timeout(BUILD_TIMEOUT + 300)]

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "tests" / "verifiers" / "go-tiles"
CACHE = ROOT / "build" / "verifiers" / "go-tiles"  # build/ is gitignored

LOG = SignerKey("evidence-store.local/log", SIG_ED25519,
                hashlib.sha256(b"public log test: log").digest())
WITNESS = SignerKey("witness.test/public-log", SIG_COSIGNATURE_V1,
                    hashlib.sha256(b"public log test: witness").digest())
KEY = "public-log-key-0123456789abcdef0123456789"
A, B = "pl:a", "pl:b"
A_SIZE, B_SIZE = 300, 45  # stream a's tree: a full tile and a partial one
SIGNED = A_SIZE + B_SIZE  # every checkpoint of both streams is an entry: 345


def _sources_hash() -> str:
    h = hashlib.sha256()
    for p in sorted(SRC.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(SRC).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@pytest.fixture(scope="module")
def tilesverify() -> Path:
    with one_builder(CACHE):
        return _build_tilesverify()


def _build_tilesverify() -> Path:
    try:
        go = toolchains.go()
    except OSError as e:  # no Go installed and the toolchain could not be fetched
        pytest.fail(f"no Go toolchain for the tlog-tiles client (Go 1.25+): {e}")
    final = CACHE / _sources_hash()
    binary = final / "tilesverify"
    if binary.exists():
        return binary
    tmp = CACHE / f".tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        # go.sum pins golang.org/x/mod; -mod=readonly fails rather than change it, and
        # GOTOOLCHAIN=local fails on a too-old Go rather than download another.
        env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false"}
        with toolchains.one_go_build():
            proc = subprocess.run([go, "build", "-trimpath", "-o", str(tmp / "tilesverify"), "."],
                                  cwd=SRC, env=env, capture_output=True, text=True,
                                  timeout=BUILD_TIMEOUT)
        if proc.returncode != 0:
            pytest.fail(f"go build (tests/verifiers/go-tiles) failed:\n{proc.stderr[-6000:]}")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for old in CACHE.iterdir():
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return binary


def _go(binary: Path, prefix: str, origin: str, *args: str) -> tuple[int, str]:
    proc = subprocess.run([str(binary), "-prefix", prefix, "-vkey", format_vkey(LOG.verifier),
                           "-origin", origin, *args], capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def _summary(rc: int, out: str) -> dict:
    assert rc == 0, out
    return json.loads(out.strip().splitlines()[-1])


def _signed_note(size: int, root: bytes, witness: bool = False) -> tuple[bytes, list[str]]:
    """The log-signed deployment checkpoint note, and the witness's cosignature line."""
    text = format_checkpoint(Checkpoint(LOG.name, size, root))
    note = format_note(text, [sign(LOG, text)])
    if not witness:
        return note, []
    cosigned = format_note(text, [sign(LOG, text),
                                  sign(WITNESS, text, timestamp=1_700_000_000)]).decode()
    return note, [cosigned.splitlines(keepends=True)[-1]]


def publish(rm: ReadModel, entries: list[bytes], checkpoints: dict[int, bool]) -> MerkleTree:
    """Store ``entries`` as the deployment log, as the projector does, and a signed
    deployment checkpoint at each size of ``checkpoints`` (True: its root is the tree's and a
    witness cosigned it; False: a checkpoint whose root the tree contradicts)."""
    tree = MerkleTree([leaf_hash(e) for e in entries])
    nodes = CompactRange().extend_nodes(leaf_hash(e) for e in entries)
    g = f'"{rm.gen}"'
    with rm.conn.cursor() as cur:
        cur.executemany(f"insert into {g}.log_entries (idx, stream, tree_size, entry, "
                        f"log_offset) values (%s, '', 0, %s, %s)",
                        [(i, e, i) for i, e in enumerate(entries)])
        cur.executemany(f"insert into {g}.log_nodes (level, idx, hash) values (%s, %s, %s)",
                        nodes)
        for size, good in checkpoints.items():
            root = tree.root(size) if good else hashlib.sha256(b"another tree").digest()
            note, lines = _signed_note(size, root, witness=good)
            cur.execute(f"insert into {g}.log_checkpoints (tree_size, root, note, log_offset, "
                        f"root_matches) values (%s, %s, %s, %s, %s)",
                        (size, root, note, len(entries) + size, good))
            for line in lines:
                cur.execute(f"insert into {g}.log_cosignatures (tree_size, witness, key_id, "
                            f"timestamp, line, log_offset) values (%s, %s, %s, 0, %s, 0)",
                            (size, WITNESS.name, WITNESS.verifier.key_id, line))
    return tree


@pytest.fixture(scope="module")
def public_log(database_url):
    """(API base URL, the deployment log's entries, its tree)."""
    with ReadModel(database_url) as rm:
        for stream, n in ((A, A_SIZE), (B, B_SIZE)):
            for i in range(n):
                rm.add(stream, output=f"out {i}")
        entries = []  # the streams' checkpoints, interleaved as the writers commit them
        for size in range(1, A_SIZE + 1):
            entries.append(rm.add_checkpoint(A, LOG, size))
            if size <= B_SIZE:
                entries.append(rm.add_checkpoint(B, LOG, size))
        # An older checkpoint, the latest, and a later one the projected tree contradicts:
        # never served, nor any tile it would cover.
        tree = publish(rm, entries, {200: True, SIGNED: True, SIGNED + 5: False})
        settings = Settings(database_url, Keyring([("k", KEY, ["*"])]), views_schema=rm.views,
                            max_lag=10**9, log_key=LOG.verifier)
        with serve_api(settings) as url:
            yield url, entries, tree


def _stream_roots(entries, stream):
    """{size: root} of every checkpoint of ``stream`` among the deployment log's entries."""
    out = {}
    for e in entries:
        cp, _, named = open_stream_checkpoint(e, LOG.verifier)
        if named == stream:
            out[cp.size] = cp.root_hash
    return out


def test_a_go_tlog_client_reads_and_verifies_the_deployment_log(tilesverify, public_log):
    url, entries, tree = public_log
    summary = _summary(*_go(tilesverify, f"{url}/log", LOG.name, "-entries",
                            "-sizes", "1,200,255,256,257,344,345"))
    assert summary["ok"] and summary["origin"] == LOG.name and summary["size"] == SIGNED
    assert summary["signatures"] == 1 and summary["unverified_signatures"] == 1  # the witness
    assert summary["entries"] == SIGNED
    assert summary["entries_sha256"] == hashlib.sha256(encode_entry_bundle(entries)).hexdigest()
    assert {int(k): v for k, v in summary["roots"].items()} == {
        k: base64.b64encode(tree.root(k)).decode()
        for k in (1, 200, 255, 256, 257, 344, 345)}


def test_a_go_tlog_client_reads_a_streams_tree_and_every_checkpoint_root(tilesverify,
                                                                         public_log):
    url, entries, _ = public_log
    roots = _stream_roots(entries, A)
    sizes = (1, 2, 37, 255, 256, 257, 299, 300)
    summary = _summary(*_go(tilesverify, f"{url}/log/streams/{A}", f"{LOG.name}/{A}",
                            "-sizes", ",".join(map(str, sizes))))
    assert summary["size"] == A_SIZE and summary["signatures"] == 1
    assert {int(k): base64.b64decode(v) for k, v in summary["roots"].items()} == {
        k: roots[k] for k in sizes}


def test_python_reads_the_same_log_without_a_key(public_log):
    url, entries, tree = public_log
    with httpx.Client(base_url=url, timeout=30) as http:  # no Authorization header
        r = http.get("/log/checkpoint")
        assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
        cp, note = open_checkpoint(r.content, LOG.verifier, [WITNESS.verifier], origin=LOG.name)
        assert (cp.size, cp.root_hash) == (SIGNED, tree.root())
        assert len(note.verified) == 2  # the log's signature and the witness's cosignature

        def fetch(path):
            got = http.get(f"/log/{path}")
            assert got.status_code == 200, (path, got.text)
            return got.content

        reader = TileReader(fetch, cp.size)
        reader.verify_root(cp.root_hash)
        assert reader.entries(cp.root_hash) == entries

        # The monitor's check: each stream's checkpoints in the log are prefixes of one tree,
        # the stream's public hash tiles.
        for stream in (A, B):
            r = http.get(f"/log/streams/{stream}/checkpoint")
            latest, _, _ = open_stream_checkpoint(r.content, LOG.verifier, stream)
            stream_reader = TileReader(lambda p: http.get(f"/log/streams/{stream}/{p}").content,
                                       latest.size)
            for size, root in _stream_roots(entries, stream).items():
                assert stream_reader.root(size) == root, (stream, size)


@pytest.mark.parametrize("path, status, cache", [
    ("/log/tile/0/000", 200, "public, max-age=31536000, immutable"),
    ("/log/tile/0/001.p/89", 200, "public, max-age=5"),
    ("/log/tile/0/001.p/30", 200, "public, max-age=5"),  # the partial tile of an older size
    ("/log/tile/1/000.p/1", 200, "public, max-age=5"),
    ("/log/tile/entries/000", 200, "public, max-age=31536000, immutable"),
    ("/log/tile/entries/001.p/89", 200, "public, max-age=5"),
    ("/log/tile/0/001.p/90", 404, None),  # stored (and signed by a contradicted checkpoint)
    ("/log/tile/0/001", 404, None),
    ("/log/tile/entries/002.p/1", 404, None),
    ("/log/tile/0/001.p/0", 400, None),
    ("/log/tile/0/1", 400, None),
    ("/log/streams/pl:a/tile/0/000", 200, "public, max-age=31536000, immutable"),
    ("/log/streams/pl:a/tile/0/001.p/44", 200, "public, max-age=5"),
    ("/log/streams/pl:a/tile/0/001.p/45", 404, None),
    ("/log/streams/pl:a/tile/entries/000", 404, None),
    ("/log/streams/pl:nope/tile/0/000.p/1", 404, None),
    ("/log/streams/pl:nope/checkpoint", 404, None),
    ("/log/streams/pl:a/tile/0/x000/000", 400, None),
])
def test_served_is_what_is_signed(public_log, path, status, cache):
    url, _, _ = public_log
    r = httpx.get(url + path, timeout=30)
    assert r.status_code == status, r.text
    assert r.headers.get("cache-control") == cache
    if status != 200:
        assert r.json()["message"]


def test_a_go_client_refuses_a_log_that_lies(tilesverify, database_url):
    entries = [b"entry %d\n" % i for i in range(300)]
    with ReadModel(database_url, heartbeat=False) as rm:
        publish(rm, entries, {300: True})
        settings = Settings(database_url, Keyring([("k", KEY, ["*"])]), views_schema=rm.views,
                            max_lag=10**9, log_key=LOG.verifier)
        with serve_api(settings) as url:
            assert _summary(*_go(tilesverify, f"{url}/log", LOG.name, "-entries"))["ok"]

            rm.conn.execute(f'update "{rm.gen}".log_entries set entry = %s where idx = 270',
                            (b"another entry\n",))
            rc, out = _go(tilesverify, f"{url}/log", LOG.name, "-entries")
            assert rc == 1 and "FAIL entries: the 300 entries hash to" in out, out
            rm.conn.execute(f'update "{rm.gen}".log_entries set entry = %s where idx = 270',
                            (entries[270],))

            # A leaf hash of the full tile: the tree hash reads its parent only, so the tile is
            # caught against the entries.
            set_leaf = f'update "{rm.gen}".log_nodes set hash = %s where level = 0 and idx = %s'
            rm.conn.execute(set_leaf, (bytes(32), 3))
            rc, out = _go(tilesverify, f"{url}/log", LOG.name, "-entries")
            assert rc == 1 and "FAIL leaf tile: tile/0/000 holds another hash than entry 3" \
                in out, out
            # One of the partial tile, which the tree hash reads.
            rm.conn.execute(set_leaf, (bytes(32), 290))
            rc, out = _go(tilesverify, f"{url}/log", LOG.name)
            assert rc == 1 and "FAIL tree hash from tiles" in out, out

            rc, out = _go(tilesverify, f"{url}/log", "another.example/log")
            assert rc == 1 and "FAIL checkpoint origin" in out, out
