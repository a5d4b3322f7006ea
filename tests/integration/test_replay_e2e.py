"""Replay never reaches the provider: record real SDK calls through the fake provider, let
the writer seal them and the projector serve them through the API, then shut the provider
down, make every connection to its address fail loudly, and replay the same calls with the
official SDKs through ``Replayer``: the same bytes, the same streamed text, and a miss raises
``ReplayMiss`` instead of calling out."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket

import anthropic
import httpx
import openai
import pytest

from devstack.ports import free_port
from evidence_client import ReplayError, Replayer, ReplayMiss
from tests.fakes.provider import FakeProvider
from tests.fixtures.erased import wait_checkpoint

pytestmark = pytest.mark.integration

STREAM = "acme:replay-e2e"
CHAT = dict(model="gpt-4o", messages=[{"role": "user", "content": "what is 6 × 7?"}], seed=7)
CHAT_STREAM = dict(model="gpt-4o", messages=[{"role": "user", "content": "stream it"}],
                   stream=True)
RESPONSES = dict(model="gpt-4.1", input="summarise the ledger")
MESSAGES = dict(model="claude-fake-1", max_tokens=64, stream=True,
                messages=[{"role": "user", "content": "bonjour ✓"}])


def chat_text(chunks) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def anthropic_text(events) -> str:
    return "".join(e.delta.text for e in events if e.type == "content_block_delta")


def sent_for(seen, path: str, stream: bool) -> bytes:
    """What the fake provider sent for the one call to ``path`` with ``stream``."""
    [s] = [s for s in seen if s.path.endswith(path)
           and bool(json.loads(s.request_body).get("stream")) == stream]
    return s.response_body


def caused_by(exc: BaseException, kind: type) -> BaseException | None:
    """``exc`` or the first exception of its ``__cause__`` chain that is a ``kind``."""
    while exc is not None:
        if isinstance(exc, kind):
            return exc
        exc = exc.__cause__
    return None


def assert_miss(excinfo) -> ReplayMiss:
    """The SDK raised ReplayMiss, itself (openai) or as the cause of its error (anthropic)."""
    miss = caused_by(excinfo.value, ReplayMiss)
    assert isinstance(miss, ReplayMiss), repr(excinfo.value)
    assert "replay never calls the provider" in str(miss)
    return miss


class NoRouteTo:
    """Makes every socket connection to ``port`` on 127.0.0.1 raise, and records it."""

    def __init__(self, monkeypatch, port: int) -> None:
        self.port, self.attempts = port, []
        real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

        def guarded(real):
            def connect(sock, address, *a):
                if isinstance(address, tuple) and len(address) >= 2 and address[1] == port:
                    self.attempts.append(address)
                    raise ConnectionRefusedError(f"test: no route to the provider at {address}")
                return real(sock, address, *a)
            return connect

        monkeypatch.setattr(socket.socket, "connect", guarded(real_connect))
        monkeypatch.setattr(socket.socket, "connect_ex", guarded(real_connect_ex))


@pytest.fixture
def recorded(make_pipeline, make_recorder):
    """Four calls recorded through the fake provider and queryable through the API; the
    provider is stopped before the test body runs."""
    p = make_pipeline()
    fake = FakeProvider().start()
    try:
        recorder = make_recorder(p.topics, stream=STREAM)
        client = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test", max_retries=0,
                               http_client=recorder.http_client())
        want = {"chat": client.chat.completions.create(**CHAT).choices[0].message.content,
                "chat_stream": chat_text(client.chat.completions.create(**CHAT_STREAM)),
                "responses": client.responses.create(**RESPONSES).output_text}

        async def record_anthropic() -> str:
            a = anthropic.AsyncAnthropic(base_url=fake.url, api_key="sk-ant-test", max_retries=0,
                                         http_client=recorder.async_http_client())
            async with a:
                return anthropic_text([e async for e in await a.messages.create(**MESSAGES)])

        want["messages"] = asyncio.run(record_anthropic())
        recorder.close()
        seen = fake.wait_for(4)
    finally:
        fake.stop()
    records = p.wait_records(STREAM, 4)
    # A verified replay needs a checkpoint covering the records, which reaches the projection
    # a moment after them.
    wait_checkpoint(p, STREAM, 4)
    assert [r["outcome"] for r in records] == ["COMMITTED"] * 4
    assert {bytes.fromhex(r["content_key"]) for r in records} == {
        hashlib.sha256(b"\x00" + s.request_body).digest() for s in seen}
    return p, fake, seen, want


def test_sdks_replay_recorded_calls_byte_for_byte_without_reaching_the_provider(
        recorded, monkeypatch):
    p, fake, seen, want = recorded
    port = int(fake.url.rsplit(":", 1)[1])
    sent = {name: sent_for(seen, path, stream) for name, path, stream in (
        ("chat", "/chat/completions", False), ("chat_stream", "/chat/completions", True),
        ("responses", "/responses", False), ("messages", "/messages", True))}
    guard = NoRouteTo(monkeypatch, port)
    with pytest.raises(httpx.ConnectError):  # the guard works, and fails loudly
        httpx.post(fake.url + "/v1/chat/completions", content=b"{}")

    async def call_provider_async() -> None:
        async with httpx.AsyncClient() as c:
            await c.post(fake.url + "/v1/messages", content=b"{}")

    with pytest.raises(httpx.ConnectError):
        asyncio.run(call_provider_async())
    assert len(guard.attempts) == 2
    guard.attempts.clear()

    replayer = Replayer(p.api_url, p.api_key, log_key=p.log_key)
    client = openai.OpenAI(base_url=fake.url + "/v1", api_key="unused", max_retries=0,
                           http_client=replayer.http_client())
    with replayer, client:
        raw = client.chat.completions.with_raw_response.create(**CHAT)
        assert raw.http_response.content == sent["chat"]
        assert raw.http_response.headers["evidence-stream"] == STREAM
        assert raw.parse().choices[0].message.content == want["chat"]

        with client.chat.completions.with_streaming_response.create(**CHAT_STREAM) as r:
            assert b"".join(r.iter_bytes()) == sent["chat_stream"]
        assert chat_text(client.chat.completions.create(**CHAT_STREAM)) == want["chat_stream"]

        raw = client.responses.with_raw_response.create(**RESPONSES)
        assert raw.http_response.content == sent["responses"]
        assert raw.parse().output_text == want["responses"]

        with pytest.raises(Exception) as miss:
            client.chat.completions.create(**{**CHAT, "seed": 8})
        assert_miss(miss)
        with pytest.raises(Exception) as miss:
            client.models.list()  # no body: no content key of its own, never served
        assert_miss(miss)

    async def replay_async() -> None:
        a = anthropic.AsyncAnthropic(base_url=fake.url, api_key="unused", max_retries=0,
                                     http_client=replayer.async_http_client())
        o = openai.AsyncOpenAI(base_url=fake.url + "/v1", api_key="unused", max_retries=0,
                               http_client=replayer.async_http_client())
        async with a, o:
            async with a.messages.with_streaming_response.create(**MESSAGES) as r:
                assert b"".join([c async for c in r.iter_bytes()]) == sent["messages"]
            events = [e async for e in await a.messages.create(**MESSAGES)]
            assert anthropic_text(events) == want["messages"]
            completion = await o.chat.completions.create(**CHAT)
            assert completion.choices[0].message.content == want["chat"]
            with pytest.raises(Exception) as miss:
                await a.messages.create(**{**MESSAGES, "max_tokens": 65})
            assert_miss(miss)
            with pytest.raises(Exception) as miss:
                await o.chat.completions.create(**{**CHAT, "seed": 9})
            assert_miss(miss)

    asyncio.run(replay_async())
    asyncio.run(replay_async())  # a second event loop: async clients do not outlive theirs
    assert guard.attempts == []


def test_replay_without_the_api_raises_instead_of_calling_out(recorded, monkeypatch):
    p, fake, _seen, _want = recorded
    guard = NoRouteTo(monkeypatch, int(fake.url.rsplit(":", 1)[1]))
    dead_api = f"http://127.0.0.1:{free_port()}"
    for url, key, words in ((dead_api, p.api_key, "unreachable"),
                            (p.api_url, "wrong-key", "401")):
        client = openai.OpenAI(base_url=fake.url + "/v1", api_key="unused", max_retries=0,
                               http_client=Replayer(url, key, log_key=p.log_key).http_client())
        with pytest.raises(Exception) as err:
            client.chat.completions.create(**CHAT)
        cause = caused_by(err.value, ReplayError)
        assert cause is not None and not isinstance(cause, ReplayMiss)
        assert words in str(cause)
    assert guard.attempts == []
