import hashlib
import json
import struct

import pytest

from evidence_contract import decode, fingerprint, parsing_canonical_form, split_record
from evidence_contract.vectors import PATH, build, main, render, to_jsonable

VECTORS = json.loads(PATH.read_text("utf-8"))
PREFIXES = {"content_key": 0, "response_digest": 1, "input_digest": 2, "prompt_digest": 3,
            "chunk_digest": 6, "otlp_digest": 7, "span_digest": 8}


def test_file_is_what_the_code_computes_now():
    assert VECTORS == build()
    assert PATH.read_text("utf-8") == render()
    assert main(["--check"]) == 0


def test_generation_is_deterministic():
    assert render() == render()


@pytest.mark.parametrize("name", sorted(PREFIXES))
def test_byte_digest_vectors_match_hashlib(name):
    cases = VECTORS["digests"][name]
    assert any(c["input_hex"] == "" for c in cases)
    for case in cases:
        want = hashlib.sha256(bytes([PREFIXES[name]]) + bytes.fromhex(case["input_hex"])).hexdigest()
        assert case["digest_hex"] == want


def test_output_digest_vectors_match_hashlib():
    cases = VECTORS["digests"]["output_digest"]
    assert any(c["input_text"] == "" for c in cases)
    assert any(not c["input_text"].isascii() for c in cases)
    for case in cases:
        assert case["input_hex"] == case["input_text"].encode("utf-8").hex()
        want = hashlib.sha256(b"\x04" + case["input_text"].encode("utf-8")).hexdigest()
        assert case["digest_hex"] == want


def test_record_digest_vectors_match_hashlib():
    for case in VECTORS["digests"]["record_digest"]:
        data = (
            b"\x05"
            + bytes.fromhex(case["prev_hex"])
            + struct.pack(">QQ", case["seq"], case["occurred_at_micros"])
            + bytes.fromhex(case["body_hex"])
        )
        assert case["digest_hex"] == hashlib.sha256(data).hexdigest()


def test_schema_vectors():
    for name, entry in VECTORS["schemas"].items():
        assert entry["parsing_canonical_form"] == parsing_canonical_form(name)
        assert entry["fingerprint_hex"] == fingerprint(name).hex()


def test_record_vectors_decode_to_their_json():
    names = [r["name"] for r in VECTORS["records"]]
    assert names == [
        "capture_committed_value",
        "capture_failed_hash_only",
        "capture_truncated_big_seed",
        "capture_committed_traced",
        "capture_mapped_from_telemetry",
        "evidence_seq1_from_genesis",
        "evidence_seq2_chained",
    ]
    for vector in VECTORS["records"]:
        encoded = bytes.fromhex(vector["encoded_hex"])
        schema_name, record = decode(encoded)
        assert schema_name == vector["schema"]
        assert to_jsonable(record) == vector["record"]
        assert encoded[10:].startswith(bytes.fromhex(vector["body_hex"]))


def test_capture_vectors_keep_the_writer_rules():
    from writer.core import Capture, validate

    for vector in VECTORS["records"]:
        if vector["schema"] == "CaptureEvent":
            stream = vector["record"]["stream"].encode()
            got = validate(bytes.fromhex(vector["encoded_hex"]), stream, 64 * 1024 * 1024)
            assert isinstance(got, Capture) and not got.reencoded, (vector["name"], got)


def test_vectors_show_the_new_fields():
    by_name = {v["name"]: v["record"] for v in VECTORS["records"]}
    committed, cut = by_name["capture_committed_value"], by_name["capture_truncated_big_seed"]
    assert committed["replay"]["seed"] == "42" and committed["input_bytes"] == b"Say hi".hex()
    assert committed["retrieval"][0]["chunk_bytes"] is not None
    assert cut["capture"]["truncated"] is True and cut["request_bytes"] is None
    assert cut["replay"]["seed"] == str(2**64 - 1)
    assert cut["request_length"] > 0 and cut["response_length"] > 0


def test_evidence_vectors_chain():
    first, second = (v for v in VECTORS["records"] if v["schema"] == "EvidenceRecord")
    assert first["record"]["seal"]["prev_digest"] == "00" * 32
    assert second["record"]["seal"]["prev_digest"] == first["record_digest_hex"]
    for vector in (first, second):
        stored, record = split_record(bytes.fromhex(vector["encoded_hex"]))
        s = record["seal"]
        data = b"\x05" + s["prev_digest"] + struct.pack(">QQ", s["seq"], s["occurred_at"]) + stored
        assert hashlib.sha256(data).hexdigest() == vector["record_digest_hex"] == s["record_digest"].hex()


def test_the_mapped_vector_covers_the_span_and_the_request_it_names():
    """capture_mapped_from_telemetry: content_key is span_digest over mapped_span_hex, which is
    a Span message's deterministic serialization (protobuf's own, from opentelemetry-proto),
    inside the ExportTraceServiceRequest that otlp_digest covers."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    mapped = next(v for v in VECTORS["records"] if v["name"] == "capture_mapped_from_telemetry")
    body, telemetry = mapped["record"], mapped["record"]["telemetry"]
    span_bytes = bytes.fromhex(VECTORS["mapped_span_hex"])
    request_bytes = bytes.fromhex(VECTORS["mapped_otlp_request_hex"])
    span = Span.FromString(span_bytes)
    assert span.SerializeToString(deterministic=True) == span_bytes
    request = ExportTraceServiceRequest.FromString(request_bytes)
    assert request.SerializeToString(deterministic=True) == request_bytes
    assert request.resource_spans[0].scope_spans[0].spans[0] == span
    assert request.resource_spans[0].scope_spans[0].scope.name == telemetry["scope_name"]
    assert telemetry["span_digest"] == hashlib.sha256(b"\x08" + span_bytes).hexdigest()
    assert telemetry["otlp_digest"] == hashlib.sha256(b"\x07" + request_bytes).hexdigest()
    assert body["content_key"] == telemetry["span_digest"] and body["request_length"] == len(span_bytes)
    assert body["trace"] == {"trace_id": span.trace_id.hex(), "span_id": span.span_id.hex()}
    attributes = {kv.key: kv.value.string_value for kv in span.attributes}
    assert telemetry["corroborates"] == attributes["evidence.event_id"]
    assert telemetry["claims"][0]["value"] == attributes["bijotel.replay.output_hash"]
    assert attributes["bijotel.replay.output_hash"] == hashlib.sha256(b"Hi!").hexdigest()
