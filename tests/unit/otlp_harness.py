"""One chat call through a real instrumentation, its telemetry as OTLP bytes.

The SDKs talk to an in-process fake (httpx's MockTransport) that answers with a realistic
response body; the spans and log records go to the SDK's in-memory exporters through providers
made for the one call (never the global ones), and are encoded with the OTLP exporter's own
encoders. Used by tests/unit/test_otlp_*.py and by otlp_recordings/record_openai_v2.py.
"""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import dataclass
from typing import Iterator

import httpx
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

SYSTEM = "Be brief."
USER = "Say hello"
ANSWER = "Hello there, traveller. ¿Qué tal?"
OPENAI_MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]

CHAT_COMPLETION = {
    "id": "chatcmpl-abc123", "object": "chat.completion", "created": 1700000000,
    "model": "gpt-4o-mini-2024-07-18", "system_fingerprint": "fp_44709d6fcb",
    "choices": [{"index": 0, "logprobs": None, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": ANSWER, "refusal": None}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21},
}
ANTHROPIC_MESSAGE = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
    "model": "claude-haiku-4-5-20251001", "content": [{"type": "text", "text": ANSWER}],
    "stop_reason": "end_turn", "stop_sequence": None,
    "usage": {"input_tokens": 12, "output_tokens": 9},
}


@dataclass
class Telemetry:
    """What one call left: the trace and logs export requests' bytes (logs may be empty)."""

    traces: bytes
    logs: bytes
    span_count: int
    log_count: int


class Providers:
    """A tracer and a logger provider of one test, each with an in-memory exporter."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.logs = InMemoryLogRecordExporter()
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs))

    def telemetry(self) -> Telemetry:
        spans = self.spans.get_finished_spans()
        logs = self.logs.get_finished_logs()
        return Telemetry(
            traces=encode_spans(spans).SerializeToString(),
            logs=encode_logs(logs).SerializeToString() if logs else b"",
            span_count=len(spans), log_count=len(logs))

    def close(self) -> None:
        self.tracer_provider.shutdown()
        self.logger_provider.shutdown()


@contextlib.contextmanager
def openai_as_it_was() -> Iterator[None]:
    """Put every method of the openai SDK's classes back as it was before the block.

    OpenLLMetry (opentelemetry-instrumentation-openai 0.62.4) wraps the SDK's methods and its
    ``uninstrument()`` leaves them wrapped: it calls ``unwrap(module, "Class.method")``, which
    opentelemetry-instrumentation 0.66 reads as an attribute named "Class.method" and finds
    nothing to unwrap. The wrapper then goes on starting a recording GenAI span (of the
    instrumented test's TracerProvider) around every later openai call in the process, and a
    capture transport rightly joins the current GenAI span: a later test on the same worker
    finds its capture named by no span of its own.
    """
    def methods() -> dict[tuple[type, str], object]:
        # vars(), never getattr: the openai module's lazy proxies must not be loaded here
        return {(cls, name): value
                for module_name, module in list(sys.modules.items())
                if module_name == "openai" or module_name.startswith("openai.")
                for cls in list(vars(module).values())
                if issubclass(type(cls), type) and cls.__module__.startswith("openai")
                for name, value in list(vars(cls).items())}

    before = methods()
    try:
        yield
    finally:
        for (cls, name), value in methods().items():
            if is_instrumentation_wrapper(value) and before.get((cls, name)) is not value:
                setattr(cls, name, before.get((cls, name), value.__wrapped__))


def is_instrumentation_wrapper(value: object) -> bool:
    """Is ``value`` an instrumentation's wrapper (wrapt's proxy of a function)?"""
    import wrapt

    return isinstance(value, wrapt.BaseObjectProxy)


def openai_client(seen: list | None = None):
    import openai

    def answer(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return httpx.Response(200, json=CHAT_COMPLETION)

    return openai.OpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1",
                         http_client=httpx.Client(transport=httpx.MockTransport(answer)),
                         max_retries=0)


def openai_chat(client) -> None:
    client.chat.completions.create(model="gpt-4o-mini", messages=OPENAI_MESSAGES, seed=42,
                                   temperature=0.0, top_p=1.0, max_tokens=50)



def genai_openai_call(monkeypatch, mode: str) -> Providers:
    """One chat call through the official instrumentation (opentelemetry-instrumentation-
    genai-openai) under content mode ``mode`` (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT);
    its telemetry is in the providers returned."""
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", mode)
    providers = Providers()
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=providers.tracer_provider,
                            logger_provider=providers.logger_provider)
    try:
        openai_chat(openai_client())
    finally:
        instrumentor.uninstrument()
    return providers

def anthropic_client():
    import anthropic
    import httpx2  # the anthropic SDK takes an httpx2 client

    transport = httpx2.MockTransport(lambda request: httpx2.Response(200, json=ANTHROPIC_MESSAGE))
    return anthropic.Anthropic(api_key="sk-ant-test", base_url="http://127.0.0.1:9",
                               http_client=httpx2.Client(transport=transport), max_retries=0)


def anthropic_chat(client) -> None:
    client.messages.create(model="claude-haiku-4-5", system=SYSTEM, max_tokens=50,
                           messages=[{"role": "user", "content": USER}])


# Spans built by hand, each id and attribute chosen (tests/unit/test_otlp_capture.py and
# tests/integration/test_otlp_receiver.py).

TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
SPAN = bytes.fromhex("b7ad6b7169203331")
START = 1_764_000_000_123_456_789
INPUT = json.dumps([{"role": "user", "parts": [{"type": "text", "content": USER}]}])
OUTPUT = json.dumps([{"role": "assistant", "finish_reason": "stop",
                      "parts": [{"type": "text", "content": ANSWER}]}])


def kv(key, value):
    """An OTLP attribute of a Python value (bool, int, float or str)."""
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


GENAI = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
         "gen_ai.request.model": "gpt-4o-mini", "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
         "gen_ai.request.seed": 42, "gen_ai.request.temperature": 0.0,
         "gen_ai.request.max_tokens": 50, "server.address": "api.openai.com",
         "server.port": 443, "gen_ai.input.messages": INPUT, "gen_ai.output.messages": OUTPUT}


def span(attrs, *, span_id=SPAN, trace_id=TRACE, error=False):
    """A CLIENT span with these attributes, built as an exporter sends it."""
    return Span(trace_id=trace_id, span_id=span_id, name="chat gpt-4o-mini",
                kind=Span.SPAN_KIND_CLIENT,
                start_time_unix_nano=START, end_time_unix_nano=START + 1_500_000_000,
                attributes=[kv(k, v) for k, v in attrs.items()],
                status=Status(code=Status.STATUS_CODE_ERROR if error else Status.STATUS_CODE_OK))


def export(*spans, scope="opentelemetry.instrumentation.genai.openai", version="1.3b0",
           service=None):
    """An ExportTraceServiceRequest of ``spans`` under one scope, as protobuf bytes."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    if service is not None:
        resource_spans.resource.attributes.append(kv("service.name", service))
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name, scope_spans.scope.version = scope, version
    scope_spans.spans.extend(spans)
    return request.SerializeToString()
