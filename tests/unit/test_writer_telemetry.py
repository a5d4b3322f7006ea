"""Record contract 2.2 in the writer: a trace context sealed with a capture (BAD_TRACE), a
capture mapped from telemetry (BAD_TELEMETRY), and a 2.1 producer's capture still sealed as a
2.1 record, byte for byte."""

from __future__ import annotations

import io

import fastavro
import pytest

from evidence_contract import (
    GENESIS,
    content_key,
    decode,
    encode,
    input_digest,
    record_digest,
    response_digest,
    span_digest,
    split_record,
)
from evidence_contract._avro import HISTORY
from evidence_contract.vectors import committed_event, encrypted_event, mapped_event, traced_event
from tests.fixtures.writer import encode_raw_capture
from writer.capture import Capture, Rejection, seal_capture, validate
from writer.core import Head
from writer.reasons import Reason

MAX = 1 << 24
W = {"writer_id": "w-1", "transactional_id": "tx", "version": "0.1.0"}
RECORD_2_1 = bytes.fromhex("598d7a24f41b9228")
CAPTURE_2_1 = bytes.fromhex("dcad4f6e8bfbc7de")


def _validate(event):
    return validate(encode_raw_capture(event), event["stream"].encode(), MAX)


def _rejected(event, reason, *words):
    r = _validate(event)
    assert isinstance(r, Rejection) and r.reason is reason, r
    for w in words:
        assert w in r.text, (w, r.text)


def _mapped(**telemetry):
    e = mapped_event()
    e["telemetry"] = {**e["telemetry"], **telemetry}
    return e


# --- trace ------------------------------------------------------------------------------


def test_a_capture_with_a_trace_is_sealed_with_it():
    e = traced_event()
    c = _validate(e)
    assert isinstance(c, Capture) and c.record_fp is None
    record, _ = seal_capture(c, Head.genesis(e["stream"]), 5, W, 0, 1)
    assert decode(record)[1]["body"]["trace"] == e["trace"]


@pytest.mark.parametrize("trace,words", [
    ({"trace_id": bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e47"), "span_id": b"\x01" * 8},
     ("trace.trace_id is 15 bytes, not 16",)),
    ({"trace_id": b"\x01" * 17, "span_id": b"\x01" * 8}, ("trace.trace_id is 17 bytes",)),
    ({"trace_id": b"", "span_id": b"\x01" * 8}, ("trace.trace_id is 0 bytes",)),
    ({"trace_id": b"\x01" * 16, "span_id": b"\x01" * 7}, ("trace.span_id is 7 bytes, not 8",)),
    ({"trace_id": b"\x01" * 16, "span_id": b"\x01" * 16}, ("trace.span_id is 16 bytes",)),
    ({"trace_id": bytes(16), "span_id": b"\x01" * 8}, ("trace.trace_id is all zero",)),
    ({"trace_id": b"\x01" * 16, "span_id": bytes(8)}, ("trace.span_id is all zero",)),
])
def test_a_trace_that_no_span_can_have_is_bad_trace(trace, words):
    _rejected({**traced_event(), "trace": trace}, Reason.BAD_TRACE, *words)


@pytest.mark.parametrize("version", ["2.1", "2.0"])
def test_a_trace_belongs_to_a_2_2_capture(version):
    _rejected({**traced_event(), "schema_version": version}, Reason.BAD_TRACE,
              f"schema_version '{version}' has no trace")


def test_an_encrypted_2_2_capture_with_a_trace_is_sealed():
    e = {**encrypted_event(), "schema_version": "2.2", "trace": traced_event()["trace"]}
    assert isinstance(_validate(e), Capture)


# --- telemetry --------------------------------------------------------------------------


def test_a_capture_mapped_from_telemetry_is_sealed_committed_without_a_response_body():
    e = mapped_event()
    assert e["outcome"] == "COMMITTED" and e["response_bytes"] is None
    c = _validate(e)
    assert isinstance(c, Capture) and not c.reencoded and c.record_fp is None
    record, head = seal_capture(c, Head.genesis(e["stream"]), 5, W, 0, 1)
    stored, rec = split_record(record)
    assert rec["body"]["telemetry"] == e["telemetry"] and rec["body"]["trace"] == e["trace"]
    assert rec["body"]["content_key"] == rec["body"]["telemetry"]["span_digest"]
    assert record_digest(GENESIS, 1, 5, stored) == head.digest


@pytest.mark.parametrize("change", [
    {"outcome": "FAILED", "error_bytes": b"span status ERROR"},
    {"outcome": "UNKNOWN"},
    {"input_bytes": None, "input_digest": None},
    {"output_digest": None},
])
def test_other_mapped_captures_are_sealed(change):
    e = {**mapped_event(), **change}
    assert isinstance(_validate(e), Capture), change


@pytest.mark.parametrize("telemetry", [
    {"dialect": d} for d in ("gen_ai", "gen_ai_1_36", "openllmetry", "openinference", "logfire",
                             "bijotel")
] + [{"source": "LOG_EVENT"}, {"scope_version": None}, {"corroborates": None},
     {"claims": []}, {"content_from": []}, {"rebuilt": True}])
def test_every_dialect_and_shape_of_mapping_is_sealed(telemetry):
    assert isinstance(_validate(_mapped(**telemetry)), Capture), telemetry


def _with_response(e):
    body = b'{"choices":[]}'
    return {**e, "response_bytes": body, "response_digest": response_digest(body),
            "response_length": len(body)}


def _value_policy(e):
    return {**e, "capture": {**e["capture"], "request_policy": "VALUE"}}


def _with_request(e):
    body = b'{"model":"gpt-4o-mini"}'
    return {**e, "request_bytes": body, "request_length": len(body),
            "content_key": content_key(body)}


@pytest.mark.parametrize("event,words", [
    (_mapped(dialect="otel"), ("telemetry.dialect 'otel' is none of",)),
    (_mapped(dialect=""), ("telemetry.dialect",)),
    (_mapped(scope_name=""), ("telemetry.scope_name is empty",)),
    (_mapped(corroborates="not-an-event-id"), ("telemetry.corroborates", "UUIDv7")),
    (_mapped(corroborates="017F22E2-79B0-7CC3-98C4-DC0C0C07398F"), ("telemetry.corroborates",)),
    (_mapped(claims=[{"name": "", "value": "x", "verdict": "UNVERIFIABLE"}]),
     ("telemetry.claims[0].name is empty",)),
    ({**mapped_event(), "trace": None}, ("needs the trace",)),
    (_value_policy(mapped_event()), ("request_policy is HASH_ONLY",)),
    (_value_policy(_with_request(mapped_event())), ("request_policy is HASH_ONLY",)),
    (_with_request(mapped_event()), ("request_bytes null",)),
    ({**mapped_event(), "content_key": content_key(b"rebuilt json")},
     ("content_key", "telemetry.span_digest")),
    (_mapped(span_digest=span_digest(b"another span")), ("content_key", "span_digest")),
    (_with_response(mapped_event()), ("response_bytes is set",)),
    ({**mapped_event(), "response_digest": response_digest(b"x"), "response_length": 1},
     ("response_digest is set",)),
    ({**mapped_event(), "schema_version": "2.1", "trace": None}, ("schema_version '2.1'",)),
    ({**mapped_event(), "encryption": {"scheme": "aes256gcm-hmacsha256/v1",
                                        "key_id": "00112233445566778899aabbccddeeff"}},
     ("cannot be encrypted",)),
])
def test_a_mapped_capture_that_breaks_a_rule_is_bad_telemetry(event, words):
    _rejected(event, Reason.BAD_TELEMETRY, *words)


def test_a_mapped_capture_with_a_bad_trace_is_bad_trace_first():
    e = {**mapped_event(), "trace": {"trace_id": bytes(16), "span_id": b"\x01" * 8}}
    _rejected(e, Reason.BAD_TRACE, "all zero")


@pytest.mark.parametrize("field", ["otlp_digest", "span_digest"])
def test_a_telemetry_digest_of_the_wrong_length_is_bad_digest(field):
    _rejected(_mapped(**{field: b"\x01" * 31}), Reason.BAD_DIGEST, f"telemetry.{field}",
              "got 31 bytes")


def test_the_input_messages_a_mapped_capture_keeps_must_match_their_digest():
    _rejected({**mapped_event(), "input_digest": input_digest(b"other")}, Reason.DIGEST_MISMATCH,
              "input_digest")


def test_a_capture_made_at_the_wire_still_needs_its_response_when_committed():
    e = {**committed_event(), "response_bytes": None, "response_digest": None,
         "response_length": None}
    _rejected(e, Reason.MISSING_FIELD, "outcome COMMITTED")


# --- a 2.1 producer ---------------------------------------------------------------------


def _schema_2_1():
    return next(s for s in HISTORY if s.fingerprint == CAPTURE_2_1)


def encode_2_1(event) -> bytes:
    """A capture as a 2.1 producer encodes it: the 2.1 CaptureEvent, no trace or telemetry."""
    old = _schema_2_1()
    body = {k: v for k, v in event.items() if k not in ("trace", "telemetry")}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, old.parsed, {**body, "schema_version": "2.1"})
    return b"\xc3\x01" + old.fingerprint + out.getvalue()


@pytest.mark.parametrize("make", [committed_event, encrypted_event])
def test_a_2_1_capture_is_sealed_as_a_2_1_record_byte_for_byte(make):
    value = encode_2_1(make())
    c = validate(value, make()["stream"].encode(), MAX)
    assert isinstance(c, Capture) and not c.reencoded, c
    assert c.record_fp == RECORD_2_1 and c.body == value[10:]
    record, head = seal_capture(c, Head.genesis(c.stream), 5, W, 3, 4)
    assert record[2:10] == RECORD_2_1
    stored, rec = split_record(record)
    assert stored == value[10:] and rec["body"]["schema_version"] == "2.1"
    assert "trace" not in rec["body"] and "telemetry" not in rec["body"]
    assert record_digest(GENESIS, 1, 5, stored) == head.digest


def test_the_current_capture_is_2_2_and_sealed_as_a_2_2_record():
    from evidence_contract import fingerprint

    value = encode("CaptureEvent", committed_event())
    c = validate(value, committed_event()["stream"].encode(), MAX)
    assert isinstance(c, Capture) and c.record_fp is None
    record, _ = seal_capture(c, Head.genesis(c.stream), 5, W, 3, 4)
    assert record[2:10] == fingerprint("EvidenceRecord")
    assert decode(record)[1]["body"]["schema_version"] == "2.2"
