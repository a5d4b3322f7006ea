"""OTLP/HTTP bodies: media types, hex ids in JSON, gzip, the size cap, bad bodies, responses."""

from __future__ import annotations

import gzip
import json

import pytest
from google.protobuf.json_format import MessageToDict
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from otlp import (
    JSON,
    PROTOBUF,
    BadRequestError,
    TooLargeError,
    UnsupportedMediaError,
    decode_logs,
    decode_traces,
    media_type,
    status_body,
    trace_response,
)

TRACE_ID = "5b8efff798038103d269b633813fc60c"
SPAN_ID = "eee19b7ec3c1b174"
PARENT_ID = "eee19b7ec3c1b173"
# The OTLP specification's own JSON example shape: hex ids, enums as integers, int64 as text
OTLP_JSON = {"resourceSpans": [{"resource": {"attributes": [
    {"key": "service.name", "value": {"stringValue": "svc"}}]},
    "scopeSpans": [{"scope": {"name": "lib", "version": "1"}, "spans": [{
        "traceId": TRACE_ID, "spanId": SPAN_ID, "parentSpanId": PARENT_ID,
        "name": "chat m", "kind": 3, "startTimeUnixNano": "1544712660000000000",
        "endTimeUnixNano": "1544712661000000000", "unknownField": 1,
        "attributes": [{"key": "blob", "value": {"bytesValue": "AAE="}}],
        "links": [{"traceId": TRACE_ID, "spanId": PARENT_ID}],
        "status": {"code": 2}}]}]}]}


def test_json_ids_are_hex_and_enums_integers():
    request = decode_traces(json.dumps(OTLP_JSON).encode(), "application/json; charset=utf-8")
    span = request.resource_spans[0].scope_spans[0].spans[0]
    assert span.trace_id.hex() == TRACE_ID and span.span_id.hex() == SPAN_ID
    assert span.parent_span_id.hex() == PARENT_ID
    assert span.links[0].trace_id.hex() == TRACE_ID
    assert span.kind == 3 and span.status.code == 2
    assert span.start_time_unix_nano == 1544712660000000000
    assert span.attributes[0].value.bytes_value == b"\0\1"  # bytes values stay base64


def test_json_and_protobuf_decode_to_the_same_request():
    from_json = decode_traces(json.dumps(OTLP_JSON).encode(), JSON)
    assert decode_traces(from_json.SerializeToString(), PROTOBUF) == from_json


def test_uppercase_hex_ids_are_read():
    doc = json.loads(json.dumps(OTLP_JSON))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = TRACE_ID.upper()
    span = decode_traces(json.dumps(doc).encode(), JSON).resource_spans[0].scope_spans[0].spans[0]
    assert span.trace_id.hex() == TRACE_ID


@pytest.mark.parametrize("body,kind", [
    (b"\xff\xff\xff", PROTOBUF), (b"{not json", JSON), (b"[]", JSON),
    (json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}).encode(),
     JSON),
    (json.dumps({"resourceSpans": "nope"}).encode(), JSON)])
def test_bad_bodies_are_400(body, kind):
    with pytest.raises(BadRequestError) as caught:
        decode_traces(body, kind)
    assert caught.value.status == 400 and str(caught.value)


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/grpc"])
def test_other_content_types_are_415(content_type):
    with pytest.raises(UnsupportedMediaError) as caught:
        decode_traces(b"", content_type)
    assert caught.value.status == 415


def test_other_encodings_are_415():
    with pytest.raises(UnsupportedMediaError):
        decode_traces(b"", PROTOBUF, "br")


def test_gzip_body():
    raw = decode_traces(json.dumps(OTLP_JSON).encode(), JSON).SerializeToString()
    assert decode_traces(gzip.compress(raw), PROTOBUF, "gzip").SerializeToString() == raw
    two_members = gzip.compress(raw[:10]) + gzip.compress(raw[10:])
    assert decode_traces(two_members, PROTOBUF, "GZIP").SerializeToString() == raw


def test_corrupt_or_truncated_gzip_is_400():
    with pytest.raises(BadRequestError):
        decode_traces(b"\x1f\x8b not gzip", PROTOBUF, "gzip")
    with pytest.raises(BadRequestError):
        decode_traces(gzip.compress(b"x" * 1000)[:20], PROTOBUF, "gzip")


def test_the_cap_applies_after_decompression():
    bomb = gzip.compress(b"\0" * (50 * 1024 * 1024))  # 50 MiB of zeros, ~50 KiB sent
    assert len(bomb) < 100_000
    with pytest.raises(TooLargeError) as caught:
        decode_traces(bomb, PROTOBUF, "gzip", max_body=1024 * 1024)
    assert caught.value.status == 413 and caught.value.cap == 1024 * 1024
    exact = ExportTraceServiceRequest().SerializeToString() + b""
    assert decode_traces(gzip.compress(exact), PROTOBUF, "gzip", max_body=0) == \
        ExportTraceServiceRequest()


def test_the_cap_applies_to_an_uncompressed_body():
    with pytest.raises(TooLargeError):
        decode_traces(b"\n\0" * 600, PROTOBUF, max_body=1000)


def test_logs_decode():
    body = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{
        "traceId": TRACE_ID, "spanId": SPAN_ID, "eventName": "e", "severityNumber": 9,
        "body": {"stringValue": "b"}}]}]}]}
    record = decode_logs(json.dumps(body).encode(), JSON).resource_logs[0].scope_logs[0] \
        .log_records[0]
    assert record.trace_id.hex() == TRACE_ID and record.event_name == "e"
    assert record.severity_number == 9


def test_media_type_essence():
    assert media_type(" Application/X-Protobuf ; q=1") == PROTOBUF


def test_responses_in_the_request_media_type():
    assert ExportTraceServiceResponse.FromString(trace_response(PROTOBUF)) == \
        ExportTraceServiceResponse()
    partial = ExportTraceServiceResponse.FromString(trace_response(PROTOBUF, 2, "dropped 2"))
    assert partial.partial_success.rejected_spans == 2
    assert json.loads(trace_response(JSON, 3, "not GenAI")) == {
        "partialSuccess": {"rejectedSpans": "3", "errorMessage": "not GenAI"}}
    assert json.loads(trace_response(JSON)) == {}
    status = status_pb2.Status.FromString(status_body(PROTOBUF, "bad traceId"))
    assert (status.code, status.message) == (3, "bad traceId")
    assert json.loads(status_body(JSON, "bad")) == {"code": 3, "message": "bad"}
    assert MessageToDict(status)["message"] == "bad traceId"
