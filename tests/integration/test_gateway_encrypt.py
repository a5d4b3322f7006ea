"""Content policy ``encrypt`` end to end against real Kafka: the spool and the intake hold no
plaintext (scanned for the exact bytes), the real writer seals the envelopes into a valid
chain, and the key store opens every field again, until the subject is erased."""

from __future__ import annotations

import sys
from pathlib import Path

import openai
import pytest

from evidence_client import Chunk, call_context
from evidence_client.keystore import FileKeyStore
from evidence_contract import split_record
from evidence_contract import envelope as fmt
from evidence_contract.keys import KeyErased
from evidence_contract.sealing import LocalKek, SubjectKeys, open_body
from tests.fixtures.provider import read_intake
from tests.fixtures.writer import WriterProcess, verify_log, wait_for_count, writer_env

pytestmark = pytest.mark.integration

SECRET_INPUT = "My name is Ada Lovelace and I live at 12 St James's Square"
SECRET_PROMPT = "You are a helpful bank clerk. Customer says: " + SECRET_INPUT
SECRET_CHUNK = "Account 4711-0815 belongs to Ada Lovelace, overdraft 2000 GBP"


def _files(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in root.rglob("*") if p.is_file()]


def _secrets(fake) -> list[bytes]:
    out = [SECRET_INPUT.encode(), SECRET_PROMPT.encode(), SECRET_CHUNK.encode(), b"Ada Lovelace"]
    for s in fake.seen:
        out += [s.request_body, s.response_body]
    return [b for b in out if b]


def test_encrypted_captures_leave_no_plaintext_in_the_spool_or_kafka_and_seal_and_open(
        tmp_path, topics, make_recorder, fake_provider, kafka_bootstrap):
    store = FileKeyStore(tmp_path / "keys", LocalKek(bytes(range(32))))
    spool_dir = tmp_path / "spool"
    recorder = make_recorder(topics, stream="bank:support", spool_dir=spool_dir,
                             content_policy="encrypt", key_store=store)
    client = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="k", max_retries=0,
                           http_client=recorder.http_client())
    for i, stream in enumerate((False, True, False)):
        with call_context(subject="user-ada" if i < 2 else None, input=SECRET_INPUT,
                          prompt=SECRET_PROMPT,
                          retrieval=[Chunk("kb/accounts", "1", SECRET_CHUNK)]):
            out = client.chat.completions.create(
                model="gpt-4o", stream=stream, messages=[{"role": "user", "content": SECRET_PROMPT}])
            if stream:
                list(out)
        # The call has returned: its capture is on disk now (write-ahead). Scan the spool.
        assert sum(map(len, _files(spool_dir))) > 1000
        for data in _files(spool_dir):
            for secret in _secrets(fake_provider):
                assert secret not in data, "plaintext in the spool"

    caps = read_intake(kafka_bootstrap, topics.names.intake, 3, timeout=30)
    recorder.close()
    assert len(caps) == 3
    for c in caps:
        for secret in _secrets(fake_provider):
            assert secret not in c.value, "plaintext on evidence.intake"
    for data in _files(spool_dir):
        for secret in _secrets(fake_provider):
            assert secret not in data

    # Subjects: the first two calls are the user's, the third the stream's.
    ada, stream_key = store.data_key("user-ada"), store.data_key("bank:support")
    assert [c.event["encryption"]["key_id"] for c in caps] == [ada.key_id, ada.key_id,
                                                               stream_key.key_id]

    # The real writer validates and seals them; the chain verifies over the ciphertext.
    writer = WriterProcess([sys.executable, "-m", "cli.main", "writer"], writer_env(
        kafka_bootstrap, topics, transactional_id=f"tx-{topics.names.prefix}",
        group_id=f"wg-{topics.names.prefix}"))
    try:
        log = wait_for_count(kafka_bootstrap, topics.names.log, 3, 45, writer.assert_alive)
    finally:
        writer.kill()
    sealed = verify_log(log)["bank:support"]
    assert [r["body"] for r in sealed] == [c.event for c in caps]  # sealed as captured
    for m in log:
        for secret in _secrets(fake_provider):
            assert secret not in m.value(), "plaintext on evidence.log"

    # While the key exists: every field opens, and the keyed content key is what the
    # Replayer would compute from the request bytes.
    for c, seen in zip(caps, fake_provider.seen):
        key = store.key(c.event["encryption"]["key_id"])
        keys = SubjectKeys(key.key_id, key.material)
        plain = open_body(c.event, keys)
        assert plain["request_bytes"] == seen.request_body
        assert plain["response_bytes"] == seen.response_body
        assert plain["input_bytes"] == SECRET_INPUT.encode()
        assert plain["retrieval"][0]["chunk_bytes"] == SECRET_CHUNK.encode()
        assert c.event["content_key"] == keys.content_key(seen.request_body)
        assert c.event["request_length"] == len(seen.request_body)
        assert len(c.event["request_bytes"]) == len(seen.request_body) + fmt.OVERHEAD

    # Erase the user: their two records stay sealed and chained, and no longer open.
    store.destroy("user-ada", request_id="dsr-1")
    with pytest.raises(KeyErased):
        store.key(ada.key_id)
    for m in log:
        stored, rec = split_record(m.value())
        assert rec["body"]["encryption"] is not None
    assert store.key(stream_key.key_id) == stream_key  # the stream's record still opens
