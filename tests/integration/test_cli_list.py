"""`evidence list`, `evidence stats` and `evidence inspect` as subprocesses against a real
pipeline: calls through the real Recorder (against the fake provider), plain and encrypted,
one subject erased with `evidence erase`, sealed by the real writer, projected, served by the
API. Every filter of `list`, its paging, stats with and without usage, inspect verified and,
after the projection is altered in SQL, NOT VERIFIED."""

from __future__ import annotations

import json
import uuid

import openai
import psycopg
import pytest

from evidence_client import call_context
from tests.fixtures.audit import evidence
from tests.fixtures.keystore import file_key_store

pytestmark = pytest.mark.integration


def chat(client, model, text, **kw):
    return client.chat.completions.create(model=model, seed=1,
                                          messages=[{"role": "user", "content": text}], **kw)


@pytest.fixture
def recorded(tmp_path, make_pipeline, make_recorder, fake_provider):
    tag = uuid.uuid4().hex[:8]
    chat_s, bank_s = f"lst{tag}:chat", f"lst{tag}:bank"
    store, store_env = file_key_store(tmp_path)
    p = make_pipeline(partitions=1)
    plain = make_recorder(p.topics, stream=chat_s)
    bank = make_recorder(p.topics, stream=bank_s, content_policy="encrypt", key_store=store)
    pc = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="k", max_retries=0,
                       http_client=plain.http_client())
    bc = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="k", max_retries=0,
                       http_client=bank.http_client())
    chat(pc, "gpt-4o", "one")                                         # chat #1
    for _ in chat(pc, "gpt-4o", "two", stream=True):                  # chat #2: no usage
        pass
    chat(pc, "gpt-4o-mini", "<script>alert(1)</script>")              # chat #3
    with pytest.raises(openai.RateLimitError):
        chat(pc, "fail-429", "four")                                  # chat #4: FAILED
    for subject in ("user-ada", "user-bob"):                          # bank #1, #2
        with call_context(subject=subject):
            chat(bc, "gpt-4o", f"{subject} asks")
    plain.close()
    bank.close()
    p.wait_records(chat_s, 4, timeout=60)
    p.wait_records(bank_s, 2, timeout=60)
    env = {**p.env(), **store_env, "EVIDENCE_PG_VIEWS_SCHEMA": p.projection.views_schema}
    erase = evidence("erase", "--subject", "user-ada", "--request-id", f"dsr-{tag}", "--wait",
                     "45", env=env)
    assert erase.returncode == 0, erase.stderr.decode()
    return p, env, chat_s, bank_s, f"lst{tag}"


def listed(env, *args):
    out = evidence("list", "--format", "json", *args, env=env)
    assert out.returncode == 0, out.stderr.decode()
    doc = json.loads(out.stdout)
    return [(r["stream"], r["seq"]) for r in doc["records"]], doc["next_after"]


def test_every_filter_of_list_and_the_stats(recorded):
    p, env, chat_s, bank_s, prefix = recorded
    every = [(bank_s, 1), (bank_s, 2), (chat_s, 1), (chat_s, 2), (chat_s, 3), (chat_s, 4)]
    assert listed(env, "--stream", f"{prefix}:*") == (every, None)
    assert listed(env, "--stream", f"{prefix}:ch?t") == (every[2:], None)
    assert listed(env, "--stream", chat_s) == (every[2:], None)
    assert listed(env, "--stream", f"{prefix}:*", "--model", "gpt-4o")[0] == [
        (bank_s, 1), (bank_s, 2), (chat_s, 1), (chat_s, 2)]
    assert listed(env, "--stream", f"{prefix}:*", "--model", "gpt-4o-mini-2026-07-01")[0] == [
        (chat_s, 3)]                                                   # the model that answered
    assert listed(env, "--stream", f"{prefix}:*", "--outcome", "FAILED")[0] == [(chat_s, 4)]
    assert listed(env, "--stream", chat_s, "--fingerprint", "fp_fake_2026")[0] == every[2:5]
    assert listed(env, "--stream", f"{prefix}:*", "--encrypted")[0] == every[:2]
    assert listed(env, "--stream", f"{prefix}:*", "--no-encrypted")[0] == every[2:]
    erased = listed(env, "--stream", f"{prefix}:*", "--erased")[0]
    assert len(erased) == 1 and erased[0][0] == bank_s
    assert listed(env, "--stream", bank_s, "--no-erased")[0] == [
        r for r in every[:2] if r not in erased]

    records = p.api.get(f"/streams/{chat_s}/records").json()["records"]
    second, third = records[1]["occurred_at"], records[2]["occurred_at"]
    assert listed(env, "--stream", chat_s, "--since", second)[0] == every[3:]
    assert listed(env, "--stream", chat_s, "--since", second, "--until", third)[0] == [
        (chat_s, 2)]
    assert listed(env, "--stream", chat_s, "--until", "2000-01-01")[0] == []

    # Paging: --limit, then --after the cursor printed, until none is left.
    seen, after = [], []
    for _ in range(6):
        page, cursor = listed(env, "--stream", f"{prefix}:*", "--limit", "4", *after)
        seen += page
        if cursor is None:
            break
        after = ["--after", cursor]
    assert seen == every
    page, cursor = listed(env, "--stream", chat_s, "--limit", "1", "--after", "2")
    assert page == [(chat_s, 3)] and cursor == f"{chat_s}@3"

    # The table: a header and one line a record; the count on stderr.
    out = evidence("list", "--stream", chat_s, "--outcome", "FAILED", env=env)
    lines = out.stdout.decode().splitlines()
    assert out.returncode == 0 and lines[0].split()[:4] == ["stream", "seq", "sealed", "outcome"]
    assert len(lines) == 2 and "FAILED" in lines[1] and b"(1 record)" in out.stderr

    # A readable stream without records: none listed, exit 0; a key refused: exit 1; a bad
    # value: exit 2.
    empty = evidence("list", "--stream", f"{prefix}:none", env=env)
    assert empty.returncode == 0 and empty.stdout == b"" and b"(0 records)" in empty.stderr
    refused = evidence("list", env={**env, "EVIDENCE_API_KEY": "x" * 40})
    assert refused.returncode == 1 and b"401" in refused.stderr
    assert evidence("list", "--since", "noon", env=env).returncode == 2

    # Stats: per stream and per model; tokens where the response carries usage.
    out = evidence("stats", "--stream", f"{prefix}:*", "--format", "json", env=env)
    assert out.returncode == 0, out.stderr.decode()
    s = json.loads(out.stdout)
    c = s["streams"][chat_s]
    assert c["count"] == 4 and c["outcomes"] == {"COMMITTED": 3, "FAILED": 1, "UNKNOWN": 0}
    # #1 and #3 carry usage (5 in, 7 out); #2 is streamed without; #4 has no response body
    assert c["tokens"]["counted"] == 2 and c["tokens"]["without_usage"] == 1
    assert c["tokens"]["without_body"] == 1
    assert c["tokens"]["input"] == {"counted": 2, "p50": 5, "p90": 5, "p99": 5, "max": 5}
    assert c["tokens"]["output"]["max"] == 7
    assert c["latency_ms"]["counted"] == 4 and c["latency_ms"]["p50"] > 0
    assert c["first_sealed"] == records[0]["occurred_at"]
    assert c["last_sealed"] == records[3]["occurred_at"]
    b = s["streams"][bank_s]
    assert b["count"] == 2 and b["tokens"]["without_body"] == 2 and b["tokens"]["counted"] == 0
    assert s["models"]["gpt-4o"]["count"] == 4 and s["models"]["gpt-4o-mini"]["count"] == 1
    assert s["models"]["fail-429"]["outcomes"]["FAILED"] == 1
    assert s["total"]["count"] == 6
    out = evidence("stats", "--stream", chat_s, "--model", "gpt-4o-mini", env=env)
    text = out.stdout.decode()
    assert out.returncode == 0 and "=== per stream ===" in text and "gpt-4o-mini" in text
    assert "tokens counted for 1" in text


def test_inspect_verifies_and_then_sees_the_projection_altered(recorded):
    p, env, chat_s, bank_s, _ = recorded
    out = evidence("inspect", "--stream", chat_s, "--seq", "3", env=env)
    text = out.stdout.decode()
    assert out.returncode == 0, out.stderr.decode()
    assert f"=== Record {chat_s} #3 ===" in text and "VERIFIED" in text
    for step in ("record", "inclusion", "checkpoint", "witnesses", "projection"):
        assert f"ok   {step}:" in text, text
    assert "<script>alert(1)</script>" in text and "\x1b" not in text   # shown as text
    assert "from the verified record" in text and "previous:" in text and "links" in text

    event_id = p.api.get(f"/streams/{bank_s}/records/2").json()["event_id"]
    out = evidence("inspect", "--event-id", event_id, "--format", "json", env=env)
    doc = json.loads(out.stdout)
    assert out.returncode == 0, out.stderr.decode()
    assert doc["record"]["seq"] == 2 and doc["verification"]["verified"] is True
    assert doc["chain"]["previous"]["links"] is True and doc["chain"]["next"] is None
    assert doc["bodies"]["source"].startswith("the API (")  # encrypted or erased: not plain

    with psycopg.connect(p.projection.database_url, autocommit=True) as conn:
        conn.execute(f'update "{p.projection.views_schema}".records set model_id = %s '
                     f"where stream = %s and seq = 3", ("gpt-5-tampered", chat_s))
    out = evidence("inspect", "--stream", chat_s, "--seq", "3", "--format", "json", env=env)
    assert out.returncode == 4, out.stderr.decode()
    doc = json.loads(out.stdout)
    failed = [s for s in doc["verification"]["steps"] if not s["ok"]]
    assert [s["step"] for s in failed] == ["projection"]
    assert "model_id: served 'gpt-5-tampered', sealed 'gpt-4o-mini'" in failed[0]["detail"]
    assert b"NOT VERIFIED" in out.stderr

    gone = evidence("inspect", "--stream", chat_s, "--seq", "99", env=env)
    assert gone.returncode == 1 and b"no such record" in gone.stderr
