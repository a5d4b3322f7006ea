"""The capture gateway end to end: the real openai/anthropic SDKs call a fake provider over
real HTTP through a Recorder's client; the captures are read back from the real Kafka intake
topic and compared byte for byte with what the fake received and sent."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading

import anthropic
import httpx
import httpx2
import openai
import pytest

from devstack.ports import free_port
from tests.fakes.provider import anthropic_events, chat_events
from tests.fixtures.provider import read_intake

pytestmark = pytest.mark.integration


def sha(prefix: int, data: bytes) -> bytes:
    return hashlib.sha256(bytes([prefix]) + data).digest()


def assert_matches(event: dict, seen, *, text: str | None = None) -> None:
    """The capture holds exactly the bytes the provider received and sent."""
    assert event["content_key"] == sha(0x00, seen.request_body)
    assert event["request_bytes"] == seen.request_body
    assert event["request_length"] == len(seen.request_body)
    assert event["capture"]["truncated"] is False
    assert event["http_status"] == seen.status
    assert event["response_content_type"] == seen.content_type
    if seen.status >= 400:
        assert event["outcome"] == "FAILED"
        assert event["error_bytes"] == seen.response_body
        assert event["response_bytes"] is None
        return
    assert event["outcome"] == "COMMITTED"
    assert event["response_bytes"] == seen.response_body
    assert event["response_digest"] == sha(0x01, seen.response_body)
    assert event["response_length"] == len(seen.response_body)
    assert event["error_bytes"] is None
    assert event["capture"]["closed_early"] is False
    if text is not None:
        assert event["output_digest"] == sha(0x04, text.encode("utf-8"))


def openai_client(recorder, fake, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test", max_retries=0,
                         http_client=recorder.http_client(**kw))


def anthropic_async(recorder, fake) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=fake.url, api_key="sk-ant-test", max_retries=0,
                                    http_client=recorder.async_http_client())


def test_openai_chat_sync_non_streaming(kafka_bootstrap, topics, make_recorder, fake_provider):
    recorder = make_recorder(topics, stream="acme:support-bot")
    client = openai_client(recorder, fake_provider)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "héllo"}],
        seed=42, temperature=0.25, top_p=0.9, max_tokens=50)
    completion = raw.parse()
    recorder.close()

    seen = fake_provider.wait_for(1)[0]
    assert completion.choices[0].message.content == "echo: héllo ✓"
    assert raw.http_response.content == seen.response_body  # the app saw the provider's bytes
    [cap] = read_intake(kafka_bootstrap, topics.names.intake, 1)
    assert cap.key == b"acme:support-bot"
    e = cap.event
    assert_matches(e, seen, text="echo: héllo ✓")
    assert e["stream"] == "acme:support-bot"
    assert e["model_id"] == "gpt-4o"
    assert e["response_model"] == "gpt-4o-2026-07-01"
    assert e["fingerprint"] == "fp_fake_2026"
    assert json.loads(e["params"]) == {"model": "gpt-4o", "seed": 42, "temperature": 0.25,
                                       "top_p": 0.9, "max_tokens": 50}
    assert e["replay"] == {"seed": "42", "temperature": 0.25, "top_p": 0.9, "deterministic": True}
    assert e["provider"] == {"name": "openai-compatible",
                             "endpoint": fake_provider.url + "/v1/chat/completions",
                             "api_version": "v1"}
    assert e["capture"]["streamed"] is False
    assert e["capture"]["request_policy"] == "VALUE"
    assert e["capture"]["started_at"] <= e["captured_at"]
    assert recorder.metrics.snapshot()["delivered"] == 1


def test_openai_chat_sync_streaming(kafka_bootstrap, topics, make_recorder, fake_provider):
    recorder = make_recorder(topics)
    client = openai_client(recorder, fake_provider)
    stream = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "stream me"}], stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    recorder.close()

    seen = fake_provider.wait_for(1)[0]
    assert text == "echo: stream me ✓"
    assert seen.response_body == b"".join(chat_events("gpt-4o-mini", text))
    [cap] = read_intake(kafka_bootstrap, topics.names.intake, 1)
    assert_matches(cap.event, seen, text=text)
    assert cap.event["capture"]["streamed"] is True
    assert cap.event["fingerprint"] == "fp_fake_2026"
    assert cap.event["response_model"] == "gpt-4o-mini-2026-07-01"
    assert cap.event["replay"]["deterministic"] is False


@pytest.mark.parametrize("stream", [False, True])
def test_openai_responses_api(kafka_bootstrap, topics, make_recorder, fake_provider, stream):
    recorder = make_recorder(topics)
    client = openai_client(recorder, fake_provider)
    if stream:
        events = list(client.responses.create(model="gpt-5", input="what?", instructions="be brief",
                                              temperature=0.5, stream=True))
        text = "".join(ev.delta for ev in events if ev.type == "response.output_text.delta")
    else:
        text = client.responses.create(model="gpt-5", input="what?", instructions="be brief",
                                       temperature=0.5).output_text
    recorder.close()

    seen = fake_provider.wait_for(1)[0]
    assert text == "echo: what? ✓"
    [cap] = read_intake(kafka_bootstrap, topics.names.intake, 1)
    e = cap.event
    assert_matches(e, seen, text=text)
    assert e["capture"]["streamed"] is stream
    assert e["model_id"] == "gpt-5" and e["response_model"] == "gpt-5-2026-07-01"
    params = json.loads(e["params"])
    assert "input" not in params and "instructions" not in params
    assert params["temperature"] == 0.5
    assert e["fingerprint"] is None


def test_anthropic_async_non_streaming_and_streaming(kafka_bootstrap, topics, make_recorder,
                                                     fake_provider):
    recorder = make_recorder(topics)

    async def calls() -> tuple[str, str]:
        client = anthropic_async(recorder, fake_provider)
        msg = await client.messages.create(
            model="claude-opus-4-1-20250805", max_tokens=64, system="you are terse",
            messages=[{"role": "user", "content": "one"}])
        parts = []
        async with client.messages.stream(
                model="claude-opus-4-1-20250805", max_tokens=64,
                messages=[{"role": "user", "content": "two"}]) as s:
            async for t in s.text_stream:
                parts.append(t)
        await client.close()
        return msg.content[0].text, "".join(parts)

    whole, streamed = asyncio.run(calls())
    recorder.close()

    assert (whole, streamed) == ("echo: one ✓", "echo: two ✓")
    seen = fake_provider.wait_for(2)
    caps = read_intake(kafka_bootstrap, topics.names.intake, 2)
    by_key = {c.event["content_key"]: c.event for c in caps}
    first, second = by_key[sha(0, seen[0].request_body)], by_key[sha(0, seen[1].request_body)]
    assert_matches(first, seen[0], text=whole)
    assert_matches(second, seen[1], text=streamed)
    assert seen[1].response_body == b"".join(anthropic_events("claude-opus-4-1-20250805", streamed))
    for e in (first, second):
        assert e["provider"]["name"] == "anthropic-compatible"
        assert e["provider"]["api_version"] == seen[0].headers["anthropic-version"]
        assert e["model_id"] == "claude-opus-4-1-20250805"
        assert e["response_model"] == "claude-opus-4-1-20250805-2026-07-01"
        params = json.loads(e["params"])
        assert "messages" not in params and "system" not in params and params["max_tokens"] == 64
    assert (first["capture"]["streamed"], second["capture"]["streamed"]) == (False, True)


def test_stream_closed_early_is_flagged(kafka_bootstrap, topics, make_recorder, fake_provider):
    recorder = make_recorder(topics)
    client = openai_client(recorder, fake_provider)
    stream = client.chat.completions.create(
        model="drip", messages=[{"role": "user", "content": "long"}], stream=True)
    got = [next(stream) for _ in range(3)]
    stream.close()
    recorder.close()

    assert len(got) == 3
    full = b"".join(chat_events("drip", "".join(f"w{i} " for i in range(200))))
    [cap] = read_intake(kafka_bootstrap, topics.names.intake, 1)
    e = cap.event
    assert e["capture"]["closed_early"] is True
    assert e["capture"]["streamed"] is True
    assert e["outcome"] == "UNKNOWN"
    assert e["output_digest"] is None
    assert 0 < len(e["response_bytes"]) < len(full) and full.startswith(e["response_bytes"])
    assert e["response_digest"] == sha(0x01, e["response_bytes"])
    assert e["error_bytes"].startswith(b"closed early by the application")


def test_provider_errors_are_failed_with_the_verbatim_body(kafka_bootstrap, topics, make_recorder,
                                                           fake_provider):
    recorder = make_recorder(topics)
    client = openai_client(recorder, fake_provider)
    with pytest.raises(openai.RateLimitError) as rate_limited:
        client.chat.completions.create(model="fail-429", messages=[{"role": "user", "content": "x"}])

    async def bad_request() -> None:
        await anthropic_async(recorder, fake_provider).messages.create(
            model="fail-400", max_tokens=5, messages=[{"role": "user", "content": "y"}])

    with pytest.raises(anthropic.BadRequestError) as bad:
        asyncio.run(bad_request())
    recorder.close()

    assert rate_limited.value.status_code == 429 and bad.value.status_code == 400
    seen = fake_provider.wait_for(2)
    caps = {c.event["content_key"]: c.event for c in read_intake(kafka_bootstrap,
                                                                 topics.names.intake, 2)}
    for s in seen:
        e = caps[sha(0, s.request_body)]
        assert_matches(e, s)
        assert e["output_digest"] is None and e["response_digest"] is None
    assert rate_limited.value.response.content == seen[0].response_body


def _outcome_of_transport_failure(kafka_bootstrap, topics, make_recorder, call):
    """Run ``call(client)`` with a plain client and with a capturing one; both must raise the
    same exception. Returns (exception, capture)."""
    plain = call(httpx2.Client())
    recorder = make_recorder(topics)
    captured = call(recorder.http_client())
    recorder.close()
    assert type(captured) is type(plain) and str(captured) == str(plain)
    [cap] = read_intake(kafka_bootstrap, topics.names.intake, 1)
    return captured, cap.event


def test_connection_refused_is_unknown_and_raises_the_same(kafka_bootstrap, topics, make_recorder):
    url = f"http://127.0.0.1:{free_port()}/v1/chat/completions"
    body = b'{"model":"gpt-4o","messages":[]}'

    def call(client):
        with client, pytest.raises(httpx2.ConnectError) as info:
            client.post(url, content=body)
        return info.value

    exc, e = _outcome_of_transport_failure(kafka_bootstrap, topics, make_recorder, call)
    assert e["outcome"] == "UNKNOWN"
    assert e["http_status"] is None and e["response_bytes"] is None
    assert e["error_bytes"].startswith(b"ConnectError")
    assert e["content_key"] == sha(0, body) and e["request_bytes"] == body
    assert e["model_id"] == "gpt-4o"


def test_timeout_is_unknown_and_the_sdk_sees_the_same_error(kafka_bootstrap, topics, make_recorder,
                                                            fake_provider):
    def call(http_client):
        client = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="k", max_retries=0,
                               timeout=0.5, http_client=http_client)
        with pytest.raises(openai.APITimeoutError) as info:
            client.chat.completions.create(model="slow", messages=[{"role": "user", "content": "z"}])
        assert isinstance(info.value.__cause__, httpx2.ReadTimeout)
        return info.value

    exc, e = _outcome_of_transport_failure(kafka_bootstrap, topics, make_recorder, call)
    assert e["outcome"] == "UNKNOWN"
    assert e["error_bytes"].startswith(b"ReadTimeout")
    assert e["model_id"] == "slow"


def test_hash_only_policy_keeps_no_request_bytes(kafka_bootstrap, topics, make_recorder,
                                                 fake_provider):
    recorder = make_recorder(topics, request_policy="HASH_ONLY")
    openai_client(recorder, fake_provider).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "secret"}])
    recorder.close()
    seen = fake_provider.wait_for(1)[0]
    [cap] = read_intake(kafka_bootstrap, topics.names.intake, 1)
    e = cap.event
    assert e["request_bytes"] is None
    assert e["capture"]["request_policy"] == "HASH_ONLY"
    assert e["content_key"] == sha(0, seen.request_body)
    assert b"secret" not in cap.value.replace(e["response_bytes"], b"")
    assert e["outcome"] == "COMMITTED" and e["response_bytes"] == seen.response_body


@pytest.mark.parametrize("flavor", ["httpx2", "httpx"])
def test_unknown_path_gets_a_full_record(kafka_bootstrap, topics, make_recorder, fake_provider,
                                         flavor):
    recorder = make_recorder(topics)
    body = b'{"prompt":"free form","model":"local-llm","temperature":0}'
    with recorder.http_client(flavor=flavor) as client:
        response = client.post(fake_provider.url + "/generate", content=body)
    recorder.close()
    assert isinstance(response, (httpx2.Response if flavor == "httpx2" else httpx.Response))
    seen = fake_provider.wait_for(1)[0]
    assert response.content == seen.response_body
    [cap] = read_intake(kafka_bootstrap, topics.names.intake, 1)
    e = cap.event
    assert_matches(e, seen)
    assert e["provider"] == {"name": "unknown", "endpoint": fake_provider.url + "/generate",
                             "api_version": None}
    assert (e["fingerprint"], e["response_model"], e["output_digest"]) == (None, None, None)
    assert e["model_id"] == "local-llm"
    assert e["replay"] == {"seed": None, "temperature": 0.0, "top_p": None, "deterministic": False}


@pytest.mark.parametrize("path, stream", [
    ("/v1/chat/completions", False), ("/v1/chat/completions", True),
    ("/v1/responses", True), ("/v1/messages", False), ("/v1/messages", True)])
def test_the_application_sees_exactly_what_it_would_without_the_gateway(
        kafka_bootstrap, topics, make_recorder, fake_provider, path, stream):
    recorder = make_recorder(topics)
    body = json.dumps({"model": "m", "stream": stream, "max_tokens": 5,
                       "messages": [{"role": "user", "content": "same"}]}).encode()

    def fetch(client) -> tuple[int, list, list[bytes]]:
        with client, client.stream("POST", fake_provider.url + path, content=body) as r:
            chunks = list(r.iter_raw())
            headers = [(k, v) for k, v in r.headers.multi_items() if k.lower() != "date"]
            return r.status_code, headers, chunks

    plain = fetch(httpx2.Client())
    captured = fetch(recorder.http_client())
    recorder.close()
    assert captured[:2] == plain[:2]
    assert b"".join(captured[2]) == b"".join(plain[2])
    [cap] = read_intake(kafka_bootstrap, topics.names.intake, 1)
    assert cap.event["response_bytes"] == b"".join(captured[2])


def test_concurrent_recorders_and_threads(kafka_bootstrap, topics, make_recorder, fake_provider):
    recorders = [make_recorder(topics, stream=f"conc:{i}") for i in range(3)]
    errors: list[BaseException] = []

    def worker(recorder, w: int) -> None:
        try:
            client = openai_client(recorder, fake_provider)
            for n in range(5):
                result = client.chat.completions.create(
                    model="gpt-4o", stream=n % 2 == 1,
                    messages=[{"role": "user", "content": f"{recorder.stream}/{w}/{n}"}])
                if n % 2 == 1:
                    assert "".join(c.choices[0].delta.content or "" for c in result if c.choices)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(r, w)) for r in recorders for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for r in recorders:
        r.close()
    assert not errors

    seen = fake_provider.wait_for(60)
    caps = read_intake(kafka_bootstrap, topics.names.intake, 60)
    assert len(caps) == 60
    by_key = {c.event["content_key"]: c for c in caps}
    assert len(by_key) == 60
    for s in seen:
        cap = by_key[sha(0, s.request_body)]
        stream = json.loads(s.request_body)["messages"][0]["content"].split("/")[0]
        assert cap.key == stream.encode() and cap.event["stream"] == stream
        assert_matches(cap.event, s)
    for r in recorders:
        m = r.metrics.snapshot()
        assert (m["captured"], m["delivered"], m["failed"], m["errors"]) == (20, 20, 0, 0)
