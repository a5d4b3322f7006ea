"""Erasure end to end against real Kafka and PostgreSQL: encrypted captures of three subjects
through the real writer and projector; one erased with ``evidence erase``, one through
``POST /admin/erasures``, one untouched. The key store says KeyErased, a receipt signed by the
log key is on ``evidence.erasures`` and in the projection (once per request id, retries
included), the audit stays clean, and no stored commitment of the erased content matches
any value computed from its plaintext without the destroyed key."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import psycopg
import pytest

from api import Keyring, Settings
from evidence_client import call_context
from evidence_client.keystore import FileKeyStore
from evidence_contract import content_key, response_digest, split_record
from evidence_contract.erasure import open_receipt
from evidence_contract.keys import KeyErased
from evidence_contract.sealing import LocalKek, SubjectKeys, new_data_key
from tests.fixtures.audit import evidence
from tests.fixtures.keystore import file_key_store
from tests.fixtures.log import wait_until
from tests.fixtures.writer import log_signing_key, read_all

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
STREAM = "bank:support"
SUBJECTS = ("user-ada", "user-bob", "user-cy")
SECRET = {s: f"My name is {s} and my salary is {52_000 + i} GBP" for i, s in enumerate(SUBJECTS)}
ADMIN = secrets.token_hex(32)


@pytest.fixture
def erasure_stack(tmp_path, make_pipeline, make_recorder, fake_provider, make_api_server):
    store, store_env = file_key_store(tmp_path)
    p = make_pipeline(partitions=2)
    recorder = make_recorder(p.topics, stream=STREAM, content_policy="encrypt", key_store=store)
    client = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="k", max_retries=0,
                           http_client=recorder.http_client())
    for subject in SUBJECTS:
        for _ in range(2):
            with call_context(subject=subject, input=SECRET[subject]):
                client.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": SECRET[subject]}])
    p.wait_records(STREAM, 6, timeout=60)
    # An API of the pipeline's read model with an admin key and the key store.
    log_key = log_signing_key()[0]
    settings = Settings(p.projection.database_url,
                        Keyring([("reader", p.api_key, ["*"]), ("admin", ADMIN, [], True)]),
                        views_schema=p.projection.views_schema, log_name=log_key.name,
                        log_key=log_key.verifier, kafka_bootstrap=p.projection.bootstrap,
                        topic_prefix=p.topics.names.prefix,
                        key_store_env={**store_env,
                                       "EVIDENCE_DATABASE_URL": p.projection.database_url})
    admin_url = make_api_server(settings)
    return p, store, store_env, admin_url, fake_provider


def _erasures(p) -> list[tuple]:
    with psycopg.connect(p.projection.database_url, autocommit=True) as conn:
        return conn.execute(
            f'select request_id, key_id, erased_at_us, note, reason from '
            f'"{p.projection.views_schema}".erasures order by request_id, key_id').fetchall()


def _receipts(p) -> list:
    return read_all(p.projection.bootstrap, p.topics.names.erasures)


def _cli_erase(p, store_env, *args) -> subprocess.CompletedProcess:
    env = {**p.env(), **store_env, "EVIDENCE_PG_VIEWS_SCHEMA": p.projection.views_schema}
    return subprocess.run([sys.executable, "-m", "cli.main", "erase", *args], env=env,
                          capture_output=True, timeout=90, cwd=ROOT)


def test_erasing_by_cli_and_rest_receipts_once_shreds_one_subject_and_audits_clean(
        erasure_stack):
    p, store, store_env, admin_url, fake = erasure_stack
    keys = {s: store.data_key(s) for s in SUBJECTS}
    log_key = log_signing_key()[0].verifier

    # 1. `evidence erase` with --wait prints the receipt the log signed.
    out = _cli_erase(p, store_env, "--subject", "user-ada", "--request-id", "dsr-ada",
                     "--reason", "GDPR art. 17", "--wait", "45")
    assert out.returncode == 0, out.stderr.decode()
    request_id, note = out.stdout.split(b"\n", 1)  # the request id, then the receipt
    receipt = open_receipt(note, log_key)
    assert receipt.request_id == request_id.decode() == "dsr-ada"
    assert receipt.key_ids == (keys["user-ada"].key_id,)
    assert b"user-ada" not in out.stdout  # the receipt names key ids, never the subject

    # 2. The REST route: 403 for a key without the admin role, 202 for the admin.
    with httpx.Client(base_url=admin_url, timeout=30) as api:
        r = api.post("/admin/erasures", json={"subject": "user-bob"},
                     headers={"Authorization": f"Bearer {p.api_key}"})
        assert r.status_code == 403 and "admin role" in r.json()["message"]
        assert store.key(keys["user-bob"].key_id) == keys["user-bob"]
        r = api.post("/admin/erasures", json={"subject": "user-bob", "request_id": "dsr-bob"},
                     headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 202, r.text
        assert r.json()["request_id"] == "dsr-bob"
        assert r.json()["key_ids"] == [keys["user-bob"].key_id]
        # 3. Retries of the same request id, by both paths: still one receipt each.
        r = api.post("/admin/erasures", json={"subject": "user-bob", "request_id": "dsr-bob"},
                     headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 202 and r.json()["key_ids"] == [keys["user-bob"].key_id]
    again = _cli_erase(p, store_env, "--subject", "user-ada", "--request-id", "dsr-ada")
    assert again.returncode == 0, again.stderr.decode()
    # 4. No keys, nothing sealed (the receipts below are still the two): a subject never seen,
    # and one already erased under another request id.
    for subject, says in (("user-nobody", b"no keys to erase"),
                          ("user-ada", b"erased before, under request dsr-ada")):
        none = _cli_erase(p, store_env, "--subject", subject, "--request-id", "dsr-none")
        assert none.returncode == 4 and none.stdout == b"", none.stderr.decode()
        assert says in none.stderr and b"--seal-if-none" in none.stderr

    wait_until("both receipts projected",
               lambda: {r[0] for r in _erasures(p)} == {"dsr-ada", "dsr-bob"}, 45, 0.2)
    # The writer took both retries and receipted neither again.
    p.writer.wait_event("erasure_duplicate", timeout=30, count=2)
    assert len([e for e in p.writer.events() if e.get("event") == "erasure_receipted"]) == 2

    # The key store: both erased, the third subject untouched.
    for s, rid in (("user-ada", "dsr-ada"), ("user-bob", "dsr-bob")):
        with pytest.raises(KeyErased) as e:
            store.key(keys[s].key_id)
        assert e.value.request_id == rid
    assert store.key(keys["user-cy"].key_id) == keys["user-cy"]

    # evidence.erasures: one signed receipt per request id (the retries gave none).
    msgs = _receipts(p)
    opened = [open_receipt(m.value(), log_key) for m in msgs]
    assert sorted(r.request_id for r in opened) == ["dsr-ada", "dsr-bob"]
    assert {r.request_id: r.key_ids for r in opened} == {
        "dsr-ada": (keys["user-ada"].key_id,), "dsr-bob": (keys["user-bob"].key_id,)}
    assert all(m.key() == r.request_id.encode() for m, r in zip(msgs, opened))
    for m in msgs:
        for s in SUBJECTS:
            assert s.encode() not in m.value()

    # The projection: the receipts verbatim, one row per key, the reason kept beside.
    rows = _erasures(p)
    assert [(r[0], bytes(r[1]).hex(), r[4]) for r in rows] == [
        ("dsr-ada", keys["user-ada"].key_id, "GDPR art. 17"),
        ("dsr-bob", keys["user-bob"].key_id, None)]
    assert {bytes(r[3]) for r in rows} == {m.value() for m in msgs}
    with psycopg.connect(p.projection.database_url, autocommit=True) as conn:
        erased = conn.execute(
            f'select count(*) from "{p.projection.views_schema}".records r '
            f'join "{p.projection.views_schema}".erasures e using (key_id)').fetchone()[0]
        findings = conn.execute(
            f'select kind, detail from "{p.projection.views_schema}".findings').fetchall()
    assert erased == 4 and findings == []

    # The audit still passes: chain, digests over the ciphertext, proofs, projection.
    audit = evidence("audit", env={**p.env(), "EVIDENCE_PG_VIEWS_SCHEMA":
                                   p.projection.views_schema})
    assert audit.returncode == 0, (audit.stdout.decode(), audit.stderr.decode())

    # No guess confirmation: no commitment stored for the erased records matches a value
    # computed from the true plaintext without the destroyed key — plain SHA-256, the plain
    # digests' definitions, or the keyed commitment under any other key.
    log = read_all(p.projection.bootstrap, p.topics.names.log)
    by_key = {}
    for m in log:
        _stored, rec = split_record(m.value())
        by_key.setdefault(rec["body"]["encryption"]["key_id"], []).append(rec["body"])
    requests = {s: [x.request_body for x in fake.seen if SECRET[s].encode() in x.request_body]
                for s in SUBJECTS}
    responses = {s: [x.response_body for x in fake.seen
                     if SECRET[s].encode() in x.request_body] for s in SUBJECTS}
    stored_values = {bytes(v) for bodies in by_key.values() for b in bodies
                     for v in (b["content_key"], b["response_digest"], b["input_digest"],
                               b["output_digest"]) if v is not None}
    wrong = SubjectKeys(keys["user-ada"].key_id, new_data_key())
    for s in ("user-ada", "user-bob"):
        assert len(by_key[keys[s].key_id]) == 2
        for plain in [SECRET[s].encode(), *requests[s], *responses[s]]:
            guesses = {hashlib.sha256(plain).digest(), content_key(plain),
                       response_digest(plain), wrong.content_key(plain),
                       wrong.response_digest(plain), wrong.input_digest(plain)}
            assert not guesses & stored_values, f"a guess of {s}'s content matched"
    # The keyed commitment is recomputable only with the live key: the untouched subject's is.
    live = SubjectKeys(keys["user-cy"].key_id, keys["user-cy"].material)
    assert {live.content_key(r) for r in requests["user-cy"]} == {
        bytes(b["content_key"]) for b in by_key[keys["user-cy"].key_id]}
    # And the projection's copies of the erased records are the log's: only envelopes.
    with psycopg.connect(p.projection.database_url, autocommit=True) as conn:
        stored_rows = conn.execute(
            f'select content_key, response_digest, input_digest, request_bytes, '
            f'response_bytes, input_bytes from "{p.projection.views_schema}".records').fetchall()
    for row in stored_rows:
        blob = b"".join(bytes(v) for v in row if v is not None)
        for s in SUBJECTS:
            assert SECRET[s].encode() not in blob
        assert not {bytes(v) for v in row[:3] if v is not None} - stored_values


def test_a_writer_without_a_log_key_refuses_loudly_and_a_signing_one_receipts_the_retry(
        kafka_bootstrap, make_topics, run_writer, tmp_path):
    from evidence_contract.erasure import ErasureRequest, decode_request, encode_request
    from server.erasure import erase_subject
    from tests.fixtures.writer import make_capture, produce_captures, wait_for_count

    settings = make_topics(partitions=1)
    store = FileKeyStore(tmp_path / "keys", LocalKek(bytes(32)))
    key = store.data_key("user-1")
    unsigned = run_writer(settings, signing=False)
    req = erase_subject(store, {"bootstrap.servers": kafka_bootstrap}, "user-1", "dsr-1",
                        topics=settings.names)
    assert req == ErasureRequest("dsr-1", (key.key_id,), req.erased_at)
    refused = unsigned.wait_event("erasure_refused")
    assert refused["level"] == "error" and refused["request_id"] == "dsr-1"
    # The offset committed: the partition goes on sealing behind the refused request.
    produce_captures(kafka_bootstrap, settings, [make_capture("acme:a")])
    wait_for_count(kafka_bootstrap, settings.names.log, 1, 30, unsigned.assert_alive)
    assert read_all(kafka_bootstrap, settings.names.erasures) == []
    unsigned.terminate(20)

    # With the log key, the same request id again (the keys already destroyed) is receipted
    # with the key ids of the first attempt.
    signing = run_writer(settings)
    again = erase_subject(store, {"bootstrap.servers": kafka_bootstrap}, "user-1", "dsr-1",
                          topics=settings.names)
    assert again.key_ids == (key.key_id,)
    [m] = wait_for_count(kafka_bootstrap, settings.names.erasures, 1, 30, signing.assert_alive)
    assert open_receipt(m.value(), log_signing_key()[0].verifier).key_ids == (key.key_id,)
    assert decode_request(encode_request(again)) == again
