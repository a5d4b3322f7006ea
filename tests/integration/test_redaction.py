"""Redaction as a projection against real Kafka and PostgreSQL: plain captures through the real
Recorder, writer and projector with EVIDENCE_REDACTION_FILE set. The API serves masked bodies
and withholds the log message (its SHA-256 and leaf hash instead, which match the log and
fold into the tree); the log is unchanged; the API's stream audit and ``evidence audit`` are
clean; a rebuild records and re-applies the policy and swaps, and one under a changed policy
says so, re-masks every row and stays clean."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import time

import openai
import psycopg
import pytest

from evidence_contract.merkle import record_leaf_hash
from projections.rebuild import rebuild
from tests.fixtures.audit import evidence
from tests.fixtures.writer import read_all

pytestmark = pytest.mark.integration

STREAM = "acme:redacted"
CARD = "4111-1111-1111-1111"


def policy_file(tmp_path, mask: str):
    f = tmp_path / f"redaction-{len(mask)}.json"
    f.write_text(json.dumps({"streams": ["acme:*"], "patterns": ["4111(-[0-9]{4}){3}"],
                             "mask": mask}))
    return str(f)


def bodies(p) -> list[dict]:
    r = p.api.get(f"/streams/{STREAM}/records", params={"include": "bytes"})
    assert r.status_code == 200, r.text
    return r.json()["records"]


def recorded_policy(p):
    with psycopg.connect(p.projection.database_url, autocommit=True) as conn:
        return conn.execute(f'select policy, digest from "{p.projection.views_schema}".redaction'
                            ).fetchone()


def audit_clean(p, env) -> None:
    a = p.api.get(f"/streams/{STREAM}/audit").json()
    assert a["clean"] is True, a
    out = evidence("audit", env=env)
    assert out.returncode == 0, (out.stdout.decode(), out.stderr.decode())


def test_a_redacted_projection_serves_masked_bodies_audits_clean_and_rebuilds(
        tmp_path, make_pipeline, make_recorder, fake_provider):
    p = make_pipeline(projection_options={"redaction_file": policy_file(tmp_path, "[CARD]")})
    recorder = make_recorder(p.topics, stream=STREAM)
    client = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="k", max_retries=0,
                           http_client=recorder.http_client())
    for i in range(2):
        client.chat.completions.create(
            model="gpt-4o", seed=i, messages=[{"role": "user", "content": f"pay with {CARD}"}])
    recorder.close()
    p.wait_records(STREAM, 2, timeout=60)
    env = {**p.env(), "EVIDENCE_PG_VIEWS_SCHEMA": p.projection.views_schema}

    # The log is unchanged: the card number is in its messages.
    log = {m.value() for m in read_all(p.projection.bootstrap, p.topics.names.log)}
    assert len(log) == 2 and all(CARD.encode() in v for v in log)

    # The generation records its policy; the API masks bodies and withholds the message.
    policy, digest = recorded_policy(p)
    assert policy["mask"] == "[CARD]" and len(bytes(digest)) == 32
    for r in bodies(p):
        request = base64.b64decode(r["request_b64"])
        assert CARD.encode() not in request and b"[CARD]" in request
        for name in ("response_b64", "input_b64", "prompt_b64", "error_b64"):
            if r.get(name):
                assert CARD.encode() not in base64.b64decode(r[name])
        assert r["record_b64"] is None
        [message] = [v for v in log if hashlib.sha256(v).hexdigest() == r["record_sha256"]]
        assert r["record_leaf_hash"] == record_leaf_hash(message).hex()
        proof = p.api.get(f"/streams/{STREAM}/proof/inclusion", params={"seq": r["seq"]})
        if proof.status_code == 200:
            assert proof.json().get("leaf_hash", r["record_leaf_hash"]) == r["record_leaf_hash"]
    assert CARD not in json.dumps(p.api.get(f"/streams/{STREAM}/records/1",
                                            params={"include": "bytes"}).json())
    audit_clean(p, env)

    # A rebuild under the same policy re-applies it, compares the bodies, and swaps.
    cfg = p.projection
    result = rebuild(cfg)
    assert result.previous and result.generation != result.previous
    assert not [w for w in result.warnings if "redaction" in w], result.warnings
    assert recorded_policy(p)[1] == digest
    assert all(CARD.encode() not in base64.b64decode(r["request_b64"]) for r in bodies(p))
    audit_clean(p, env)

    # A changed policy: the rebuild says so, re-masks every row, and the audit stays clean.
    changed = dataclasses.replace(cfg, redaction_file=policy_file(tmp_path, "[PAN REMOVED]"))
    result = rebuild(changed)
    assert any("redaction policy changed" in w for w in result.warnings), result.warnings
    assert recorded_policy(p)[0]["mask"] == "[PAN REMOVED]"
    deadline = time.monotonic() + 10
    while True:  # the API caches the live policy for a few seconds
        served = [base64.b64decode(r["request_b64"]) for r in bodies(p)]
        if all(b"[PAN REMOVED]" in b for b in served) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert all(b"[PAN REMOVED]" in b and CARD.encode() not in b for b in served)
    audit_clean(p, {**env, "EVIDENCE_REDACTION_FILE": changed.redaction_file})
    assert {m.value() for m in read_all(p.projection.bootstrap, p.topics.names.log)} == log
