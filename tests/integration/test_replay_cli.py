"""``evidence replay`` as a subprocess against the API running on a free port."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from api import Keyring, Settings
from tests.fixtures.api_server import serve_api
from tests.fixtures.readmodel import ReadModel

pytestmark = pytest.mark.integration

KEY = "cli-key-0123456789"
EVIDENCE = str(Path(sys.executable).parent / "evidence")


@pytest.fixture(scope="module")
def api(database_url):
    with ReadModel(database_url) as rm:
        recs = {"det": rm.add("cli:chat", output="The answer is 42."),
                "nondet": rm.add("cli:chat", output="drifty", seed=None),
                "other": rm.add("other:chat", output="not yours")}
        settings = Settings(database_url, Keyring([("cli", KEY, ["cli:*"])]),
                            views_schema=rm.views)
        with serve_api(settings) as url:
            yield url, recs


def replay(api_url, *args, env_api=False):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVIDENCE_API")}
    argv = [EVIDENCE, "replay", *args, "--no-verify"]  # a synthetic read model: no log
    if env_api:
        env.update(EVIDENCE_API_URL=api_url, EVIDENCE_API_KEY=KEY)
    else:
        argv += ["--api", api_url, "--api-key", KEY]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)


def test_match_exits_0_with_a_verdict_block(api):
    url, recs = api
    p = replay(url, "--stream", "cli:chat", "--seq", "1", "--output", "The answer is 42.")
    assert p.returncode == 0, p.stderr
    assert "=== Replay MATCH (stream=cli:chat seq=1) ===" in p.stdout
    digest = recs["det"].body["output_digest"].hex()
    assert f"original_hash:  {digest}" in p.stdout and f"replay_hash:    {digest}" in p.stdout
    assert "deterministic:  true" in p.stdout
    assert "model_version:  gpt-4o-mini-2024-07-18" in p.stdout


def test_mismatch_exits_3_and_says_why(api):
    url, _ = api
    p = replay(url, "--stream", "cli:chat", "--seq", "2", "--output", "other")
    assert p.returncode == 3, p.stderr
    assert "MISMATCH" in p.stdout and "drift is expected" in p.stdout


def test_event_id_output_file_and_env_defaults(api, tmp_path):
    url, recs = api
    f = tmp_path / "replay.txt"
    f.write_text("The answer is 42.", encoding="utf-8")
    p = replay(url, "--event-id", recs["det"].event_id, "--output-file", str(f), env_api=True)
    assert p.returncode == 0, p.stderr
    f.write_text("The answer is 42.\n", encoding="utf-8")  # a trailing newline counts
    assert replay(url, "--event-id", recs["det"].event_id, "--output-file", str(f)).returncode == 3


def test_response_file_and_json_output(api, tmp_path):
    url, recs = api
    f = tmp_path / "body.json"
    f.write_bytes(recs["det"].body["response_bytes"])
    p = replay(url, "--stream", "cli:chat", "--seq", "1", "--response-file", str(f), "--json")
    assert p.returncode == 0, p.stderr
    answer = json.loads(p.stdout)
    assert answer["match"] is True and answer["compared"] == "response_digest"


@pytest.mark.parametrize("args, words", [
    (["--stream", "cli:chat", "--seq", "99", "--output", "x"], "no record"),
    (["--stream", "other:chat", "--seq", "1", "--output", "not yours"], "no record"),
    (["--stream", "cli:chat", "--seq", "1", "--output-file", "/nonexistent/replay.txt"],
     "no such file"),
])
def test_missing_record_or_file_exits_1(api, args, words):
    url, _ = api
    p = replay(url, *args)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert words in p.stderr


def test_unreachable_api_exits_1_and_says_what_to_do():
    p = replay("http://127.0.0.1:9", "--stream", "cli:chat", "--seq", "1", "--output", "x")
    assert p.returncode == 1
    assert "cannot reach the API" in p.stderr and "make up" in p.stderr


@pytest.mark.parametrize("args, words", [
    (["--stream", "cli:chat", "--seq", "1"], "exactly one of --output"),
    (["--stream", "cli:chat", "--seq", "1", "--output", "a", "--response-file", "f"],
     "exactly one of --output"),
    (["--seq", "1", "--output", "a"], "--seq needs --stream"),
    (["--stream", "cli:chat", "--output", "a"], "--stream needs --seq"),
    (["--output", "a"], "name the record"),
    (["--stream", "cli:chat", "--seq", "one", "--output", "a"], "invalid int value"),
])
def test_usage_errors_exit_2(args, words):
    p = replay("http://127.0.0.1:9", *args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert words in p.stderr
