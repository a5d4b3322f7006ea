"""One log for witnesses, end to end: the writer appends stream checkpoints to the tree topic,
the projector folds it, the publisher signs the deployment checkpoint (one origin for every
stream) and pushes it to a real third-party witness (litewitness, built from the Go module
proxy) and to ours; the cosignatures come back and are served, without a key, at
/log/checkpoint. A witness added to the witnesses file at runtime starts cosigning without a
restart; a second log under the same key with another history is refused by the witness."""

from __future__ import annotations

import threading

import httpx
import pytest

from evidence_contract.note import open_checkpoint, parse_vkey
from publisher.config import PublisherConfig
from publisher.service import Publisher
from tests.fixtures.log import wait_until
from tests.fixtures.readmodel import capture_body
from tests.fixtures.writer import log_signing_key, produce_captures


class _Running:
    def __init__(self, pub: Publisher) -> None:
        self.pub, self.stop = pub, threading.Event()
        self.thread = threading.Thread(target=pub.run, args=(self.stop.is_set,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.pub.close()


@pytest.fixture
def start_publisher():
    running: list[_Running] = []

    def start(p, witnesses_file) -> Publisher:
        cfg = PublisherConfig(bootstrap=p.projection.bootstrap, topics=p.topics,
                              database_url=p.projection.database_url,
                              views_schema=p.projection.views_schema,
                              log_name=log_signing_key()[0].name, interval_s=0.5,
                              witnesses_file=str(witnesses_file))
        r = _Running(Publisher(cfg, log_signing_key()[0]))
        running.append(r)
        return r.pub

    yield start
    for r in running:
        r.close()


def _capture(p, streams: list[str], n: int) -> None:
    produce_captures(p.projection.bootstrap, p.topics,
                     [capture_body(s, output=f"{s} {i}") for s in streams for i in range(n)])


def _public_checkpoint(p, cosigners=()):
    r = httpx.get(p.api_url + "/log/checkpoint", timeout=10)  # no API key
    if r.status_code != 200:
        return None
    return open_checkpoint(r.content, p.log_key, list(cosigners), origin=p.log_key.name)


def _cosigned_by(p, witness_key, at_least: int = 1):
    seen: list = []

    def ok():
        got = _public_checkpoint(p, [witness_key])
        if got is None:
            return False
        cp, note = got
        if cp.size >= at_least and any(
                (s.name, s.key_id) == (witness_key.name, witness_key.key_id)
                for s in note.verified):
            seen.append(got)
            return True
        return False
    wait_until(f"a deployment checkpoint cosigned by {witness_key.name}", ok, 90, 0.3)
    return seen[-1]


def test_one_origin_for_every_stream_pushed_cosigned_served(
        make_pipeline, make_litewitness, start_publisher, tmp_path):
    p = make_pipeline(env={"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.3"})
    lw = make_litewitness()
    lw.add_log(p.log_key.name, p.log_key)  # one log entry, whatever the number of streams
    listed = tmp_path / "witnesses"
    listed.write_text(f"# the log's witnesses\n{lw.vkey} {lw.url}\n")
    streams = ["pub:a", "pub:b", "pub:c"]
    _capture(p, streams, 3)
    start_publisher(p, listed)
    cp, note = _cosigned_by(p, lw.verifier, at_least=3)
    assert cp.origin == p.log_key.name  # one origin: the log key's name
    # Its entries (read from the public tiles) are checkpoints of every stream.
    from evidence_contract.tiles import TileReader

    reader = TileReader(lambda path: httpx.get(f"{p.api_url}/log/{path}", timeout=10)
                        .raise_for_status().content, cp.size)
    entries = reader.entries(cp.root_hash)
    origins = {e.split(b"\n", 1)[0].decode() for e in entries}
    assert {f"{p.log_key.name}/{s}" for s in streams} <= origins

    # The log grows: the witness keeps cosigning, each push with a consistency proof.
    _capture(p, ["pub:d"], 2)
    cp2, _ = _cosigned_by(p, lw.verifier, at_least=cp.size + 1)
    assert cp2.size > cp.size


def test_a_witness_added_at_runtime_cosigns_without_a_restart(
        make_pipeline, make_litewitness, start_publisher, tmp_path):
    p = make_pipeline(env={"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.3"})
    first, later = make_litewitness(), make_litewitness()
    for w in (first, later):
        w.add_log(p.log_key.name, p.log_key)
    listed = tmp_path / "witnesses"
    listed.write_text(f"{first.vkey} {first.url}\n")
    _capture(p, ["rt:a"], 2)
    pub = start_publisher(p, listed)
    _cosigned_by(p, first.verifier)
    listed.write_text(f"{first.vkey} {first.url}\n{later.vkey} {later.url}\n")
    _capture(p, ["rt:b"], 2)
    _cosigned_by(p, later.verifier)
    assert pub.cosignatures >= 2  # the first witness's, then the one added


def test_another_history_under_the_same_key_is_refused_by_the_witness(
        make_pipeline, make_litewitness, start_publisher, tmp_path):
    from evidence_contract.merkle import MerkleTree, leaf_hash
    from evidence_contract.note import Checkpoint, format_checkpoint, format_note, sign
    from evidence_contract.tiles import TileReader
    from publisher.core import add_checkpoint_body, sign_checkpoint

    p = make_pipeline(env={"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.3"})
    lw = make_litewitness()
    lw.add_log(p.log_key.name, p.log_key)
    listed = tmp_path / "witnesses"
    listed.write_text(f"{lw.vkey} {lw.url}\n")
    _capture(p, ["fork:a", "fork:b"], 2)
    start_publisher(p, listed)
    cp, _ = _cosigned_by(p, lw.verifier)
    entries = TileReader(lambda path: httpx.get(f"{p.api_url}/log/{path}", timeout=10)
                         .raise_for_status().content, cp.size).entries(cp.root_hash)

    # Whoever holds the log key rewrites stream fork:a: its first checkpoint in the list
    # becomes one of other records, and the deployment tree is signed again at that size.
    key = log_signing_key()[0]
    i = next(n for n, e in enumerate(entries) if e.startswith(f"{key.name}/fork:a\n".encode()))
    size = int(entries[i].split(b"\n")[1])
    text = format_checkpoint(Checkpoint(f"{key.name}/fork:a", size, b"\x66" * 32))
    entries[i] = format_note(text, [sign(key, text)])
    root = MerkleTree([leaf_hash(e) for e in entries]).root()
    _text, forged = sign_checkpoint(key, cp.size, root)
    r = lw.add_checkpoint(forged, old_size=cp.size)
    assert r.status_code == 422, r.text  # a fork at the size it cosigned
    r = httpx.post(lw.url + "/add-checkpoint", content=add_checkpoint_body(0, [], forged))
    assert r.status_code == 409 and r.headers["content-type"].startswith("text/x.tlog.size")
    assert int(r.text) >= cp.size
    # The honest log is still served with the witness's cosignature.
    _cosigned_by(p, lw.verifier, at_least=cp.size)
