"""The Replayer on encrypted streams, against a fake evidence API (httpx.MockTransport): the
keyed content key per subject, the envelope opened with the record's associated data, and
"erased" from the API (410) or from the key store."""

from __future__ import annotations

import asyncio

import httpx
import httpx2
import pytest

from evidence_client import (
    ReplayErased, ReplayError, Replayer, ReplayMiss, call_context, stream,
)
from evidence_client.keystore import FileKeyStore
from evidence_contract import content_key
from evidence_contract.sealing import LocalKek, SubjectKeys

REQUEST = b'{"model":"gpt-4o","messages":[{"role":"user","content":"my salary is 52000"}]}'
RESPONSE = b'{"choices":[{"message":{"content":"noted"}}]}'
EVENT = "0190b6d2-7c3e-7a51-9f00-1234567890ab"


class FakeApi:
    """Serves recordings by content key: key hex -> (stream, event id, body) or an answer."""

    def __init__(self) -> None:
        self.recordings: dict[str, tuple[str, str, bytes]] = {}
        self.erased: dict[str, dict] = {}
        self.asked: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        key = request.url.path.rsplit("/", 1)[1]
        self.asked.append(key)
        if key in self.erased:
            return httpx.Response(410, json={"error": "erased", "message": "erased",
                                             **self.erased[key]})
        if key not in self.recordings:
            return httpx.Response(404, json={"error": "not_found", "message": "no record"})
        s, eid, body = self.recordings[key]
        return httpx.Response(200, content=body, headers={
            "content-type": "application/json", "evidence-stream": s,
            "evidence-event-id": eid, "evidence-seq": "1"})


@pytest.fixture
def store(tmp_path):
    return FileKeyStore(tmp_path / "keys", LocalKek(bytes(range(32))))


def replayer_for(api: FakeApi, **kw) -> Replayer:
    r = Replayer("http://evidence.test", "k", verify=False, **kw)
    r._sync = httpx.Client(base_url="http://evidence.test", transport=httpx.MockTransport(api))
    return r


def record(api: FakeApi, store, subject: str, s: str = "bank:support") -> SubjectKeys:
    key = store.data_key(subject)
    keys = SubjectKeys(key.key_id, key.material)
    api.recordings[keys.content_key(REQUEST).hex()] = (
        s, EVENT, keys.seal(RESPONSE, s, EVENT, "response_bytes"))
    return keys


def post(replayer: Replayer) -> httpx2.Response:
    with replayer.http_client() as client:
        return client.post("https://api.openai.com/v1/chat/completions", content=REQUEST)


def test_keyed_content_key_of_the_calls_subject_and_the_envelope_opened(store):
    api = FakeApi()
    keys = record(api, store, "user-ada")
    record(api, store, "user-bob")  # the same request of another subject: another key
    r = replayer_for(api, key_store=store)
    with call_context(subject="user-ada"):
        answer = post(r)
    assert answer.status_code == 200 and answer.content == RESPONSE
    assert answer.headers["evidence-stream"] == "bank:support"
    assert api.asked == [keys.content_key(REQUEST).hex()]
    assert content_key(REQUEST).hex() not in api.asked  # never the plain key


def test_the_subject_defaults_to_the_stream(store):
    api = FakeApi()
    record(api, store, "bank:support")
    with stream("bank:support"):
        assert post(replayer_for(api, key_store=store)).content == RESPONSE
    assert post(replayer_for(api, key_store=store, stream="bank:support")).content == RESPONSE
    with pytest.raises(ReplayError, match="subject"):
        post(replayer_for(api, key_store=store))


def test_a_subject_the_store_never_saw_is_a_miss_and_no_key_is_made(store):
    api = FakeApi()
    with call_context(subject="user-nobody"), pytest.raises(ReplayMiss):
        post(replayer_for(api, key_store=store))
    assert store.subjects() == [] and api.asked == []


def test_erased_subject_raises_replay_erased_with_when_and_the_request(store):
    api = FakeApi()
    record(api, store, "user-ada")
    store.destroy("user-ada", request_id="dsr-7")
    [state] = store.subjects()
    with call_context(subject="user-ada"), pytest.raises(ReplayErased) as e:
        post(replayer_for(api, key_store=store))
    assert isinstance(e.value, ReplayError)
    assert (e.value.erased_at, e.value.request_id) == (state.erased_at, "dsr-7")
    assert "erased" in str(e.value) and "52000" not in str(e.value)


def test_erased_then_new_content_of_the_subject_still_replays_under_the_new_key(store):
    api = FakeApi()
    record(api, store, "user-ada")
    store.destroy("user-ada", request_id="dsr-1")
    other = b'{"model":"gpt-4o","messages":[]}'
    key = store.data_key("user-ada")
    keys = SubjectKeys(key.key_id, key.material)
    api.recordings[keys.content_key(other).hex()] = (
        "bank:support", EVENT, keys.seal(b"new", "bank:support", EVENT, "response_bytes"))
    r = replayer_for(api, key_store=store)
    with call_context(subject="user-ada"):
        with r.http_client() as c:
            assert c.post("https://x/v1/chat/completions", content=other).content == b"new"
        with pytest.raises(ReplayErased):  # the old request: its key is gone
            post(r)


def test_a_410_erased_from_the_api_is_replay_erased(store):
    api = FakeApi()
    keys = record(api, store, "user-ada")
    api.erased[keys.content_key(REQUEST).hex()] = {"erased_at": 1_700_000_000_000_000,
                                                   "request_id": "dsr-9"}
    with call_context(subject="user-ada"), pytest.raises(ReplayErased) as e:
        post(replayer_for(api, key_store=store))
    assert (e.value.erased_at, e.value.request_id) == (1_700_000_000_000_000, "dsr-9")


def test_a_plain_stream_is_unchanged_and_a_410_is_erased_too():
    api = FakeApi()
    api.recordings[content_key(REQUEST).hex()] = ("s", EVENT, RESPONSE)
    r = replayer_for(api)
    assert post(r).content == RESPONSE
    api.erased[content_key(REQUEST).hex()] = {"erased_at": 5, "request_id": None}
    with pytest.raises(ReplayErased) as e:
        post(r)
    assert (e.value.erased_at, e.value.request_id) == (5, None)


def test_an_envelope_that_does_not_open_is_a_replay_error(store):
    api = FakeApi()
    keys = record(api, store, "user-ada")
    s, eid, body = api.recordings[keys.content_key(REQUEST).hex()]
    api.recordings[keys.content_key(REQUEST).hex()] = ("other:stream", eid, body)
    with call_context(subject="user-ada"), pytest.raises(ReplayError, match="does not open"):
        post(replayer_for(api, key_store=store))


def test_async_clients_open_envelopes_too(store):
    api = FakeApi()
    record(api, store, "user-ada")
    r = Replayer("http://evidence.test", "k", key_store=store, verify=False)
    r._new_async_client = lambda: httpx.AsyncClient(  # type: ignore[method-assign]
        base_url="http://evidence.test", transport=httpx.MockTransport(api))

    async def go() -> bytes:
        async with r.async_http_client() as c:
            with call_context(subject="user-ada"):
                return (await c.post("https://x/v1/chat/completions", content=REQUEST)).content

    assert asyncio.run(go()) == RESPONSE
