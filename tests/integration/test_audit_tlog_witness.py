"""``evidence audit --witness URL`` against a third-party witness's own routes (C2SP
tlog-witness: ``POST /add-checkpoint``, nothing else), over real Kafka and PostgreSQL.

A log (writer, projector, API, publisher) pushes its deployment checkpoints to litewitness,
built in the test from the Go module proxy. The audit of that log, asking the same witness,
is clean: the witness cosigns the newest deployment checkpoint with the proof the auditor
computed from the tree topic, and every stream checkpoint in it is checked against the records.

Then whoever holds the log key rewrites a stream: a second log under the same key and origin
(its own topics: Kafka's history cannot be edited in place, so the rewritten log is a fresh
one, every record, chain link, stream checkpoint and deployment checkpoint recomputed and
signed; its publisher pushes to no witness). Its plain audit is clean; asked with the witness
that followed the honest log, the witness refuses it and the audit reports
``witness_refused`` and exits 3.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from tests.fixtures.log import wait_until
from tests.fixtures.writer import log_signing_key
from tests.integration.test_publisher import (  # noqa: F401 - fixture
    _capture, _cosigned_by, start_publisher,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

FAST = {"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.3"}


def _audit(p, *args):
    proc = subprocess.run([sys.executable, "-m", "cli.main", "audit", "--no-projection",
                           "--json", *args], env=p.env(), capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode in (0, 3), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_audit_asks_a_third_party_witness_and_catches_a_rewritten_stream(
        make_pipeline, make_litewitness, start_publisher, tmp_path):
    streams = ["atw:a", "atw:b"]
    honest = make_pipeline(env=FAST)
    lw = make_litewitness()
    lw.add_log(honest.log_key.name, honest.log_key)
    listed = tmp_path / "witnesses"
    listed.write_text(f"{lw.vkey} {lw.url}\n")
    _capture(honest, streams, 3)
    start_publisher(honest, listed)
    cp, _ = _cosigned_by(honest, lw.verifier, at_least=2)

    code, rep = _audit(honest, "--witness", lw.url, "--witness-key", lw.vkey)
    assert code == 0, rep["findings"]
    deployment = rep["trees"]["deployment"]
    assert deployment["entries"] >= cp.size
    [seen] = deployment["witnessed"]
    assert seen["source"] == f"witness {lw.url}" and seen["size"] >= cp.size
    assert seen["cosigners"] == [lw.verifier.name]

    # The rewrite: stream atw:a with other outputs, atw:b as it was, under the same key.
    forged = make_pipeline(env=FAST,  # another deployment: its own writer's ids
                           transactional_id=f"tx-forged-{uuid.uuid4().hex[:8]}",
                           group_id=f"wg-forged-{uuid.uuid4().hex[:8]}")
    assert forged.log_key == honest.log_key == log_signing_key()[0].verifier
    from tests.fixtures.readmodel import capture_body
    from tests.fixtures.writer import produce_captures

    produce_captures(forged.projection.bootstrap, forged.topics,
                     [capture_body("atw:a", output=f"rewritten {i}") for i in range(3)]
                     + [capture_body("atw:b", output=f"atw:b {i}") for i in range(3)])
    nobody = tmp_path / "no-witnesses"
    nobody.write_text("# the forger pushes to no witness\n")
    pub = start_publisher(forged, nobody)
    wait_until("the rewritten log's deployment checkpoint of both streams",
               lambda: pub.tree.last_size >= 2, 90, 0.3)

    code, rep = _audit(forged)  # alone, the rewritten log is consistent with itself
    assert code == 0, rep["findings"]
    assert rep["trees"]["deployment"]["latest_signed_size"] >= 2, rep["trees"]

    code, rep = _audit(forged, "--witness", lw.url, "--witness-key", lw.vkey)
    assert code == 3
    refused = [f for f in rep["findings"] if f["kind"] == "witness_refused"]
    assert refused and f"witness {lw.url}" in refused[0]["detail"], rep["findings"]
    assert rep["trees"]["deployment"]["witnessed"] == []

    # The witness kept the honest log's tree: the honest audit still passes with it.
    code, rep = _audit(honest, "--witness", lw.url, "--witness-key", lw.vkey)
    assert code == 0, rep["findings"]
