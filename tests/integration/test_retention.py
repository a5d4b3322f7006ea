"""Retention end to end against real Kafka and PostgreSQL: encrypted captures in two epochs
(the gateway and the key store on one fake clock), the real writer, the shredder through
erase_subject: the old epoch's keys are shredded and receipted by the log key, the new
epoch's stay open, and a held subject is shredded only once released."""

from __future__ import annotations

import sys

import openai
import pytest

from evidence_client import call_context
from evidence_contract import split_record
from evidence_contract.erasure import open_receipt
from evidence_contract.keys import KeyErased
from evidence_contract.sealing import LocalKek, SubjectKeys, open_body
from server.erasure import producer_config
from server.keystore import PgKeyStore
from server.retention import parse_policy, run_once, status
from tests.fixtures.keystore import FakeClock
from tests.fixtures.provider import read_intake
from tests.fixtures.writer import (
    WriterProcess,
    log_signing_key,
    verify_log,
    wait_for_count,
    writer_env,
)

pytestmark = pytest.mark.integration

KEK = LocalKek(bytes(range(32)))
POLICY = parse_policy({"classes": {"short": {"keep_days": 30}}, "streams": {"acme:*": "short"}})


def test_a_retention_run_shreds_the_old_epoch_only_and_a_held_subject_once_released(
        tmp_path, topics, make_recorder, fake_provider, kafka_bootstrap, database_url,
        pg_schema):
    clock = FakeClock("2024-05-01T12:00:00")
    store = PgKeyStore(database_url, KEK, schema=pg_schema, clock=clock).create()
    recorder = make_recorder(topics, stream="acme:chat", content_policy="encrypt",
                             key_store=store, key_clock=clock, key_cache_s=3600)
    client = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="k", max_retries=0,
                           http_client=recorder.http_client())

    def call(subject: str) -> None:
        with call_context(subject=subject):
            client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": f"I am {subject}"}])

    call("user-ada")
    call("user-bob")
    clock.set("2024-06-15T12:00:00")  # a new epoch: the cached keys must not be reused
    call("user-ada")
    call("user-bob")
    caps = read_intake(kafka_bootstrap, topics.names.intake, 4, timeout=30)
    recorder.close()
    key_ids = [c.event["encryption"]["key_id"] for c in caps]
    assert len(set(key_ids)) == 4
    epochs = {s.key_id: s.epoch for s in store.subjects()}
    assert [epochs[k] for k in key_ids] == ["2024-05-01"] * 2 + ["2024-06-15"] * 2
    assert all(s.streams == ("acme:chat",) for s in store.subjects())

    writer = WriterProcess([sys.executable, "-m", "cli.main", "writer"], writer_env(
        kafka_bootstrap, topics, transactional_id=f"tx-{topics.names.prefix}",
        group_id=f"wg-{topics.names.prefix}"))
    try:
        log = wait_for_count(kafka_bootstrap, topics.names.log, 4, 45, writer.assert_alive)
        verify_log(log)

        # Bob is held; 30 days after the first epoch ended, ada's old key goes, bob's stays.
        store.hold("user-bob", "litigation 2024-17", request_id="hold-1")
        cfg = producer_config({"EVIDENCE_KAFKA_BOOTSTRAP": kafka_bootstrap})
        now = clock.now
        result = run_once(store, POLICY, cfg, topics=topics.names, now=now)
        assert [d.key.key_id for d, _ in result.shredded] == [key_ids[0]]
        assert [d.key.key_id for d in result.held] == [key_ids[1]]
        assert result.failed == [] and result.next_due is not None
        clock.set("2024-07-15T00:00:00")  # 05-01 ended 74 days ago, 06-15 30 days ago: not yet
        result = run_once(store, POLICY, cfg, topics=topics.names, now=clock.now)
        assert result.shredded == [] and len(result.held) == 1
        store.release("user-bob", request_id="release-1")
        result = run_once(store, POLICY, cfg, topics=topics.names, now=clock.now)
        assert [d.key.key_id for d, _ in result.shredded] == [key_ids[1]]

        # The writer receipts each request, signed by the log key.
        receipts = wait_for_count(kafka_bootstrap, topics.names.erasures, 2, 45,
                                  writer.assert_alive)
    finally:
        writer.kill()
    verifier = log_signing_key()[0].verifier
    got = sorted((r.request_id, r.key_ids) for r in (open_receipt(m.value(), verifier)
                                                     for m in receipts))
    assert got == sorted([(f"retention:short:2024-05-01:{key_ids[0]}", (key_ids[0],)),
                          (f"retention:short:2024-05-01:{key_ids[1]}", (key_ids[1],))])

    # The log is untouched; the old epoch's records no longer open, the new epoch's do.
    by_key = {}
    for m in log:
        _, rec = split_record(m.value())
        by_key[rec["body"]["encryption"]["key_id"]] = rec["body"]
    for k in key_ids[:2]:
        with pytest.raises(KeyErased) as e:
            store.key(k)
        assert e.value.request_id.startswith("retention:short:2024-05-01:")
    for k, seen in zip(key_ids[2:], fake_provider.seen[2:]):
        key = store.key(k)
        plain = open_body(by_key[k], SubjectKeys(key.key_id, key.material))
        assert plain["request_bytes"] == seen.request_body
    doc = status(store, POLICY, now=clock.now)
    assert doc["classes"][0]["erased_keys"] == 2 and doc["classes"][0]["live_keys"] == 2
    assert doc["holds"] == []
