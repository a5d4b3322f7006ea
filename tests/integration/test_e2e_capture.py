"""Capture to log, end to end: several Recorders call the fake provider at once through the
official openai and anthropic SDKs (sync and async, streamed and not) over a few streams; the
real writer seals what they capture. Every stream's log is seq 1..n exactly once with
verified chain links, and every record holds exactly the bytes the provider received and
sent."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import Counter

import anthropic
import openai
import pytest

import evidence_contract as schemas
from tests.fixtures.writer import verify_log, wait_for_count

pytestmark = pytest.mark.integration

STREAMS = ["acme:support", "acme:billing", "globex:chat"]
RECORDERS_PER_STREAM = 2
SYNC_CALLS = ASYNC_CALLS = 8  # per recorder; the async ones run concurrently


def _chat_text(out) -> str:
    return "".join(c.choices[0].delta.content or "" for c in out if c.choices)


def sync_calls(recorder, url: str, tag: str) -> list[str]:
    """Four kinds of call in rotation through the sync SDK clients; returns the texts."""
    o = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0,
                      http_client=recorder.http_client())
    a = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0,
                            http_client=recorder.http_client())
    texts = []
    with o, a:
        for i in range(SYNC_CALLS):
            say = f"{tag} sync {i}"
            msgs = [{"role": "user", "content": say}]
            kind = i % 4
            if kind == 0:
                texts.append(o.chat.completions.create(model="gpt-4o", messages=msgs, seed=i)
                             .choices[0].message.content)
            elif kind == 1:
                texts.append(_chat_text(o.chat.completions.create(
                    model="gpt-4o", messages=msgs, stream=True)))
            elif kind == 2:
                with o.responses.stream(model="gpt-4.1", input=say) as s:
                    texts.append(s.get_final_response().output_text)
            else:
                texts.append(a.messages.create(model="claude-fake-1", max_tokens=32,
                                               messages=msgs).content[0].text)
    return texts


async def async_calls(recorder, url: str, tag: str) -> list[str]:
    o = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0,
                           http_client=recorder.async_http_client())
    a = anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-test", max_retries=0,
                                 http_client=recorder.async_http_client())

    async def one(i: int) -> str:
        say = f"{tag} async {i}"
        msgs = [{"role": "user", "content": say}]
        kind = i % 4
        if kind == 0:
            return (await o.responses.create(model="gpt-4.1", input=say)).output_text
        if kind == 1:
            out = await o.chat.completions.create(model="gpt-4o", messages=msgs, stream=True)
            return "".join([c.choices[0].delta.content or "" async for c in out if c.choices])
        if kind == 2:
            async with a.messages.stream(model="claude-fake-1", max_tokens=32,
                                         messages=msgs) as s:
                return "".join([t async for t in s.text_stream])
        return (await a.messages.create(model="claude-fake-1", max_tokens=32, messages=msgs)
                ).content[0].text

    async with o, a:
        return list(await asyncio.gather(*(one(i) for i in range(ASYNC_CALLS))))


def test_concurrent_recorders_sdk_calls_are_sealed_gapless_and_verbatim(
        kafka_bootstrap, make_topics, run_writer, make_recorder, fake_provider):
    topics = make_topics(partitions=3)
    writer = run_writer(topics)
    recorders = [(s, make_recorder(topics, stream=s))
                 for s in STREAMS for _ in range(RECORDERS_PER_STREAM)]
    errors: list[BaseException] = []
    texts: list[str] = []

    def work(n: int, recorder) -> None:
        try:
            tag = f"r{n}"
            texts.extend(sync_calls(recorder, fake_provider.url, tag))
            texts.extend(asyncio.run(async_calls(recorder, fake_provider.url, tag)))
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n, r)) for n, (_s, r) in enumerate(recorders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, [(e, e.__cause__) for e in errors]
    assert not any(t.is_alive() for t in threads)
    for _s, r in recorders:
        r.close()
        m = r.metrics.snapshot()
        assert (m["captured"], m["delivered"], m["failed"], m["errors"]) == \
            (SYNC_CALLS + ASYNC_CALLS, SYNC_CALLS + ASYNC_CALLS, 0, 0), m

    n = len(recorders) * (SYNC_CALLS + ASYNC_CALLS)
    seen = fake_provider.wait_for(n)
    assert len(texts) == n and all(t.startswith("echo: r") for t in texts)
    log = wait_for_count(kafka_bootstrap, topics.names.log, n, 45, writer.assert_alive)
    assert len(log) == n  # nothing sealed twice

    # Every stream is seq 1..n_k exactly once, each record_digest recomputes from
    # split_record's body bytes, and each prev_digest is the previous record_digest.
    by_stream = verify_log(log)
    assert {s: len(recs) for s, recs in by_stream.items()} == \
        {s: RECORDERS_PER_STREAM * (SYNC_CALLS + ASYNC_CALLS) for s in STREAMS}
    for m in log:
        body_bytes, rec = schemas.split_record(m.value())
        assert rec["seal"]["record_digest"] == hashlib.sha256(
            b"\x05" + rec["seal"]["prev_digest"] + rec["seal"]["seq"].to_bytes(8, "big")
            + rec["seal"]["occurred_at"].to_bytes(8, "big") + body_bytes).digest()

    # Every record holds exactly the bytes of one exchange, and every exchange has one record.
    by_request = {s.request_body: s for s in seen}
    assert len(by_request) == n
    sealed = Counter()
    for recs in by_stream.values():
        for rec in recs:
            body = rec["body"]
            ex = by_request[body["request_bytes"]]
            sealed[body["request_bytes"]] += 1
            assert body["content_key"] == hashlib.sha256(b"\x00" + ex.request_body).digest()
            assert body["response_bytes"] == ex.response_body and ex.finished
            assert body["response_digest"] == hashlib.sha256(b"\x01" + ex.response_body).digest()
            assert body["outcome"] == "COMMITTED"
            assert body["capture"]["streamed"] == ex.content_type.startswith("text/event-stream")
    assert set(sealed) == set(by_request) and set(sealed.values()) == {1}
    assert writer.terminate() == 0
