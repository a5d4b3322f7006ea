"""``evidence monitor`` against the real public read API (no key), over real Kafka and
PostgreSQL, with the deployment checkpoints pushed to and cosigned by litewitness.

A consistent log is CONSISTENT, and a second run checks that the log extends what the first
saw (its state file). Then whoever holds the log key forks one stream in the open: a
checkpoint of that stream with another root, signed with the log key, produced straight to
the tree topic. The deployment tree stays append-only, so the witness cosigns it (that is
not its job); the monitor, holding only the witnessed checkpoint and the public routes,
finds that the stream's checkpoints in the list are not prefixes of one tree and exits 3.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import Producer

from evidence_contract.note import Checkpoint, format_checkpoint, format_note, sign
from evidence_contract.tlog import (
    KIND_CHECKPOINT, KIND_HEADER, SIZE_HEADER, STREAM_HEADER, checkpoint_origin,
)
from tests.fixtures.writer import log_signing_key
from tests.integration.test_publisher import (  # noqa: F401 - fixture
    _capture, _cosigned_by, start_publisher,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

FAST = {"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.3"}


def _monitor(p, lw, state, *args):
    proc = subprocess.run([sys.executable, "-m", "cli.main", "monitor", "--log",
                           f"{p.api_url}/log", "--witness-key", lw.vkey, "--state-file",
                           str(state), "--json", *args],
                          env={k: v for k, v in p.env().items() if k != "EVIDENCE_API_KEY"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 3), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_the_monitor_follows_the_public_log_and_finds_a_forked_stream(
        make_pipeline, make_litewitness, start_publisher, tmp_path):
    p = make_pipeline(env=FAST)
    lw = make_litewitness()
    lw.add_log(p.log_key.name, p.log_key)
    listed = tmp_path / "witnesses"
    listed.write_text(f"{lw.vkey} {lw.url}\n")
    _capture(p, ["mon:a", "mon:b"], 3)
    start_publisher(p, listed)
    cp, _ = _cosigned_by(p, lw.verifier, at_least=2)
    state = tmp_path / "monitor.json"

    code, rep = _monitor(p, lw, state)
    assert code == 0, rep["findings"]
    assert rep["cosigners"] == [lw.verifier.name] and rep["checked_from_size"] is None
    assert {"mon:a", "mon:b"} <= {s["stream"] for s in rep["streams"]}
    first = rep["size"]

    _capture(p, ["mon:a"], 2)
    _cosigned_by(p, lw.verifier, at_least=first + 1)
    code, rep = _monitor(p, lw, state)
    assert code == 0, rep["findings"]
    assert rep["checked_from_size"] == first and rep["size"] > first

    # The fork, in the open: mon:b's checkpoint of size 2 with another root, log-signed.
    key = log_signing_key()[0]
    text = format_checkpoint(Checkpoint(checkpoint_origin(key.name, "mon:b"), 2, b"\x66" * 32))
    producer = Producer({"bootstrap.servers": p.projection.bootstrap, "acks": "all"})
    producer.produce(p.topics.names.tree, format_note(text, [sign(key, text)]),
                     key.name.encode(), partition=0,
                     headers=[(KIND_HEADER, KIND_CHECKPOINT.encode()),
                              (STREAM_HEADER, b"mon:b"), (SIZE_HEADER, b"2")])
    assert producer.flush(30) == 0
    _cosigned_by(p, lw.verifier, at_least=rep["size"] + 1)  # append-only: the witness signs

    code, rep = _monitor(p, lw, state)
    assert code == 3
    forked = [f for f in rep["findings"] if f["kind"] == "stream_forked"]
    assert [f["stream"] for f in forked] == ["mon:b"], rep["findings"]
    assert "not prefixes of one tree" in forked[0]["detail"]
