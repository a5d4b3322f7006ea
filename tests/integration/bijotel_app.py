"""A BIJOTEL user's application, set up as BIJOTEL's docs set one up, exporting to us.

    python -m tests.integration.bijotel_app OTLP_TRACES_URL CHAIN_DB CALLS_JSON

The SDK's TracerProvider has BIJOTEL 2.17.0's own ``HmacChainSpanProcessor`` (it seals every
GenAI span into its HMAC chain, ``CHAIN_DB``) and the standard ``OTLPSpanExporter``
(protobuf over HTTP, gzip: BIJOTEL ships no OTLP exporter, its ``bijotel.exporters`` are
storage backends) pointed at ``evidence otlp``. Each call of ``CALLS_JSON`` (a list of
``{"prompt", "output", "seed", "content", "claims"}``) goes through BIJOTEL's ``@trace_genai``
around a real Anthropic SDK call (answered by an in-process fake with ``output``), and, with
``claims``, ``record_replay_context``'s attributes set on the span after the model answered,
as BIJOTEL's recorder says to. ``content`` false records the call without its messages (custom
extractors that keep only the model and the response's ids).

``trace_genai`` reads the global tracer provider, which a process can set once: that is why
this runs as a process of its own, never inside the test runner. It prints one JSON line per
call (its span id and the output) and exits non-zero if any export was not a success.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anthropic
import httpx2
from bijotel.decorators import trace_genai
from bijotel.processors import HmacChainSpanProcessor
from bijotel.replay import record_replay_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

SECRET = b"bijotel-test-secret-0123456789"
MODEL = "claude-haiku-4-5"


class CheckedExporter(OTLPSpanExporter):
    """The standard exporter, remembering what each export came to."""

    results: list[SpanExportResult] = []

    def export(self, spans):  # type: ignore[no-untyped-def]
        result = super().export(spans)
        self.results.append(result)
        return result


def client(output: str) -> anthropic.Anthropic:
    message = {"id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
               "model": "claude-haiku-4-5-20251001", "content": [{"type": "text", "text": output}],
               "stop_reason": "end_turn", "stop_sequence": None,
               "usage": {"input_tokens": 12, "output_tokens": 9}}
    transport = httpx2.MockTransport(lambda request: httpx2.Response(200, json=message))
    return anthropic.Anthropic(api_key="sk-ant-test", base_url="http://127.0.0.1:9",
                               http_client=httpx2.Client(transport=transport), max_retries=0)


def ids_only(response: Any) -> dict[str, Any]:
    return {"response_model": response.model, "response_id": response.id}


def record(call: dict[str, Any]) -> dict[str, Any]:
    extractors: dict[str, Any] = {} if call["content"] else {
        "request_extractor": lambda kwargs: {"model": kwargs["model"]},
        "response_extractor": ids_only}

    seen: dict[str, Any] = {}

    @trace_genai(provider="anthropic", **extractors)
    def chat(*, model: str, messages: list[dict[str, Any]], max_tokens: int) -> Any:
        response = client(call["output"]).messages.create(model=model, messages=messages,
                                                          max_tokens=max_tokens)
        text = "".join(block.text for block in response.content if block.type == "text")
        span = trace.get_current_span()
        if call["claims"]:
            for key, value in record_replay_context(prompt=messages, output=text, model=model,
                                                    seed=call["seed"], temperature=0.0).items():
                span.set_attribute(key, value)
        seen["span_id"] = format(span.get_span_context().span_id, "016x")
        return response  # what trace_genai's response extractor reads

    chat(model=MODEL, messages=call["prompt"], max_tokens=50)
    return {"span_id": seen["span_id"], "output": call["output"]}


def main(endpoint: str, chain_db: str, calls_json: str) -> int:
    provider = TracerProvider(resource=Resource.create({"service.name": "bijotel-app"}))
    provider.add_span_processor(HmacChainSpanProcessor(db_path=chain_db, secret_key=SECRET))
    provider.add_span_processor(SimpleSpanProcessor(
        CheckedExporter(endpoint=endpoint, compression=Compression.Gzip, timeout=30)))
    trace.set_tracer_provider(provider)
    for call in json.loads(calls_json):
        print(json.dumps(record(call)), flush=True)
    provider.shutdown()
    failed = [r for r in CheckedExporter.results if r is not SpanExportResult.SUCCESS]
    if failed or not CheckedExporter.results:
        print(f"exports: {[r.name for r in CheckedExporter.results]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
