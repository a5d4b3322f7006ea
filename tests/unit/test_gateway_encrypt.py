"""The Recorder's content policy ``encrypt`` against a fake producer: configuration, subjects,
keyed commitments, truncation that keeps envelopes whole, and a key store that fails."""

from __future__ import annotations

import httpx2
import pytest
from confluent_kafka import KafkaError

from evidence_client import ConfigError, Recorder, call_context, stream
from evidence_client.keystore import FileKeyStore
from evidence_client.sizing import ERROR_PREFIX_BYTES, apply_size_policy, truncate
from evidence_contract import TRUNCATED_ERROR_BYTES, content_key
from evidence_contract import envelope as fmt
from evidence_contract.keys import KeyStoreError
from evidence_contract.sealing import LocalKek, SubjectKeys, open_body
from evidence_contract.vectors import encrypted_event, failed_event
from tests.fixtures.keystore import FakeClock
from tests.unit.test_gateway_recorder import FakeProducer, _call, _events, _recorder, _wait

KEK = LocalKek(bytes(range(32)))
REQ = b'{"model":"gpt-4o","messages":[{"role":"user","content":"I am Ada, born 1815"}]}'


def _store(tmp_path):
    return FileKeyStore(tmp_path / "keys", KEK)


def test_encrypt_needs_a_key_store_and_a_known_policy(tmp_path):
    with pytest.raises(ConfigError, match="key_store"):
        Recorder("127.0.0.1:1", "s", content_policy="encrypt")
    with pytest.raises(ConfigError, match="content_policy"):
        Recorder("127.0.0.1:1", "s", content_policy="sealed")
    with pytest.raises(ConfigError):
        Recorder("127.0.0.1:1", "s", content_policy="encrypt", key_store=_store(tmp_path),
                 key_cache_s=-1)
    with pytest.raises(ConfigError, match="subject"):
        with call_context(subject="a\nb"):
            pass


def test_captures_are_sealed_per_subject_with_keyed_commitments(tmp_path):
    store, fake = _store(tmp_path), FakeProducer()
    r = _recorder(tmp_path, fake, content_policy="encrypt", key_store=store)
    client = r.http_client(transport=httpx2.MockTransport(
        lambda req: httpx2.Response(200, json={"choices": [{"message": {"content": "Hi Ada"}}]})))
    with call_context(subject="user-ada", input="I am Ada"):
        _call(client, REQ)
    _call(client, REQ)  # no subject: the stream's key
    _wait(lambda: len(fake.delivered) == 2)
    r.close()
    values = [v for _, v in fake.delivered]
    assert all(b"Ada" not in v for v in values)
    first, second = _events(fake)
    ada, stream = store.data_key("user-ada"), store.data_key("acme:unit")
    assert first["encryption"]["key_id"] == ada.key_id
    assert second["encryption"]["key_id"] == stream.key_id
    keys = SubjectKeys(ada.key_id, ada.material)
    assert first["content_key"] == keys.content_key(REQ) != content_key(REQ)
    assert first["input_digest"] == keys.input_digest(b"I am Ada")
    assert first["output_digest"] == keys.output_digest("Hi Ada")
    assert second["content_key"] != first["content_key"]  # same bytes, other subject
    plain = open_body(first, keys)
    assert plain["request_bytes"] == REQ and plain["input_bytes"] == b"I am Ada"
    assert fmt.encrypted_body_problem(first) == ""


def test_the_key_cache_never_serves_a_key_past_its_epoch_and_the_store_learns_the_stream(
        tmp_path):
    clock = FakeClock("2024-05-17T23:59:59")
    store, fake = FileKeyStore(tmp_path / "keys", KEK, clock=clock), FakeProducer()
    r = _recorder(tmp_path, fake, content_policy="encrypt", key_store=store,
                  key_cache_s=3600, key_clock=clock)
    client = r.http_client(transport=httpx2.MockTransport(
        lambda req: httpx2.Response(200, json={"choices": []})))
    with call_context(subject="user-ada"):
        _call(client, REQ)
        _call(client, REQ)
        _wait(lambda: len(fake.delivered) == 2)
        clock.set("2024-05-18T00:00:00")  # the cache entry is an hour young, its epoch over
        _call(client, REQ)
        with stream("acme:other"):
            _call(client, REQ)
        _wait(lambda: len(fake.delivered) == 4)
    r.close()
    ids = [e["encryption"]["key_id"] for e in _events(fake)]
    states = {s.key_id: s for s in store.subjects()}
    assert ids[0] == ids[1] and ids[2] == ids[3] != ids[0]
    assert states[ids[0]].epoch == "2024-05-17" and states[ids[0]].streams == ("acme:unit",)
    assert states[ids[2]].epoch == "2024-05-18"
    assert states[ids[2]].streams == ("acme:other", "acme:unit")


def test_a_key_store_that_fails_drops_the_capture_never_sends_it_in_the_clear(tmp_path, caplog):
    class Broken:
        def data_key(self, subject, stream=None):
            raise KeyStoreError("vault sealed")

    fake = FakeProducer()
    r = _recorder(tmp_path, fake, content_policy="encrypt", key_store=Broken())
    client = r.http_client(transport=httpx2.MockTransport(
        lambda req: httpx2.Response(200, json={"choices": []})))
    _call(client, REQ)
    _wait(lambda: r.metrics.snapshot()["failed"] == 1)
    r.close()
    assert fake.delivered == []
    assert content_key(REQ).hex() not in caplog.text and "(sealed)" in caplog.text


def test_too_large_for_the_cluster_is_resent_truncated_with_whole_envelopes(tmp_path):
    store = _store(tmp_path)
    fake = FakeProducer(fail=lambda v: KafkaError.MSG_SIZE_TOO_LARGE if len(v) > 4000 else None)
    r = _recorder(tmp_path, fake, content_policy="encrypt", key_store=store)
    client = r.http_client(transport=httpx2.MockTransport(
        lambda req: httpx2.Response(500, content=b"E" * 3000)))
    _call(client, b'{"model":"m","messages":"' + b"x" * 5000 + b'"}')
    _wait(lambda: len(fake.delivered) == 1)
    r.close()
    (event,) = _events(fake)
    assert event["capture"]["truncated"] and event["request_bytes"] is None
    assert event["error_bytes"] is not None  # 3000 + 45 bytes: kept whole, still opens
    key = store.data_key("acme:unit")
    assert open_body(event, SubjectKeys(key.key_id, key.material))["error_bytes"] == b"E" * 3000


def test_truncation_before_sealing_leaves_room_for_the_envelope():
    big = {**failed_event(), "error_bytes": b"e" * (TRUNCATED_ERROR_BYTES * 2)}
    cut = apply_size_policy(big, 10, to_seal=True)
    assert len(cut["error_bytes"]) + fmt.OVERHEAD == TRUNCATED_ERROR_BYTES
    assert len(apply_size_policy(big, 10)["error_bytes"]) == ERROR_PREFIX_BYTES
    sealed = {**encrypted_event(), "error_bytes": b"\x01" + bytes(TRUNCATED_ERROR_BYTES + 10)}
    assert truncate(sealed)["error_bytes"] is None  # an envelope is never cut
    small = {**encrypted_event(), "error_bytes": encrypted_event()["response_bytes"]}
    assert truncate(small)["error_bytes"] == small["error_bytes"]
