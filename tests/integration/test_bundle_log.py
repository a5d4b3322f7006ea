"""Every record provably covered by a witnessed checkpoint, end to end against real Kafka and
PostgreSQL: a record's bundle carries the path record -> the first checkpoint of its stream
that covers it = entry i of the deployment tree -> a deployment checkpoint that a real
third-party witness (litewitness) cosigned; ``verify_bundle``, ``LogVerifier`` and ``evidence
replay --log-witness-key`` check it with that witness's key. A record no deployment checkpoint
covers yet has ``log: null`` with the reason, and a reader requiring the path waits, then
refuses; a projection whose deployment tree does not prove the path serves no path."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import psycopg
import pytest

from evidence_client import EvidenceUncovered, LogVerifier
from evidence_contract.bundle import Trust, Uncovered, parse_bundle, verify_bundle
from evidence_contract.note import parse_checkpoint, parse_note
from evidence_contract.tiles import TileReader
from evidence_contract.tlog import open_log_checkpoint
from publisher.config import PublisherConfig
from publisher.service import Publisher
from tests.fixtures.log import wait_until
from tests.fixtures.readmodel import capture_body
from tests.fixtures.writer import log_signing_key, produce_captures

pytestmark = pytest.mark.integration

EVIDENCE = str(Path(sys.executable).parent / "evidence")


class _Running:
    """A publisher on a thread, stopped by :meth:`close` (once)."""

    def __init__(self, p, witnesses_file: Path) -> None:
        cfg = PublisherConfig(bootstrap=p.projection.bootstrap, topics=p.topics,
                              database_url=p.projection.database_url,
                              views_schema=p.projection.views_schema,
                              log_name=log_signing_key()[0].name, interval_s=0.5,
                              witnesses_file=str(witnesses_file))
        self.pub, self.stop = Publisher(cfg, log_signing_key()[0]), threading.Event()
        self.thread = threading.Thread(target=self.pub.run, args=(self.stop.is_set,),
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        if not self.stop.is_set():
            self.stop.set()
            self.thread.join(30)
            self.pub.close()


@pytest.fixture
def start_publisher():
    running: list[_Running] = []

    def start(p, witnesses_file: Path) -> _Running:
        running.append(_Running(p, witnesses_file))
        return running[-1]

    yield start
    for r in running:
        r.close()


def _bundle(p, stream: str, seq: int) -> dict:
    r = p.api.get(f"/streams/{stream}/records/{seq}/bundle")
    r.raise_for_status()
    return r.json()


def _path_cosigned_by(p, stream: str, seq: int, witness) -> dict:
    """The bundle of ``stream`` #``seq`` once its log path ends at a deployment checkpoint
    ``witness`` cosigned."""
    def ok():
        doc = _bundle(p, stream, seq)
        if doc["log"] is None:
            return None
        _cp, note = open_log_checkpoint(doc["log"]["checkpoint"], p.log_key, [witness])
        ids = {(s.name, s.key_id) for s in note.verified}
        return doc if (witness.name, witness.key_id) in ids else None
    return wait_until(f"the bundle of {stream} #{seq} with a path cosigned by {witness.name}",
                      ok, 90, 0.3)


def _first_covering(p, doc: dict) -> tuple[int, bytes]:
    """(index, entry) of the first entry of the bundle's stream covering its seq in the
    deployment tree of its log checkpoint, read from the public tiles (no key)."""
    dcp = parse_checkpoint(parse_note(doc["log"]["checkpoint"]).text)
    entries = TileReader(lambda path: httpx.get(f"{p.api_url}/log/{path}", timeout=10)
                         .raise_for_status().content, dcp.size).entries(dcp.root_hash)
    origin = f"{p.log_key.name}/{doc['stream']}"
    mine = [(parse_checkpoint(parse_note(e).text).size, i, e) for i, e in enumerate(entries)
            if e.startswith(origin.encode() + b"\n")]
    _size, i, e = min(m for m in mine if m[0] >= doc["seq"])
    return i, e


def _replay(p, stream: str, seq: int, output: str, *extra: str):
    return subprocess.run([EVIDENCE, "replay", "--stream", stream, "--seq", str(seq),
                           "--output", output, "--json", *extra], capture_output=True,
                          text=True, env=p.env(), timeout=120)


def test_a_records_bundle_proves_it_covered_by_a_witnessed_deployment_checkpoint(
        make_pipeline, make_litewitness, start_publisher, tmp_path):
    p = make_pipeline(env={"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.3"})
    lw = make_litewitness()
    lw.add_log(p.log_key.name, p.log_key)
    listed = tmp_path / "witnesses"
    listed.write_text(f"{lw.vkey} {lw.url}\n")
    # Two streams, records sent in two rounds: several checkpoints of each in the tree.
    for n in range(2):
        produce_captures(p.projection.bootstrap, p.topics, [
            capture_body(s, output=f"{s} answer {n}") for s in ("cov:a", "cov:b")])
        p.wait_records("cov:a", n + 1)
        wait_until("a checkpoint of cov:a covering it",
                   lambda: _bundle(p, "cov:a", n + 1)["inclusion"] is not None, 60, 0.2)
    publisher = start_publisher(p, listed)

    doc = _path_cosigned_by(p, "cov:a", 1, lw.verifier)
    assert doc["log_reason"] is None
    trust = Trust(p.log_key, log_witnesses=(lw.verifier,), min_log_witnesses=1)
    v = verify_bundle(parse_bundle(doc), trust)
    assert v.log is not None and v.log.witnesses == (lw.verifier.name,)
    assert v.log.checkpoint.origin == p.log_key.name and v.log.entry.size >= 1
    # The entry is the first checkpoint of the stream that covers the record.
    index, entry = _first_covering(p, doc)
    assert (doc["log"]["entry_index"], doc["log"]["entry"].encode()) == (index, entry)
    # Without the witness's key the path is still checked, and the reader that did not ask
    # for it verifies the bundle as before.
    assert verify_bundle(parse_bundle(doc), Trust(p.log_key, log_witnesses=())).log
    assert verify_bundle(parse_bundle(doc), Trust(p.log_key)).log is None

    # The client and the CLI require it with the witness's key.
    verified = LogVerifier(p.log_key, log_witnesses=[lw.vkey]).check(
        _path_cosigned_by(p, "cov:a", 2, lw.verifier), {})
    assert verified.log.witnesses == (lw.verifier.name,)
    out = _replay(p, "cov:a", 2, "cov:a answer 1", "--log-witness-key", lw.vkey)
    assert out.returncode == 0, (out.stdout, out.stderr)
    log = json.loads(out.stdout)["verified"]["log"]
    assert log["origin"] == p.log_key.name and log["witnesses"] == [lw.verifier.name]

    # No deployment checkpoint is signed any more: a new stream's record is in its stream's
    # checkpoint, and in no deployment checkpoint.
    publisher.close()
    produce_captures(p.projection.bootstrap, p.topics,
                     [capture_body("cov:late", output="late answer")])
    p.wait_records("cov:late", 1)
    late = wait_until("a checkpoint of cov:late covering #1",
                      lambda: (d := _bundle(p, "cov:late", 1))["inclusion"] and d, 60, 0.2)
    assert late["log"] is None
    assert "no checkpoint of stream cov:late covering #1 is in the deployment checkpoint" \
        in late["log_reason"]
    assert verify_bundle(parse_bundle(late), Trust(p.log_key)).log is None
    with pytest.raises(Uncovered, match="no checkpoint of stream cov:late"):
        verify_bundle(parse_bundle(late), trust)
    with pytest.raises(EvidenceUncovered):
        LogVerifier(p.log_key, log_witnesses=[lw.vkey]).check(late, {})
    out = _replay(p, "cov:late", 1, "late answer", "--log-witness-key", lw.vkey,
                  "--checkpoint-wait", "1")
    assert out.returncode == 4, (out.stdout, out.stderr)
    assert "no deployment checkpoint covers record cov:late #1" in out.stderr

    # A projection whose deployment tree lies: the path is not served (the rest still is).
    views = p.projection.views_schema
    with psycopg.connect(p.projection.database_url, autocommit=True) as conn:
        conn.execute(f'update "{views}".log_nodes set hash = sha256(hash)')
    lied = _bundle(p, "cov:a", 1)
    assert lied["log"] is None and "do not prove" in lied["log_reason"], lied["log_reason"]
    assert verify_bundle(parse_bundle(lied), Trust(p.log_key)).seq == 1


def test_before_any_deployment_checkpoint_the_path_is_null_with_its_reason(make_pipeline):
    p = make_pipeline(env={"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.3"})
    produce_captures(p.projection.bootstrap, p.topics,
                     [capture_body("cov:none", output="an answer")])
    p.wait_records("cov:none", 1)
    doc = wait_until("a checkpoint of cov:none covering #1",
                     lambda: (d := _bundle(p, "cov:none", 1))["inclusion"] and d, 60, 0.2)
    assert doc["log"] is None
    assert doc["log_reason"].startswith("the deployment log has no checkpoint yet")
    assert verify_bundle(parse_bundle(doc), Trust(p.log_key)).seq == 1
    with pytest.raises(Uncovered, match="the deployment log has no checkpoint yet"):
        verify_bundle(parse_bundle(doc), Trust(p.log_key, log_witnesses=()))
