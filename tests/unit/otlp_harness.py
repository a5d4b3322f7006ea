"""One chat call through a real instrumentation, its telemetry as OTLP bytes.

The SDKs talk to an in-process fake (httpx's MockTransport) that answers with a realistic
response body; the spans and log records go to the SDK's in-memory exporters through providers
made for the one call (never the global ones), and are encoded with the OTLP exporter's own
encoders. Used by tests/unit/test_otlp_*.py and by otlp_recordings/record_openai_v2.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

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


def anthropic_client():
    import anthropic
    import httpx2  # the anthropic SDK takes an httpx2 client

    transport = httpx2.MockTransport(lambda request: httpx2.Response(200, json=ANTHROPIC_MESSAGE))
    return anthropic.Anthropic(api_key="sk-ant-test", base_url="http://127.0.0.1:9",
                               http_client=httpx2.Client(transport=transport), max_retries=0)


def anthropic_chat(client) -> None:
    client.messages.create(model="claude-haiku-4-5", system=SYSTEM, max_tokens=50,
                           messages=[{"role": "user", "content": USER}])
