"""``evidence harness`` as a subprocess: records captured by the real gateway against the fake
provider, sealed by the real writer, projected, served by the API on a free port."""

import json
import sys
import uuid

import openai
import pytest

from api import Keyring, Settings
from tests.fixtures.audit import evidence

pytestmark = pytest.mark.integration

STREAM = "acme:harness"

# A re-executor as a user would write one: the recorded request to the recorded endpoint.
REEXECUTE = """\
import os, sys, httpx
r = httpx.post(os.environ["EVIDENCE_PROVIDER_ENDPOINT"], content=sys.stdin.buffer.read(),
               headers={"content-type": "application/json"}, timeout=30)
sys.stdout.buffer.write(r.content)
"""


@pytest.fixture
def harness(make_sealed, make_recorder, fake_provider, make_api_server, database_url,
            tmp_path):
    s = make_sealed({})
    recorder = make_recorder(s.topics, stream=STREAM)
    client = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="sk-test",
                           max_retries=0, http_client=recorder.http_client())
    for word in ("one", "two"):
        client.chat.completions.create(model="gpt-4o", seed=1,
                                       messages=[{"role": "user", "content": word}])
    for _ in client.chat.completions.create(model="gpt-4o-mini", stream=True,
                                            messages=[{"role": "user", "content": "three"}]):
        pass
    recorder.close()
    s.counts[STREAM] = 3
    s.wait_sealed()
    key = f"harness-{uuid.uuid4().hex}"
    url = make_api_server(Settings(database_url, Keyring([("h", key, ["*"])]),
                                   views_schema=s.cfg.views_schema,
                                   kafka_bootstrap=s.cfg.bootstrap,
                                   topic_prefix=s.topics.names.prefix))
    script = tmp_path / "reexecute.py"
    script.write_text(REEXECUTE)

    def run(*args):
        p = evidence("harness", "--api", url, *args,
                     env=s.env(EVIDENCE_API_KEY=key), timeout=90)
        return p.returncode, p.stdout.decode(), p.stderr.decode()

    run.sealed, run.reexecute = s, f"{sys.executable} {script}"
    return run


def test_a_clean_run_exits_0(harness, tmp_path):
    report_file = tmp_path / "report.json"
    code, out, err = harness("--all", "--report", str(report_file))
    assert code == 0, (out, err)
    assert "reconstruction: 3/3 byte-identical" in out and "RECONSTRUCTION OK" in out
    report = json.loads(report_file.read_text())
    assert report["ok"] is True and report["live"] is None
    assert report["reconstruction"] == {"checked": 3, "failed": 0, "failures": []}
    assert report["log_records"] == 3 and report["sampled"] == 3

    code, out, _ = harness("--stream", STREAM, "--sample", "2", "--seed", "7", "--report", "-")
    assert code == 0 and json.loads(out)["sampled"] == 2


def test_a_tampered_projection_fails_reconstruction_naming_the_record(harness):
    harness.sealed.sql("update {v}.records set response_bytes = %s "
                       "where stream = %s and seq = 2", (b'{"forged":true}', STREAM))
    code, out, err = harness("--all", "--report", "-")
    assert code == 3, (out, err)
    report = json.loads(out)
    [failure] = report["reconstruction"]["failures"]
    assert (failure["stream"], failure["seq"]) == (STREAM, 2)
    # The API heals its answer (the log's bytes) and says so; the record route shows the row.
    assert any("/replay served the log's copy" in p for p in failure["problems"])
    assert any("response_b64" in p for p in failure["problems"])
    assert f"{STREAM}#2" in err and "RECONSTRUCTION FAILED" in err


def test_live_reexecution_that_reproduces_the_record_matches_100_percent(harness, tmp_path):
    code, out, err = harness("--all", "--live-cmd", harness.reexecute, "--report", "-")
    assert code == 0, (out, err)
    live = json.loads(out)["live"]
    assert live["overall"]["runs"] == 3 and live["overall"]["errors"] == 0
    assert live["overall"]["response_match_rate"] == 1.0
    assert live["overall"]["output_match_rate"] == 1.0
    assert set(live["by_model_id"]) == {"gpt-4o", "gpt-4o-mini"}
    assert live["by_model_id"]["gpt-4o"]["runs"] == 2
    assert list(live["by_fingerprint"]) == ["fp_fake_2026"]
    assert live["divergent"] == []
    assert "response match 100.0%" in err


def test_live_divergence_is_reported_but_never_fails(harness):
    altered = harness.reexecute + " | sed 's/echo/ECHO/'"
    code, out, err = harness("--all", "--live-cmd", altered, "--report", "-")
    assert code == 0, (out, err)
    report = json.loads(out)
    live = report["live"]
    assert report["reconstruction"]["failed"] == 0
    assert live["overall"]["response_match_rate"] == 0.0
    assert live["overall"]["output_match_rate"] == 0.0
    assert {(d["seq"], d["status"]) for d in live["divergent"]} == {
        (1, "diverged"), (2, "diverged"), (3, "diverged")}
    # A re-executor that fails is counted as an error, still not a failure.
    code, out, _ = harness("--sample", "1", "--live-cmd", "exit 4", "--report", "-")
    assert code == 0 and json.loads(out)["live"]["overall"]["errors"] == 1


@pytest.mark.parametrize("args", [["--sample", "0"], ["--sample", "1", "--all"],
                                  ["--stream", "bad stream"], ["--live-timeout", "0"]])
def test_usage_errors_exit_2(args):
    p = evidence("harness", *args, env={"PATH": "/usr/bin:/bin"})
    assert p.returncode == 2, p.stderr


def test_an_unreachable_api_exits_1(harness):
    p = evidence("harness", "--api", "http://127.0.0.1:9", "--all",
                 env=harness.sealed.env(EVIDENCE_API_KEY="k"))
    assert p.returncode == 1 and b"cannot reach the API" in p.stderr, p.stderr
