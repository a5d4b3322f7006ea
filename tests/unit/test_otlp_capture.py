"""otlp.capture: a mapped call as the CaptureEvent of record contract 2.2."""

from __future__ import annotations

import hashlib
import json

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from evidence_contract import encode
from evidence_contract.digests import input_digest, otlp_digest, output_digest, span_digest
from evidence_contract.model import EVENT_ID_RE
from otlp import PROTOBUF, decode_logs, decode_traces
from otlp.bijotel import output_hash, prompt_hash
from otlp.capture import Streams, build_capture, captures_in_logs, captures_in_traces, event_id
from otlp.errors import UnmappableError
from tests.unit import otlp_harness as h
from writer.capture import Capture, validate


def _captures(body, streams=Streams()):
    return captures_in_traces(decode_traces(body, PROTOBUF), body, streams, "9.9.9")


def _one(body, streams=Streams()):
    mapped = _captures(body, streams)
    assert mapped.rejected == 0 and len(mapped.captures) == 1
    return mapped.captures[0]


def test_a_genai_span_is_a_capture_mapped_from_telemetry():
    span = h.span(h.GENAI)
    body = h.export(span)
    c = _one(body)
    span_bytes = span.SerializeToString(deterministic=True)
    digest = span_digest(span_bytes)
    assert digest == hashlib.sha256(b"\x08" + span_bytes).digest()
    assert c["schema_version"] == "2.2" and c["stream"] == "otel"
    assert c["content_key"] == digest == c["telemetry"]["span_digest"]
    assert c["request_length"] == len(span_bytes)
    assert c["telemetry"]["otlp_digest"] == otlp_digest(body)
    assert c["request_bytes"] is c["response_bytes"] is c["response_digest"] is None
    assert c["response_length"] is c["prompt_bytes"] is c["encryption"] is None
    assert c["input_bytes"] == h.INPUT.encode()
    assert c["input_digest"] == input_digest(h.INPUT.encode())
    assert c["output_digest"] == output_digest(h.ANSWER)
    assert c["provider"] == {"name": "openai", "endpoint": "api.openai.com:443",
                             "api_version": None}
    assert (c["model_id"], c["response_model"]) == ("gpt-4o-mini", "gpt-4o-mini-2024-07-18")
    assert json.loads(c["params"]) == {"seed": 42, "temperature": 0.0, "max_tokens": 50}
    assert c["replay"] == {"seed": "42", "temperature": 0.0, "top_p": None, "deterministic": True}
    assert c["outcome"] == "COMMITTED" and c["error_bytes"] is None
    assert c["capture"] == {
        "library": "evidence-store-otlp/9.9.9 (mapped from telemetry: gen_ai "
                   "opentelemetry.instrumentation.genai.openai 1.3b0)",
        "host": None, "request_policy": "HASH_ONLY", "streamed": False, "closed_early": False,
        "truncated": False, "started_at": h.START // 1000, "duration_us": 1_500_000}
    assert c["captured_at"] == (h.START + 1_500_000_000) // 1000
    assert c["trace"] == {"trace_id": h.TRACE, "span_id": h.SPAN}
    assert c["telemetry"] | {"otlp_digest": None, "span_digest": None} == {
        "dialect": "gen_ai", "scope_name": "opentelemetry.instrumentation.genai.openai",
        "scope_version": "1.3b0", "source": "SPAN", "otlp_digest": None, "span_digest": None,
        "content_from": ["gen_ai.input.messages", "gen_ai.output.messages"],
        "rebuilt": False, "corroborates": None, "claims": []}
    assert EVENT_ID_RE.fullmatch(c["event_id"])


def test_the_real_official_instrumentation_maps(monkeypatch):
    providers = h.genai_openai_call(monkeypatch, "SPAN_ONLY")
    c = _one(providers.telemetry().traces)
    assert c["telemetry"]["dialect"] == "gen_ai" and c["output_digest"] == output_digest(h.ANSWER)
    assert json.loads(c["input_bytes"])[-1]["parts"][0]["content"] == h.USER
    assert c["replay"]["seed"] == "42" and c["provider"]["name"] == "openai"


def test_without_a_server_address_the_endpoint_names_the_scope():
    attrs = {k: v for k, v in h.GENAI.items() if not k.startswith("server.")}
    assert _one(h.export(h.span(attrs)))["provider"]["endpoint"] == \
        "otlp:opentelemetry.instrumentation.genai.openai"


def test_rebuilt_messages_are_never_input_bytes():
    flat = {"gen_ai.operation.name": "chat", "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o-mini", "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": h.USER, "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": h.ANSWER}
    c = _one(h.export(h.span(flat), scope="opentelemetry.instrumentation.openai", version="0.40.0"))
    assert c["telemetry"]["dialect"] == "openllmetry" and c["telemetry"]["rebuilt"] is True
    assert c["input_bytes"] is None and c["input_digest"] is None
    assert c["output_digest"] == output_digest(h.ANSWER)
    assert c["telemetry"]["content_from"] == [
        "gen_ai.prompt.0.content", "gen_ai.prompt.0.role", "gen_ai.completion.0.content",
        "gen_ai.completion.0.role"]


def test_a_failed_call_is_failed_with_its_error_type():
    c = _one(h.export(h.span({**h.GENAI, "error.type": "RateLimitError"}, error=True)))
    assert c["outcome"] == "FAILED" and c["error_bytes"] == b"RateLimitError"


def test_a_resent_span_has_the_same_event_id_in_any_request():
    span = h.span(h.GENAI)
    other = h.span({**h.GENAI, "gen_ai.request.model": "gpt-4o"}, span_id=b"\x01" * 8)
    alone, batched = _one(h.export(span)), _captures(h.export(other, span)).captures[1]
    assert alone["event_id"] == batched["event_id"]
    assert alone["telemetry"]["otlp_digest"] != batched["telemetry"]["otlp_digest"]
    assert alone["event_id"][:13].replace("-", "") == f"{h.START // 1_000_000:012x}"


def test_other_bytes_for_the_same_span_id_are_another_event_id():
    first = _one(h.export(h.span(h.GENAI)))
    conflicting = _one(h.export(h.span({**h.GENAI, "gen_ai.response.model": "gpt-4o"})))
    assert first["trace"] == conflicting["trace"]
    assert first["event_id"] != conflicting["event_id"]
    assert EVENT_ID_RE.fullmatch(conflicting["event_id"])


@pytest.mark.parametrize("start", [0, 1, 2**64 - 1])
def test_event_ids_are_uuidv7_at_any_start(start):
    span = h.span(h.GENAI)
    span.start_time_unix_nano = start
    c = _one(h.export(span))
    assert EVENT_ID_RE.fullmatch(c["event_id"])
    assert c["event_id"] == event_id(_call(span), c["content_key"])


def _call(span):
    from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
    from otlp import map_span

    return map_span(span, InstrumentationScope(name="opentelemetry.instrumentation.genai.openai"))


def test_a_span_that_is_not_genai_is_neither_a_capture_nor_rejected():
    mapped = _captures(h.export(h.span({"http.method": "GET"})))
    assert mapped.captures == [] and mapped.rejected == 0 and mapped.error_message == ""


@pytest.mark.parametrize("change, reason", [
    (dict(trace_id=bytes(16)), "trace id"),
    (dict(span_id=b"\x01" * 4), "span id"),
    (dict(attrs={**h.GENAI, "evidence.event_id": "not-a-uuid"}), "evidence.event_id"),
])
def test_genai_items_the_contract_cannot_hold_are_rejected(change, reason):
    attrs = change.pop("attrs", h.GENAI)
    good = h.span(h.GENAI, span_id=b"\x02" * 8)
    mapped = _captures(h.export(h.span(attrs, **change), good))
    assert mapped.rejected == 1 and len(mapped.captures) == 1
    assert reason in mapped.error_message


def test_a_span_without_a_scope_name_is_rejected():
    mapped = _captures(h.export(h.span(h.GENAI), scope=""))
    assert mapped.rejected == 1 and "scope name" in mapped.error_message


def test_a_gateway_capture_named_by_the_span_is_corroborated():
    event = "01936f6e-8b2a-7c3d-9e4f-0a1b2c3d4e5f"
    c = _one(h.export(h.span({**h.GENAI, "evidence.event_id": event})))
    assert c["telemetry"]["corroborates"] == event


def test_streams_by_service_name():
    streams = Streams("otel", by_service=True)
    assert _one(h.export(h.span(h.GENAI), service="checkout"), streams)["stream"] == "otel.checkout"
    assert _one(h.export(h.span(h.GENAI)), streams)["stream"] == "otel"
    mapped = _captures(h.export(h.span(h.GENAI), service="check out"), streams)
    assert mapped.rejected == 1 and "service.name" in mapped.error_message


def test_a_stream_that_is_no_stream_id_is_refused():
    with pytest.raises(ValueError, match="stream id"):
        Streams("no spaces")


def test_bijotel_claims_are_kept_with_verdicts():
    messages = [{"role": "user", "content": h.USER}]
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
             "gen_ai.request.model": "claude-haiku-4-5", "gen_ai.request.temperature": 0.0,
             "gen_ai.input.messages": json.dumps(messages), "gen_ai.output.messages": h.OUTPUT,
             "bijotel.replay.prompt_hash": prompt_hash(messages),
             "bijotel.replay.output_hash": output_hash("something else"),
             "bijotel.replay.seed": 7, "bijotel.replay.temperature": 0.0,
             "bijotel.replay.deterministic": True}
    c = _one(h.export(h.span(attrs), scope="bijotel.decorators", version="2.17.0"))
    assert c["telemetry"]["dialect"] == "bijotel"
    assert c["telemetry"]["claims"] == [
        {"name": "bijotel.replay.prompt_hash", "value": prompt_hash(messages),
         "verdict": "VERIFIED"},
        {"name": "bijotel.replay.output_hash", "value": output_hash("something else"),
         "verdict": "MISMATCHED"},
        {"name": "bijotel.replay.seed", "value": "7", "verdict": "UNVERIFIABLE"},
        {"name": "bijotel.replay.temperature", "value": "0.0", "verdict": "VERIFIED"},
        {"name": "bijotel.replay.deterministic", "value": "true", "verdict": "UNVERIFIABLE"},
    ]


def test_an_inference_event_is_a_log_event_capture(monkeypatch):
    providers = h.genai_openai_call(monkeypatch, "EVENT_ONLY")
    telemetry = providers.telemetry()
    request = decode_logs(telemetry.logs, PROTOBUF)
    assert isinstance(request, ExportLogsServiceRequest)
    mapped = captures_in_logs(request, telemetry.logs, Streams(), "9.9.9")
    (c,) = mapped.captures
    (span,) = providers.spans.get_finished_spans()
    assert c["telemetry"]["source"] == "LOG_EVENT"
    assert c["trace"]["trace_id"] == span.context.trace_id.to_bytes(16, "big")
    assert c["output_digest"] == output_digest(h.ANSWER) and c["input_bytes"] is not None
    _sealable(c)


def test_build_capture_refuses_what_it_cannot_hold():
    span = h.span(h.GENAI, trace_id=b"")
    with pytest.raises(UnmappableError, match="trace id"):
        build_capture(_call(span), b"", "otel", "1")


def _sealable(c):
    r = validate(encode("CaptureEvent", c), c["stream"].encode(), 1 << 24)
    assert isinstance(r, Capture), r


@pytest.mark.parametrize("attrs, scope", [
    (h.GENAI, "opentelemetry.instrumentation.genai.openai"),
    ({**h.GENAI, "error.type": "RateLimitError"}, "opentelemetry.instrumentation.genai.openai"),
    ({**h.GENAI, "evidence.event_id": "01936f6e-8b2a-7c3d-9e4f-0a1b2c3d4e5f",
      "gen_ai.request.seed": str(2**70)}, "opentelemetry.instrumentation.genai.openai"),
    ({"gen_ai.operation.name": "chat", "gen_ai.system": "openai",
      "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "hi"},
     "opentelemetry.instrumentation.openai"),
    ({**h.GENAI, "bijotel.replay.output_hash": output_hash(h.ANSWER),
      "bijotel.replay.deterministic": True}, "bijotel.decorators"),
])
def test_every_capture_is_one_the_writer_seals(attrs, scope):
    _sealable(_one(h.export(h.span(attrs), scope=scope)))

