"""Spans out, end to end: the openai and anthropic SDKs call the fake provider over real HTTP
through a Recorder on real Kafka, traced by the SDK's TracerProvider (given to the Recorder and
the instrumentation, never set globally) into an in-memory exporter. Every capture on the
intake topic is named by exactly one span, and that span by the capture."""

from __future__ import annotations

import asyncio
import json

import anthropic
import openai
import pytest
from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.fixtures.provider import read_intake

pytestmark = pytest.mark.integration

PROMPT = "otel prompt 5b2d"


@pytest.fixture
def traced():
    # A capture joins the current GenAI span: an instrumentation an earlier test in this
    # process left around the SDK would start that span, in its own provider, and take this
    # test's captures (tests/unit/otlp_harness.py, openai_as_it_was).
    import wrapt
    from openai.resources.chat.completions import Completions
    from openai.resources.responses import Responses

    left = [f"{cls.__name__}.create" for cls in (Completions, Responses)
            if isinstance(vars(cls)["create"], wrapt.BaseObjectProxy)]
    assert not left, f"an instrumentation an earlier test left wraps {left}"
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def by_event_id(spans):
    out = {}
    for s in spans:
        if "evidence.event_id" in s.attributes:
            out.setdefault(s.attributes["evidence.event_id"], []).append(s)
    return out


def assert_names_the_capture(span, event, api_url):
    a = span.attributes
    assert a["evidence.stream"] == event["stream"]
    assert a["evidence.content_key"] == event["content_key"].hex()
    assert a["evidence.response_digest"] == event["response_digest"].hex()
    # the link both ways: the record seals the span's trace context (contract 2.2)
    ctx = span.get_span_context()
    assert event["trace"] == {"trace_id": ctx.trace_id.to_bytes(16, "big"),
                              "span_id": ctx.span_id.to_bytes(8, "big")}
    ref = f"{api_url}/events/{event['event_id']}"
    assert a["gen_ai.input.messages_ref"] == ref and a["gen_ai.output.messages_ref"] == ref
    for value in a.values():
        assert PROMPT not in json.dumps(list(value) if isinstance(value, tuple) else value)
        assert "echo:" not in json.dumps(list(value) if isinstance(value, tuple) else value)


def test_each_captured_call_has_its_span_sync_async_streamed(make_recorder, topics,
                                                             fake_provider, kafka_bootstrap,
                                                             traced):
    provider, exporter = traced
    api = "https://evidence.test"
    recorder = make_recorder(topics, tracer_provider=provider, api_url=api)
    oa = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="sk-test", max_retries=0,
                       http_client=recorder.http_client())
    an = anthropic.AsyncAnthropic(base_url=fake_provider.url, api_key="k", max_retries=0,
                                  http_client=recorder.async_http_client(),
                                  open_telemetry={"traces": False})
    messages = [{"role": "user", "content": PROMPT}]
    oa.chat.completions.create(model="gpt-4o-mini", messages=messages, seed=5, temperature=0.0)
    for _ in oa.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True):
        pass
    oa.responses.create(model="gpt-4o-mini", input=PROMPT)

    async def claude():
        await an.messages.create(model="claude-x", max_tokens=30, messages=messages)
        async with an.messages.stream(model="claude-x", max_tokens=30,
                                      messages=messages) as stream:
            async for _ in stream.text_stream:
                pass

    asyncio.run(claude())

    # Each call returned only once its span had ended (ours when its body ended, before the
    # capture's durable wait), so the spans are all there already.
    caps = read_intake(kafka_bootstrap, topics.names.intake, 5)
    spans = by_event_id(exporter.get_finished_spans())
    assert len(caps) == 5 and len(spans) == 5
    for cap in caps:
        [span] = spans[cap.event["event_id"]]
        assert_names_the_capture(span, cap.event, api)
        assert span.attributes["gen_ai.request.model"] == cap.event["model_id"]
        assert span.attributes["gen_ai.response.model"] == cap.event["response_model"]
        assert span.attributes.get("gen_ai.request.stream", False) is \
            cap.event["capture"]["streamed"]
    first = next(c.event for c in caps if c.event["replay"]["seed"] == "5")
    [span] = spans[first["event_id"]]
    assert span.attributes["gen_ai.request.seed"] == 5
    assert span.attributes["gen_ai.request.temperature"] == 0.0
    assert span.attributes["gen_ai.provider.name"] == "openai"
    assert recorder.metrics.snapshot()["errors"] == 0


def test_with_the_official_instrumentation_one_genai_span_per_call(make_recorder, topics,
                                                                   fake_provider,
                                                                   kafka_bootstrap, traced):
    provider, exporter = traced
    recorder = make_recorder(topics, tracer_provider=provider)
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        oa = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="sk-test",
                           max_retries=0, http_client=recorder.http_client())
        messages = [{"role": "user", "content": PROMPT}]
        oa.chat.completions.create(model="gpt-4o-mini", messages=messages)
        for _ in oa.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                            stream=True):
            pass
    finally:
        instrumentor.uninstrument()
    caps = read_intake(kafka_bootstrap, topics.names.intake, 2)
    finished = exporter.get_finished_spans()
    genai = [s for s in finished if "gen_ai.operation.name" in s.attributes]
    assert len(genai) == 2 == len(finished)
    assert {s.instrumentation_scope.name for s in genai} == {
        "opentelemetry.instrumentation.genai.openai"}
    spans = by_event_id(genai)
    for cap in caps:
        [span] = spans[cap.event["event_id"]]
        assert span.attributes["evidence.content_key"] == cap.event["content_key"].hex()
        assert span.attributes["evidence.response_digest"] == cap.event["response_digest"].hex()
        ctx = span.get_span_context()
        assert cap.event["trace"]["trace_id"] == ctx.trace_id.to_bytes(16, "big")
        assert cap.event["trace"]["span_id"] == ctx.span_id.to_bytes(8, "big")
