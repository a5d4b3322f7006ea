"""``evidence demo`` as a subprocess against a writer, projector and API of the test's own
(topics, schemas and key passed as EVIDENCE_* variables, as `make up` passes the stack's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devstack.ports import free_port

pytestmark = pytest.mark.integration

EVIDENCE = str(Path(sys.executable).parent / "evidence")


# The demo bounds its own waits (60 s for the records by default, 15 s for a checkpoint, 10 s
# an API request) and says what is stuck when one runs out; this outer bound is only a safety
# net, larger than their sum, so a slow shared machine meets the demo's message, not a
# TimeoutExpired without output.
DEMO_TIMEOUT_S = 240


def demo(env, *args, timeout=DEMO_TIMEOUT_S):
    return subprocess.run([EVIDENCE, "demo", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_demo_records_verifies_and_replays_on_the_stack(make_pipeline, tmp_path):
    p = make_pipeline()
    env = {**p.env(), "EVIDENCE_SPOOL_DIR": str(tmp_path / "spool")}
    run = demo(env, "--stream", "demo:test")
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "=== Replay MATCH (stream=demo:test seq=1) ===" in out
    assert "=== Replay MISMATCH (stream=demo:test seq=1) ===" in out
    assert "re-execute against the same model version" in out
    assert "byte for byte what the provider sent: yes" in out
    assert "raises ReplayMiss" in out and "Look next:" in out

    records = p.wait_records("demo:test", 3)
    assert [r["seq"] for r in records] == [1, 2, 3]
    assert [r["outcome"] for r in records] == ["COMMITTED"] * 3
    assert [r["streamed"] for r in records] == [False, True, False]

    assert "verified before it was handed out: in the checkpoint" in out

    # Someone with database access alters the recorded answer the demo replays (record 1,
    # the earliest with its content key): the API serves the log's bytes, reports it, and the
    # demo works as before.
    import psycopg

    with psycopg.connect(p.projection.database_url, autocommit=True) as conn:
        conn.execute(f'update "{p.projection.views_schema}".records set response_bytes = '
                     f"response_bytes || 'x'::bytea where stream = 'demo:test' and seq = 1")

    # Again: new records after the old ones, and the same verdicts.
    again = demo(env, "--stream", "demo:test")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "byte for byte what the provider sent: yes" in again.stdout
    findings = p.api.get("/streams/demo:test").json()["findings"]
    assert ("projection_altered", 1) in [(f["kind"], f["seq"]) for f in findings]
    assert "=== Replay MATCH (stream=demo:test seq=4) ===" in again.stdout
    assert "=== Replay MISMATCH (stream=demo:test seq=4) ===" in again.stdout


def test_demo_names_the_writer_and_projector_logs_when_records_never_appear(
        make_pipeline, tmp_path):
    p = make_pipeline()
    assert p.writer.terminate() == 0  # captures reach intake; nothing seals them
    env = {**p.env(), "EVIDENCE_SPOOL_DIR": str(tmp_path / "spool")}
    run = demo(env, "--stream", "demo:stuck", "--timeout", "2")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "0 of 3 captures are queryable after 2 s" in run.stderr
    assert "writer.log" in run.stderr and "projector.log" in run.stderr


def test_demo_without_an_api_says_to_run_make_up(tmp_path):
    port = free_port()  # nothing listens there
    env = {"PATH": "/usr/bin:/bin", "EVIDENCE_API_URL": f"http://127.0.0.1:{port}",
           "EVIDENCE_API_KEY": "k", "EVIDENCE_KAFKA_BOOTSTRAP": "127.0.0.1:1",
           "EVIDENCE_SPOOL_DIR": str(tmp_path / "spool")}
    run = demo(env)
    assert run.returncode == 1
    assert "cannot reach the API" in run.stderr and "make up" in run.stderr
    assert "api.log" in run.stderr
