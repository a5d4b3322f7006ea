"""Spans out, in-process: the GenAI attributes read from a capture's bytes (semconv), the rule
for joining a span, and the capture transport with the SDK's TracerProvider and in-memory
exporter behind the openai and anthropic SDKs (httpx2.MockTransport serving the fake
provider's bodies; no network, no Kafka). Every provider passed explicitly: no global state."""

from __future__ import annotations

import json
import subprocess
import sys

import anthropic
import httpx2
import openai
import pytest
from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from evidence_client import adapters, semconv
from evidence_client.capture import HASH_ONLY, VALUE
from evidence_client.genai_hook import EvidenceCompletionHook
from evidence_client.otel import Spans, is_genai_span
from evidence_client.transport import AsyncCaptureTransport, CaptureTransport
from evidence_contract import digests
from testing.fake_provider import (
    anthropic_body,
    anthropic_events,
    chat_body,
    chat_events,
    response_obj,
    responses_events,
)

PROMPT = "the secret prompt 7f3a"
ANSWER = "the secret answer 9c1e"


def sse(events) -> bytes:
    return b"".join(events)


# -- semconv: the conventions' attributes from bytes ---------------------------------------

def test_request_attributes_of_a_chat_request():
    body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": PROMPT}],
                       "seed": 42, "temperature": 0.5, "top_p": 0.9,
                       "max_completion_tokens": 64, "stream": True, "n": 3}).encode()
    route = adapters.detect("api.openai.com", "/v1/chat/completions")
    attrs = semconv.request_attributes(route, "https://api.openai.com/v1/chat/completions", body)
    assert attrs == {
        "server.address": "api.openai.com", "server.port": 443,
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini", "gen_ai.request.seed": 42,
        "gen_ai.request.temperature": 0.5, "gen_ai.request.top_p": 0.9,
        "gen_ai.request.max_tokens": 64, "gen_ai.request.stream": True,
        "gen_ai.request.choice.count": 3}
    assert semconv.span_name(attrs) == "chat gpt-4o-mini"


@pytest.mark.parametrize("host,path,provider", [
    ("x.openai.azure.com", "/openai/deployments/d/chat/completions", "azure.ai.openai"),
    ("api.anthropic.com", "/v1/messages", "anthropic"),
    ("127.0.0.1", "/v1/responses", "openai"),         # an OpenAI-compatible server
])
def test_provider_names_follow_the_conventions(host, path, provider):
    route = adapters.detect(host, path)
    attrs = semconv.request_attributes(route, f"http://{host}:8080{path}", b'{"model":"m"}')
    assert attrs["gen_ai.provider.name"] == provider and attrs["server.port"] == 8080


def test_a_request_in_no_known_format_gets_no_genai_attributes():
    route = adapters.detect("api.openai.com", "/v1/models")
    attrs = semconv.request_attributes(route, "https://api.openai.com/v1/models", b"")
    assert attrs == {"server.address": "api.openai.com", "server.port": 443}
    assert semconv.span_name(attrs) == "evidence capture"


def test_a_seed_beyond_int64_is_left_out_not_wrapped():
    route = adapters.detect("api.openai.com", "/v1/chat/completions")
    attrs = semconv.request_attributes(route, "https://api.openai.com/v1/chat/completions",
                                       b'{"model":"m","seed":18446744073709551615}')
    assert "gen_ai.request.seed" not in attrs


EXPECTED_RESPONSE = {
    adapters.OPENAI_CHAT: {"gen_ai.response.id": "chatcmpl-fake",
                           "gen_ai.response.model": "m-2026-07-01",
                           "gen_ai.response.finish_reasons": ("stop",)},
    adapters.OPENAI_RESPONSES: {"gen_ai.response.id": "resp_fake",
                                "gen_ai.response.model": "m-2026-07-01",
                                "gen_ai.response.finish_reasons": ("stop",),
                                "gen_ai.usage.input_tokens": 5, "gen_ai.usage.output_tokens": 7,
                                "gen_ai.usage.cache_read.input_tokens": 0,
                                "gen_ai.usage.reasoning.output_tokens": 0},
    adapters.ANTHROPIC_MESSAGES: {"gen_ai.response.id": "msg_fake",
                                  "gen_ai.response.model": "m-2026-07-01",
                                  "gen_ai.response.finish_reasons": ("stop",),
                                  "gen_ai.usage.input_tokens": 5,
                                  "gen_ai.usage.output_tokens": 7},
}
BODIES = {
    adapters.OPENAI_CHAT: (json.dumps(chat_body("m", ANSWER)).encode(),
                           sse(chat_events("m", ANSWER))),
    adapters.OPENAI_RESPONSES: (json.dumps(response_obj("m", ANSWER, "completed")).encode(),
                                sse(responses_events("m", ANSWER))),
    adapters.ANTHROPIC_MESSAGES: (json.dumps(anthropic_body("m", ANSWER)).encode(),
                                  sse(anthropic_events("m", ANSWER))),
}


@pytest.mark.parametrize("kind", sorted(BODIES))
@pytest.mark.parametrize("streamed", [False, True])
def test_response_attributes_whole_and_streamed(kind, streamed):
    body = BODIES[kind][streamed]
    expected = dict(EXPECTED_RESPONSE[kind])
    if kind == adapters.OPENAI_CHAT and not streamed:
        expected.update({"gen_ai.usage.input_tokens": 5, "gen_ai.usage.output_tokens": 7})
    assert semconv.response_attributes(kind, body, streamed) == expected


def test_usage_details_and_finish_reasons_in_the_conventions_words():
    chat = {"id": "c", "model": "m", "choices": [
        {"index": 1, "finish_reason": "length"}, {"index": 0, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 4,
                  "prompt_tokens_details": {"cached_tokens": 6},
                  "completion_tokens_details": {"reasoning_tokens": 3}}}
    attrs = semconv.response_attributes(adapters.OPENAI_CHAT, json.dumps(chat).encode(), False)
    assert attrs["gen_ai.response.finish_reasons"] == ("stop", "length")
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 6
    assert attrs["gen_ai.usage.reasoning.output_tokens"] == 3
    msg = {**anthropic_body("m", "x"), "stop_reason": "max_tokens",
           "usage": {"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 8,
                     "cache_creation_input_tokens": 9}}
    attrs = semconv.response_attributes(adapters.ANTHROPIC_MESSAGES, json.dumps(msg).encode(),
                                        False)
    assert attrs["gen_ai.response.finish_reasons"] == ("length",)
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 8
    assert attrs["gen_ai.usage.cache_creation.input_tokens"] == 9
    cut = {**response_obj("m", "x", "incomplete"),
           "incomplete_details": {"reason": "max_output_tokens"}}
    attrs = semconv.response_attributes(adapters.OPENAI_RESPONSES, json.dumps(cut).encode(),
                                        False)
    assert attrs["gen_ai.response.finish_reasons"] == ("length",)


def test_unreadable_or_unknown_responses_give_nothing():
    assert semconv.response_attributes(None, b'{"id":"x"}', False) == {}
    assert semconv.response_attributes(adapters.OPENAI_CHAT, b"<html>", False) == {}
    assert semconv.response_attributes(adapters.OPENAI_CHAT, b"data: {bad\n\n", True) == {}


# -- the rule for joining a span -----------------------------------------------------------

class Attrs:
    def __init__(self, **attributes):
        self.attributes = {k.replace("__", "."): v for k, v in attributes.items()}


@pytest.mark.parametrize("span,joins", [
    (Attrs(gen_ai__operation__name="chat"), True),                     # official, OpenLLMetry
    (Attrs(gen_ai__operation__name="text_completion"), True),
    (Attrs(gen_ai__operation__name="invoke_agent"), False),            # holds many calls
    (Attrs(gen_ai__operation__name="execute_tool"), False),
    (Attrs(openinference__span__kind="LLM"), True),                    # OpenInference
    (Attrs(openinference__span__kind="CHAIN"), False),
    (Attrs(llm__request__type="chat"), True),                          # older OpenLLMetry
    (Attrs(http__request__method="POST"), False),
    (object(), False),                                                 # unreadable attributes
])
def test_which_spans_are_genai_inference_spans(span, joins):
    assert is_genai_span(span) is joins


# -- the transport with the SDK ------------------------------------------------------------

@pytest.fixture
def traced():
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def fake_handler(request: httpx2.Request) -> httpx2.Response:
    body = json.loads(request.content)
    model, streamed = body["model"], body.get("stream", False)
    if model == "fail-400":
        return httpx2.Response(400, json={"error": {"message": "bad", "type": "invalid"}})
    if request.url.path.endswith("/messages"):
        return (httpx2.Response(200, headers={"content-type": "text/event-stream"},
                                content=sse(anthropic_events(model, ANSWER))) if streamed
                else httpx2.Response(200, json=anthropic_body(model, ANSWER)))
    return (httpx2.Response(200, headers={"content-type": "text/event-stream"},
                            content=sse(chat_events(model, ANSWER))) if streamed
            else httpx2.Response(200, json=chat_body(model, ANSWER)))


def transport(sink, errors, spans, asynchronous=False, policy=VALUE, handler=fake_handler):
    cls = AsyncCaptureTransport if asynchronous else CaptureTransport
    return cls(httpx2.MockTransport(handler), "acme:otel", policy, sink.append, errors.append,
               None, spans)


def openai_client(t):
    return openai.OpenAI(base_url="https://api.openai.com/v1", api_key="sk-test", max_retries=0,
                         http_client=httpx2.Client(transport=t))


def ask(client, model="gpt-4o-mini", **kw):
    return client.chat.completions.create(model=model, messages=[{"role": "user",
                                                                  "content": PROMPT}], **kw)


def assert_no_content(spans):
    for s in spans:
        text = json.dumps({k: list(v) if isinstance(v, tuple) else v
                           for k, v in s.attributes.items()})
        assert PROMPT not in text and ANSWER not in text and "echo" not in text
        for e in s.events:
            assert PROMPT not in json.dumps(dict(e.attributes or {}))


def test_own_span_follows_the_conventions_and_names_the_capture(traced):
    provider, exporter = traced
    sink, errors = [], []
    client = openai_client(transport(sink, errors, Spans(provider, api_url="https://ev.example/")))
    ask(client, seed=11, temperature=0.0, max_tokens=32)
    [span] = exporter.get_finished_spans()
    [ex] = sink
    assert errors == []
    assert span.name == "chat gpt-4o-mini" and span.kind.name == "CLIENT"
    assert span.instrumentation_scope.name == "evidence_client"
    assert span.instrumentation_scope.schema_url == "https://opentelemetry.io/schemas/1.44.0"
    body = b"".join(ex.chunks)
    ref = f"https://ev.example/events/{ex.event_id}"
    assert dict(span.attributes) == {
        "server.address": "api.openai.com", "server.port": 443,
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini", "gen_ai.request.seed": 11,
        "gen_ai.request.temperature": 0.0, "gen_ai.request.max_tokens": 32,
        "gen_ai.response.id": "chatcmpl-fake", "gen_ai.response.model": "gpt-4o-mini-2026-07-01",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": 5, "gen_ai.usage.output_tokens": 7,
        "evidence.event_id": ex.event_id, "evidence.stream": "acme:otel",
        "evidence.content_key": ex.content_key.hex(),
        "evidence.response_digest": digests.response_digest(body).hex(),
        "gen_ai.input.messages_ref": ref, "gen_ai.output.messages_ref": ref}
    assert ex.trace_id == span.context.trace_id.to_bytes(16, "big")
    assert ex.span_id == span.context.span_id.to_bytes(8, "big")
    assert len(ex.trace_id) == 16 and len(ex.span_id) == 8
    assert span.end_time == ex.finished_at * 1000
    assert_no_content([span])


def test_streamed_async_anthropic_call_and_a_failure(traced):
    provider, exporter = traced
    sink, errors = [], []
    t = transport(sink, errors, Spans(provider), asynchronous=True)
    client = anthropic.AsyncAnthropic(base_url="https://api.anthropic.com", api_key="k",
                                      max_retries=0, http_client=httpx2.AsyncClient(transport=t),
                                      open_telemetry={"traces": False})

    async def run():
        async with client.messages.stream(model="claude-x", max_tokens=20, messages=[
                {"role": "user", "content": PROMPT}]) as stream:
            async for _ in stream.text_stream:
                pass
        with pytest.raises(anthropic.BadRequestError):
            await client.messages.create(model="fail-400", max_tokens=5,
                                         messages=[{"role": "user", "content": PROMPT}])

    import asyncio
    asyncio.run(run())
    streamed, failed = exporter.get_finished_spans()
    ok, bad = sink
    assert errors == []
    assert streamed.attributes["gen_ai.request.stream"] is True
    assert streamed.attributes["gen_ai.provider.name"] == "anthropic"
    assert streamed.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert streamed.attributes["evidence.event_id"] == ok.event_id
    assert ok.span_id == streamed.context.span_id.to_bytes(8, "big")
    assert failed.attributes["error.type"] == "400"
    assert failed.status.status_code.name == "ERROR"
    assert "gen_ai.output.messages_ref" not in failed.attributes  # no response kept
    assert "evidence.response_digest" not in failed.attributes
    assert failed.attributes["evidence.event_id"] == bad.event_id
    assert_no_content([streamed, failed])


def test_a_call_with_no_response_has_its_exception_type(traced):
    provider, exporter = traced
    sink, errors = [], []

    def refuse(request):
        raise httpx2.ConnectError("refused")

    client = openai_client(transport(sink, errors, Spans(provider), handler=refuse))
    with pytest.raises(openai.APIConnectionError):
        ask(client)
    [span] = exporter.get_finished_spans()
    assert span.attributes["error.type"] == "ConnectError"
    assert span.attributes["evidence.event_id"] == sink[0].event_id


def test_hash_only_and_sealed_content_keep_what_the_record_does_not_hold_off_the_span(traced):
    provider, exporter = traced
    sink, errors = [], []
    ask(openai_client(transport(sink, errors, Spans(provider, digests=False), policy=HASH_ONLY)))
    [span] = exporter.get_finished_spans()
    assert "gen_ai.input.messages_ref" not in span.attributes  # HASH_ONLY keeps no request
    assert "gen_ai.output.messages_ref" in span.attributes
    assert "evidence.content_key" not in span.attributes       # content_policy "encrypt"
    assert "evidence.response_digest" not in span.attributes
    assert span.attributes["gen_ai.output.messages_ref"] == f"/events/{sink[0].event_id}"


def test_without_an_sdk_nothing_happens():
    sink, errors = [], []
    ask(openai_client(transport(sink, errors, Spans())))  # the global provider: the API's proxy
    [ex] = sink
    assert errors == [] and ex.trace_id is None and ex.span_id is None
    assert ex.event_id is not None


def test_a_sampled_out_call_gets_no_ids(traced):
    provider = TracerProvider(sampler=ALWAYS_OFF)
    sink, errors = [], []
    ask(openai_client(transport(sink, errors, Spans(provider))))
    assert errors == [] and sink[0].trace_id is None


def test_the_client_never_imports_the_sdk():
    code = ("import sys, evidence_client, evidence_client.otel, evidence_client.transport; "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class BrokenSpan:
    """A span whose every call fails: telemetry must not fail the call."""

    def __getattr__(self, name):
        raise RuntimeError(f"broken span: {name}")


class BrokenTracer:
    def start_span(self, *a, **kw):
        return BrokenSpan()


def test_a_failure_in_telemetry_is_counted_and_the_call_goes_on(traced):
    provider, exporter = traced
    spans = Spans(provider)
    spans._tracer = BrokenTracer()
    sink, errors = [], []
    answer = ask(openai_client(transport(sink, errors, spans)))
    assert answer.choices[0].message.content == ANSWER
    assert len(sink) == 1 and errors and all(isinstance(e, RuntimeError) for e in errors)


def test_a_second_capture_in_a_joined_span_gets_a_child_span_of_its_own(traced):
    provider, exporter = traced
    sink, errors = [], []
    client = openai_client(transport(sink, errors, Spans(provider)))
    tracer = provider.get_tracer("an.instrumentation")
    with tracer.start_as_current_span("chat gpt-4o-mini",
                                      attributes={"gen_ai.operation.name": "chat"}) as outer:
        ask(client)
        ask(client)  # as an SDK retry inside one instrumented call would
    child, parent = exporter.get_finished_spans()
    first, second = sink
    assert parent is not None and parent.context.span_id == outer.get_span_context().span_id
    assert parent.attributes["evidence.event_id"] == first.event_id
    assert child.attributes["evidence.event_id"] == second.event_id
    assert child.parent.span_id == parent.context.span_id
    assert first.span_id != second.span_id


# -- with the official instrumentation -----------------------------------------------------

@pytest.fixture
def official(traced, monkeypatch):
    """genai-openai 1.3b0 on this test's providers, with this test's hook; uninstrumented after."""
    provider, exporter = traced
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT", "true")
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    hook = EvidenceCompletionHook()
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider, logger_provider=logger_provider,
                            completion_hook=hook)
    try:
        yield provider, exporter, logs, hook
    finally:
        instrumentor.uninstrument()
        logger_provider.shutdown()


@pytest.mark.parametrize("stream", [False, True])
def test_with_the_official_instrumentation_there_is_one_genai_span(official, stream):
    provider, exporter, logs, hook = official
    sink, errors = [], []
    client = openai_client(transport(sink, errors, Spans(provider)))
    result = ask(client, stream=stream, seed=3)
    if stream:
        assert "".join(c.choices[0].delta.content or "" for c in result if c.choices) == ANSWER
    [span] = exporter.get_finished_spans()
    [ex] = sink
    assert errors == []
    assert span.instrumentation_scope.name == "opentelemetry.instrumentation.genai.openai"
    assert span.attributes["evidence.event_id"] == ex.event_id
    assert span.attributes["evidence.content_key"] == ex.content_key.hex()
    assert span.attributes["gen_ai.output.messages_ref"] == f"/events/{ex.event_id}"
    assert span.attributes["gen_ai.request.seed"] == 3   # the instrumentation's own attributes
    assert ex.span_id == span.context.span_id.to_bytes(8, "big")
    assert_no_content([span])
    # the hook carried the record's references to the operation-details event
    [record] = [r.log_record for r in logs.get_finished_logs()
                if r.log_record.event_name == "gen_ai.client.inference.operation.details"]
    assert record.attributes["evidence.event_id"] == ex.event_id
    assert record.attributes["gen_ai.input.messages_ref"] == f"/events/{ex.event_id}"
    assert PROMPT not in json.dumps(dict(record.attributes), default=str)
    assert (hook.recorded, hook.unrecorded) == (1, 0)


def test_the_hook_counts_an_invocation_that_went_through_no_capture(official):
    provider, exporter, logs, hook = official
    plain = openai.OpenAI(base_url="https://api.openai.com/v1", api_key="k", max_retries=0,
                          http_client=httpx2.Client(transport=httpx2.MockTransport(fake_handler)))
    ask(plain)
    [span] = exporter.get_finished_spans()
    assert "evidence.event_id" not in span.attributes
    assert (hook.recorded, hook.unrecorded) == (0, 1)
    [record] = [r.log_record for r in logs.get_finished_logs()]
    assert "gen_ai.input.messages_ref" not in (record.attributes or {})


def test_the_hook_is_the_entry_point_the_package_loads(monkeypatch):
    from opentelemetry.util.genai.completion_hook import load_completion_hook

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK", "evidence")
    hook = load_completion_hook()
    assert isinstance(hook._wrapped, EvidenceCompletionHook)
