"""Each dialect's real instrumentation, one call per content mode, mapped from OTLP bytes."""

from __future__ import annotations

import json
import pathlib

import pytest

from otlp import (
    JSON,
    PROTOBUF,
    calls_in_logs,
    calls_in_traces,
    decode_logs,
    decode_traces,
    log_records,
    with_message_events,
)
from otlp.decode import encode
from tests.unit import otlp_harness as h

RECORDINGS = pathlib.Path(__file__).parent / "otlp_recordings"
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def _one_call(telemetry):
    calls = calls_in_traces(decode_traces(telemetry.traces, PROTOBUF))
    assert len(calls) == 1
    return calls[0]


def _common_openai(call):
    assert call.source == "span"
    assert len(call.trace_id) == 16 and len(call.span_id) == 8
    assert call.status == "ok" and call.error_type is None
    assert call.request_model == "gpt-4o-mini"
    assert call.response_model == "gpt-4o-mini-2024-07-18"
    assert call.params.temperature == 0.0 and call.params.top_p == 1.0
    assert call.params.max_tokens == 50
    assert call.usage.input_tokens == 12 and call.usage.output_tokens == 9
    assert call.finish_reasons == ("stop",)
    assert call.end_time_ns >= call.start_time_ns > 0


def _run_genai_openai(monkeypatch, mode):
    return h.genai_openai_call(monkeypatch, mode).telemetry()


@pytest.mark.parametrize("mode", ["NO_CONTENT", "SPAN_ONLY", "EVENT_ONLY", "SPAN_AND_EVENT"])
def test_genai_openai(monkeypatch, mode):
    telemetry = _run_genai_openai(monkeypatch, mode)
    call = _one_call(telemetry)
    _common_openai(call)
    assert (call.dialect, call.scope_name, call.scope_version) == (
        "gen_ai", "opentelemetry.instrumentation.genai.openai", "1.3b0")
    assert call.operation == "chat" and call.provider == "openai"
    assert (call.server_address, call.server_port) == ("127.0.0.1", 9)
    assert call.response_id == "chatcmpl-abc123" and call.params.seed == "42"
    on_span = mode in ("SPAN_ONLY", "SPAN_AND_EVENT")
    if on_span:
        assert call.output_text == h.ANSWER
        assert call.input_messages.attributes == ("gen_ai.input.messages",)
        assert not call.input_messages.rebuilt
        assert json.loads(call.input_messages.raw) == call.input_messages.value
        assert [m["role"] for m in call.input_messages.value] == ["system", "user"]
    else:
        assert call.input_messages is None and call.output_messages is None
        assert call.output_text is None
    events = calls_in_logs(decode_logs(telemetry.logs, PROTOBUF)) if telemetry.logs else []
    if mode in ("EVENT_ONLY", "SPAN_AND_EVENT"):
        (event,) = events
        assert event.source == "log_event" and event.dialect == "gen_ai"
        assert (event.trace_id, event.span_id) == (call.trace_id, call.span_id)
        assert event.output_text == h.ANSWER and event.request_model == "gpt-4o-mini"
        assert not event.input_messages.rebuilt and event.input_messages.raw  # AnyValue bytes
        assert event.input_messages.value[1]["parts"][0]["content"] == h.USER
    else:
        assert events == []


def test_span_bytes_are_the_span_message(monkeypatch):
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    telemetry = _run_genai_openai(monkeypatch, "SPAN_ONLY")
    request = decode_traces(telemetry.traces, PROTOBUF)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    call = _one_call(telemetry)
    assert call.span_bytes == span.SerializeToString(deterministic=True)
    assert Span.FromString(call.span_bytes) == span


@pytest.mark.parametrize("mode", ["SPAN_ONLY", "SPAN_AND_EVENT"])
def test_json_and_protobuf_give_the_same_call(monkeypatch, mode):
    telemetry = _run_genai_openai(monkeypatch, mode)
    as_json = encode(decode_traces(telemetry.traces, PROTOBUF), JSON)
    assert '"traceId"' in as_json.decode()
    assert calls_in_traces(decode_traces(telemetry.traces, PROTOBUF)) == \
        calls_in_traces(decode_traces(_otlp_json(telemetry.traces), JSON))
    if telemetry.logs:
        assert calls_in_logs(decode_logs(telemetry.logs, PROTOBUF)) == \
            calls_in_logs(decode_logs(_otlp_json(telemetry.logs, logs=True), JSON))


def _otlp_json(raw: bytes, logs: bool = False) -> bytes:
    """OTLP/JSON as an exporter writes it: hex ids (the proto3 mapping alone gives base64)."""
    from google.protobuf.json_format import MessageToDict

    from otlp.decode import ExportLogsServiceRequest, ExportTraceServiceRequest

    message = (ExportLogsServiceRequest if logs else ExportTraceServiceRequest).FromString(raw)
    document = MessageToDict(message)

    def hexify(node):
        if isinstance(node, list):
            return [hexify(n) for n in node]
        if isinstance(node, dict):
            return {k: (__import__("base64").b64decode(v).hex()
                        if k in ("traceId", "spanId", "parentSpanId") else
                        v if k in ("attributes", "body") else hexify(v))
                    for k, v in node.items()}
        return node

    return json.dumps(hexify(document)).encode()


@pytest.mark.parametrize("mode", ["NO_CONTENT", "SPAN_ONLY", "EVENT_ONLY", "SPAN_AND_EVENT"])
def test_genai_anthropic(monkeypatch, mode):
    from opentelemetry.instrumentation.genai.anthropic import AnthropicInstrumentor

    monkeypatch.setenv(CAPTURE, mode)
    providers = h.Providers()
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=providers.tracer_provider,
                            logger_provider=providers.logger_provider)
    try:
        h.anthropic_chat(h.anthropic_client())
    finally:
        instrumentor.uninstrument()
    telemetry = providers.telemetry()
    call = _one_call(telemetry)
    assert (call.dialect, call.scope_name) == (
        "gen_ai", "opentelemetry.instrumentation.genai.anthropic")
    assert call.provider == "anthropic" and call.operation == "chat"
    assert call.request_model == "claude-haiku-4-5"
    assert call.response_model == "claude-haiku-4-5-20251001"
    assert call.response_id == "msg_01XFDUDYJgAACzvnptvVoYEL"
    assert call.usage.input_tokens == 12 and call.usage.output_tokens == 9
    assert call.params.max_tokens == 50
    if mode in ("SPAN_ONLY", "SPAN_AND_EVENT"):
        assert call.output_text == h.ANSWER
        assert call.system_instructions is not None
        assert h.SYSTEM in call.system_instructions.raw.decode()
    else:
        assert call.output_text is None and call.system_instructions is None
    events = calls_in_logs(decode_logs(telemetry.logs, PROTOBUF)) if telemetry.logs else []
    assert len(events) == (1 if mode in ("EVENT_ONLY", "SPAN_AND_EVENT") else 0)
    if events:
        assert events[0].output_text == h.ANSWER


@pytest.mark.parametrize("name,content", [
    ("default-no-content", False), ("default-content", True), ("latest-span-only", True)])
def test_openai_v2_recorded(name, content):
    traces = (RECORDINGS / f"openai_v2-{name}.traces.pb").read_bytes()
    logs = (RECORDINGS / f"openai_v2-{name}.logs.pb").read_bytes()
    (call,) = calls_in_traces(decode_traces(traces, PROTOBUF))
    _common_openai(call)
    assert call.response_id == "chatcmpl-abc123" and call.params.seed == "42"
    assert call.provider == "openai"
    if name.startswith("default"):
        assert (call.dialect, call.scope_name) == (
            "gen_ai_1_36", "opentelemetry.instrumentation.openai_v2")
        assert call.input_messages is None  # the content is in per-message events
        call = with_message_events(call, log_records(decode_logs(logs, PROTOBUF)))
    else:
        assert call.dialect == "gen_ai"
    if content:
        assert call.output_text == h.ANSWER
        assert [m["role"] for m in call.input_messages.value] == ["system", "user"]
        assert call.input_messages.rebuilt == name.startswith("default")
    else:
        assert call.input_messages is None and call.output_text is None


@pytest.mark.parametrize("use_attributes", [True, False])
@pytest.mark.parametrize("trace_content", ["true", "false"])
def test_openllmetry(monkeypatch, trace_content, use_attributes):
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.instrumentation.openai.shared.config import Config

    monkeypatch.setenv("TRACELOOP_TRACE_CONTENT", trace_content)
    # the instrumentor writes its options on a class: put them back after the test
    for option in ("use_legacy_attributes", "event_logger", "enrich_assistant",
                   "exception_logger", "upload_base64_image",
                   "enable_trace_context_propagation", "get_common_metrics_attributes"):
        monkeypatch.setattr(Config, option, getattr(Config, option))
    providers = h.Providers()
    instrumentor = OpenAIInstrumentor(use_attributes=use_attributes)
    with h.openai_as_it_was():  # its uninstrument() leaves the SDK wrapped
        instrumentor.instrument(tracer_provider=providers.tracer_provider,
                                logger_provider=providers.logger_provider)
        try:
            h.openai_chat(h.openai_client())
        finally:
            instrumentor.uninstrument()
    from openai.resources.chat.completions import Completions
    from openai.resources.responses import Responses

    wrapped = h.is_instrumentation_wrapper
    assert not any(wrapped(vars(cls)["create"]) for cls in (Completions, Responses))
    telemetry = providers.telemetry()
    call = _one_call(telemetry)
    _common_openai(call)
    assert (call.dialect, call.scope_name, call.scope_version) == (
        "openllmetry", "opentelemetry.instrumentation.openai.v1", "0.62.4")
    assert call.params.stream is False and call.usage.total_tokens == 21
    if not use_attributes and telemetry.logs:
        call = with_message_events(call, log_records(decode_logs(telemetry.logs, PROTOBUF)))
    if trace_content == "true":
        assert call.output_text == h.ANSWER
        assert call.input_messages.rebuilt == (not use_attributes)
    else:
        assert call.input_messages is None and call.output_text is None


def test_openllmetry_flat_attributes_are_rebuilt():
    """Releases before 0.62 wrote gen_ai.prompt.{i}.* / gen_ai.completion.{i}.*."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    from otlp import map_span

    pairs = {"llm.request.type": "chat", "gen_ai.system": "openai",
             "gen_ai.request.model": "gpt-4o-mini",
             "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": h.USER,
             "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": h.ANSWER,
             "gen_ai.completion.0.finish_reason": "stop"}
    span = Span(trace_id=b"\1" * 16, span_id=b"\2" * 8, name="openai.chat", attributes=[
        KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in pairs.items()])
    call = map_span(span, InstrumentationScope(name="opentelemetry.instrumentation.openai.v1"))
    assert call.dialect == "openllmetry" and call.operation == "chat"
    assert call.input_messages.rebuilt and call.input_messages.raw is None
    assert call.input_messages.value == [{"role": "user", "content": h.USER}]
    assert call.input_messages.attributes == ("gen_ai.prompt.0.content", "gen_ai.prompt.0.role")
    assert call.output_text == h.ANSWER


@pytest.mark.parametrize("hide", [False, True])
def test_openinference(hide):
    from openinference.instrumentation import TraceConfig
    from openinference.instrumentation.openai import OpenAIInstrumentor

    providers = h.Providers()
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=providers.tracer_provider,
                            config=TraceConfig(hide_inputs=hide, hide_outputs=hide))
    try:
        h.openai_chat(h.openai_client())
    finally:
        instrumentor.uninstrument()
    call = _one_call(providers.telemetry())
    assert (call.dialect, call.scope_name) == ("openinference",
                                               "openinference.instrumentation.openai")
    assert call.provider == "openai" and call.operation is None
    assert call.request_model == "gpt-4o-mini"
    assert call.response_model == "gpt-4o-mini-2024-07-18"
    assert call.params.seed == "42" and call.params.max_tokens == 50
    assert call.usage.input_tokens == 12 and call.usage.total_tokens == 21
    assert call.finish_reasons == ("stop",)
    if hide:
        assert call.input_messages is None and call.output_text is None
        assert call.response_id is None
    else:
        assert call.response_id == "chatcmpl-abc123"
        assert call.input_messages.rebuilt and call.input_messages.value == h.OPENAI_MESSAGES
        assert call.output_text == h.ANSWER


@pytest.mark.parametrize("version", [1, 2])
def test_logfire(version):
    import logfire
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    providers = h.Providers()
    instance = logfire.configure(
        local=True, send_to_logfire=False, console=False, inspect_arguments=False,
        additional_span_processors=[SimpleSpanProcessor(providers.spans)])
    client = h.openai_client()
    with instance.instrument_openai(client, version=version):
        h.openai_chat(client)
    call = _one_call(providers.telemetry())
    _common_openai(call)
    assert (call.dialect, call.scope_name) == ("logfire", "logfire.openai")
    assert call.params.seed == "42" and call.provider == "openai"
    assert call.output_text == h.ANSWER
    assert call.input_messages.rebuilt == (version == 1)
