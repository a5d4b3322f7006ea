"""build_event: outcome rules, digests, policy; every event encodes under the schema."""

from __future__ import annotations

import gzip
import hashlib

import pytest

from evidence_client.capture import HASH_ONLY, VALUE, Exchange, build_event, decode_body
from evidence_contract import decode, encode, new_event_id
from tests.fakes.provider import chat_events
from writer.core import Capture, validate

REQ = b'{"model":"gpt-4o","messages":[{"role":"user","content":"q"}],"seed":1}'


def sha(prefix: int, data: bytes) -> bytes:
    return hashlib.sha256(bytes([prefix]) + data).digest()


def exchange(**kw) -> Exchange:
    base = dict(stream="s:1", request_policy=VALUE, content_key=sha(0, REQ), request_bytes=REQ,
                url="https://api.openai.com/v1/chat/completions", host="api.openai.com",
                path="/v1/chat/completions", started_at=1_000, finished_at=2_000, duration_us=1000)
    base.update(kw)
    return Exchange(**base)


def build(ex: Exchange) -> dict:
    event = build_event(ex, new_event_id(), "test/1", None)
    value = encode("CaptureEvent", event)
    name, back = decode(value)
    assert name == "CaptureEvent" and back == event
    # Every capture the gateway builds keeps the writer's rules of the contract.
    assert isinstance(validate(value, ex.stream.encode(), 64 * 1024 * 1024), Capture)
    return event


def test_committed_whole_response():
    body = b'{"model":"gpt-4o-x","system_fingerprint":"fp","choices":[{"index":0,"message":{"content":"A"}}]}'
    e = build(exchange(status=200, content_type="application/json", chunks=[body[:10], body[10:]],
                       eof=True))
    assert e["outcome"] == "COMMITTED"
    assert e["response_bytes"] == body and e["response_digest"] == sha(1, body)
    assert e["output_digest"] == sha(4, b"A")
    assert (e["fingerprint"], e["response_model"], e["model_id"]) == ("fp", "gpt-4o-x", "gpt-4o")
    assert e["replay"]["deterministic"] is True and e["replay"]["seed"] == "1"
    assert e["request_bytes"] == REQ and e["error_bytes"] is None
    assert (e["request_length"], e["response_length"]) == (len(REQ), len(body))
    assert e["capture"]["truncated"] is False
    assert (e["input_bytes"], e["prompt_bytes"], e["input_digest"], e["prompt_digest"]) == (None,) * 4
    assert e["captured_at"] == 2_000 and e["capture"]["started_at"] == 1_000


def test_the_span_a_call_ran_in_is_sealed_as_its_trace_context():
    trace_id, span_id = bytes.fromhex("0af7651916cd43dd8448eb211c80319c"), bytes.fromhex("b7ad6b7169203331")
    e = build(exchange(status=200, content_type="application/json", chunks=[b'{"choices":[]}'],
                       eof=True, trace_id=trace_id, span_id=span_id))
    assert e["schema_version"] == "2.2"
    assert e["trace"] == {"trace_id": trace_id, "span_id": span_id}
    assert e["telemetry"] is None
    assert build(exchange(status=200, content_type="application/json", chunks=[b"{}"],
                          eof=True))["trace"] is None


def test_no_response_is_unknown_with_the_exception():
    e = build(exchange(error="ConnectError: refused"))
    assert e["outcome"] == "UNKNOWN" and e["error_bytes"] == b"ConnectError: refused"
    assert e["http_status"] is None and e["response_bytes"] is None and e["response_digest"] is None
    assert e["response_length"] is None and e["request_length"] == len(REQ)


def test_http_error_is_failed_with_the_body():
    e = build(exchange(status=429, content_type="application/json", chunks=[b'{"error":1}'], eof=True))
    assert e["outcome"] == "FAILED" and e["error_bytes"] == b'{"error":1}'
    assert e["response_bytes"] is None and e["output_digest"] is None


def test_body_cut_by_a_transport_error_is_unknown_and_keeps_the_bytes():
    e = build(exchange(status=200, chunks=[b"partial"], error="RemoteProtocolError: peer closed"))
    assert e["outcome"] == "UNKNOWN" and e["response_bytes"] == b"partial"
    assert e["output_digest"] is None and b"RemoteProtocolError" in e["error_bytes"]


def test_closed_early_unless_the_stream_was_already_complete():
    body = b"".join(chat_events("m", "hello world"))
    sse = "text/event-stream"
    early = build(exchange(status=200, content_type=sse, chunks=[body[:60]], closed_by_app=True))
    assert early["capture"]["closed_early"] is True and early["outcome"] == "UNKNOWN"
    assert early["capture"]["streamed"] is True and early["output_digest"] is None
    # openai's sync client closes right after [DONE]: that is a complete stream.
    done = build(exchange(status=200, content_type=sse, chunks=[body], closed_by_app=True))
    assert done["capture"]["closed_early"] is False and done["outcome"] == "COMMITTED"
    assert done["output_digest"] == sha(4, b"hello world")
    # A whole body known by Content-Length, closed before EOF was seen: complete too.
    whole = build(exchange(status=200, chunks=[b"{}"], content_length=2, closed_by_app=True))
    assert whole["outcome"] == "COMMITTED"


def test_hash_only_keeps_the_key_but_not_the_bytes():
    e = build(exchange(request_policy=HASH_ONLY, status=200, chunks=[b"{}"], eof=True))
    assert e["request_bytes"] is None and e["content_key"] == sha(0, REQ)
    assert e["request_length"] == len(REQ) and e["response_length"] == 2
    assert e["capture"]["request_policy"] == HASH_ONLY
    assert e["model_id"] == "gpt-4o"


def test_a_seed_beyond_64_bits_is_kept_as_decimal_text():
    req = b'{"model":"gpt-4o","messages":[],"seed":18446744073709551616}'
    e = build(exchange(request_bytes=req, content_key=sha(0, req), status=200, chunks=[b"{}"],
                       eof=True))
    assert e["replay"]["seed"] == "18446744073709551616" and e["replay"]["deterministic"] is True
    no_seed = b'{"model":"gpt-4o","messages":[],"seed":true}'
    e = build(exchange(request_bytes=no_seed, content_key=sha(0, no_seed), status=200,
                       chunks=[b"{}"], eof=True))
    assert e["replay"]["seed"] is None and e["replay"]["deterministic"] is False


def test_gzip_bodies_are_recorded_as_the_application_reads_them():
    body = b'{"choices":[]}'
    e = build(exchange(status=200, chunks=[gzip.compress(body)], content_encoding="gzip", eof=True))
    assert e["response_bytes"] == body and e["response_length"] == len(body)
    assert decode_body(b"x", None) == b"x"
    with pytest.raises(ValueError):
        decode_body(b"x", "br-unknown")
