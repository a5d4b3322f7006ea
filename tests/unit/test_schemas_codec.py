import io
import random
import re

import fastavro
import pytest

from evidence_contract import (
    DIGEST_FIELDS,
    GENESIS,
    DecodeError,
    EncodeError,
    EvidenceError,
    body_bytes,
    canonical_body_bytes,
    decode,
    encode,
    encode_sealed,
    fingerprint,
    record_digest,
    seal,
    split_record,
    wrong_size_digest,
)
from evidence_contract._avro import SCHEMAS
from evidence_contract.vectors import committed_event, failed_event, mapped_event, sealed_records

WRITER = {"writer_id": "w", "transactional_id": "t", "version": "0.1.0"}

HEAD = {
    "stream": "s",
    "seq": 7,
    "record_digest": bytes(range(32)),
    "occurred_at": 1_645_557_742_000_000,
    "event_id": "017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
    "log_partition": 3,
    "log_offset": None,
    "tree_size": 4,
    "tree_nodes": [bytes(range(32, 64))],
    "checkpoint_size": 4,
}

# Exact bytes, pinned: any change to the schemas or the codec shows up here. Record contract
# 2.1: digests are Avro bytes (a 0x40 length, then 32 bytes); ``encryption`` (null: 0x00) is
# the body's last field. The 2.0 bytes (GOLDEN_2_0_*) stay readable, with their own schemas.
GOLDEN_WRITER_HEAD = (
    "c3010abef15a90d74c6b02730e40000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e"
    "1f80dedaca88a8ec054830313766323265322d373962302d376363332d393863342d6463306330633037333938"
    "660600"
    "080240202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f0008"  # the tree
)
GOLDEN_2_0_FAILED_BODY = (
    "06322e304830313766323265322d373962312d373030302d383030302d3030303030303030303030322a74656e"
    "616e742d613a737570706f72742e63686174a0a9f3cb88a8ec0540d5c31a4eeeb5dad4295b95021f441fb23dde"
    "46158e14c7918e08541a38fa964900c601000000000012616e7468726f7069634a68747470733a2f2f6170692e"
    "616e7468726f7069632e636f6d2f76312f6d657373616765730214323032332d30362d3031022e636c61756465"
    "2d332d352d6861696b752d6c617465737402227b226d61785f746f6b656e73223a36347d000002da0602206170"
    "706c69636174696f6e2f6a736f6e00000000029a017b2274797065223a226572726f72222c226572726f72223a"
    "7b2274797065223a22726174655f6c696d69745f6572726f72222c226d657373616765223a2252617465206c69"
    "6d69746564227d7d020002666666666666e63f02cdccccccccccec3f003865766964656e63652d73746f72652d"
    "676174657761792f302e312e30000201000080e7d4cb88a8ec0502a0c21e"
)
GOLDEN_2_0_FAILED_CAPTURE = "c30197daea93ce13a290" + GOLDEN_2_0_FAILED_BODY
GOLDEN_2_0_SEQ2_RECORD = (
    "c301854b3d02a904fe84"
    + GOLDEN_2_0_FAILED_BODY
    + "04c0b6f9cb88a8ec05408b15a920c95001e51ec21fe77726d5e8a16fbbf5ec35d01bd4fbe06b247e38af402515"
    "6e2bfb337b9675fc636ffcb5b9f029818898e587439daebff43492293339107772697465722d30226576696465"
    "6e63652d7772697465722d300a302e312e300002"
)
GOLDEN_2_1_FAILED_BODY = (
    "06322e314830313766323265322d373962312d373030302d383030302d3030303030303030303030322a74656e"
    "616e742d613a737570706f72742e63686174a0a9f3cb88a8ec0540d5c31a4eeeb5dad4295b95021f441fb23dde"
    "46158e14c7918e08541a38fa964900c601000000000012616e7468726f7069634a68747470733a2f2f6170692e"
    "616e7468726f7069632e636f6d2f76312f6d657373616765730214323032332d30362d3031022e636c61756465"
    "2d332d352d6861696b752d6c617465737402227b226d61785f746f6b656e73223a36347d000002da0602206170"
    "706c69636174696f6e2f6a736f6e00000000029a017b2274797065223a226572726f72222c226572726f72223a"
    "7b2274797065223a22726174655f6c696d69745f6572726f72222c226d657373616765223a2252617465206c69"
    "6d69746564227d7d020002666666666666e63f02cdccccccccccec3f003865766964656e63652d73746f72652d"
    "676174657761792f302e312e30000201000080e7d4cb88a8ec0502a0c21e00"
)
GOLDEN_2_1_FAILED_CAPTURE = "c301dcad4f6e8bfbc7de" + GOLDEN_2_1_FAILED_BODY
GOLDEN_2_1_SEQ2_RECORD = (
    "c301598d7a24f41b9228"
    + GOLDEN_2_1_FAILED_BODY
    + "04c0b6f9cb88a8ec054033b619543bc5b8be5ce44512308d5ce9db9d8e8efb9a87b7c3efde73b4ba6c02407b2e"
    "24b714b4992a762194f28dd20eac748b66b08b066dff174c88ab345846ea107772697465722d30226576696465"
    "6e63652d7772697465722d300a302e312e300002"
)
# Record contract 2.2: the 2.1 body, version text aside, and two nulls (trace, telemetry).
GOLDEN_FAILED_BODY = GOLDEN_2_1_FAILED_BODY.replace("06322e31", "06322e32", 1) + "0000"
GOLDEN_FAILED_CAPTURE = "c3018361f22a8a039336" + GOLDEN_FAILED_BODY
GOLDEN_SEQ2_RECORD = (
    "c301d321f2ab8d47b5d4"
    + GOLDEN_FAILED_BODY
    + "04c0b6f9cb88a8ec0540482785a3e9a6a49884225cc4d5f832ee9b3b23e4213358f2f049fc662bef85b840ee84"
    "efbe2351347a3a0496197ebb0129632b1f73736c092bfc5359d4f1f8eafe107772697465722d30226576696465"
    "6e63652d7772697465722d300a302e312e300002"
)


def test_golden_writer_head():
    assert encode("WriterHead", HEAD).hex() == GOLDEN_WRITER_HEAD
    assert decode(bytes.fromhex(GOLDEN_WRITER_HEAD)) == ("WriterHead", HEAD)


def test_golden_failed_capture():
    assert encode("CaptureEvent", failed_event()).hex() == GOLDEN_FAILED_CAPTURE
    assert body_bytes(failed_event()).hex() == GOLDEN_FAILED_BODY


def test_golden_sealed_record():
    _, second = sealed_records()
    assert encode("EvidenceRecord", second).hex() == GOLDEN_SEQ2_RECORD


def test_the_2_1_body_is_the_2_0_body_and_a_null_encryption():
    # Avro appends the added field: a 2.0 body plus 0x00 (null branch), version text aside.
    assert GOLDEN_2_1_FAILED_BODY == GOLDEN_2_0_FAILED_BODY.replace("06322e30", "06322e31", 1) + "00"


def test_a_2_1_capture_and_record_decode_with_their_own_schema():
    # 2.1 producers and the log's 2.1 records: read with their own schema (no ``trace`` or
    # ``telemetry`` key), a 2.1 capture sealed as a 2.1 record, byte for byte.
    from evidence_contract import read_body, read_canonical_body, record_fingerprint_for

    raw = bytes.fromhex(GOLDEN_2_1_FAILED_CAPTURE)
    name, capture = decode(raw)
    assert name == "CaptureEvent" and capture["encryption"] is None
    assert "trace" not in capture and "telemetry" not in capture
    assert read_body(raw) == (capture, len(raw)) and read_canonical_body(raw) == (capture, len(raw))
    assert record_fingerprint_for(raw[2:10]).hex() == "598d7a24f41b9228"
    stored, record = split_record(bytes.fromhex(GOLDEN_2_1_SEQ2_RECORD))
    assert stored.hex() == GOLDEN_2_1_FAILED_BODY and record["body"] == capture
    s = record["seal"]
    assert record_digest(s["prev_digest"], s["seq"], s["occurred_at"], stored) == s["record_digest"]
    assert canonical_body_bytes(capture, raw[2:10]).hex() == GOLDEN_2_1_FAILED_BODY
    assert encode_sealed(stored, s, bytes.fromhex("598d7a24f41b9228")).hex() == GOLDEN_2_1_SEQ2_RECORD


def test_a_body_without_trace_or_telemetry_encodes_them_as_null_but_wrong_ones_do_not():
    event = failed_event()
    del event["trace"], event["telemetry"]
    assert body_bytes(event).hex() == GOLDEN_FAILED_BODY
    for field, wrong in (("trace", {"trace_id": bytes(16)}), ("telemetry", {"dialect": "gen_ai"}),
                         ("trace", {"trace_id": "ab" * 16, "span_id": b"x" * 8})):
        with pytest.raises(EncodeError):
            body_bytes({**failed_event(), field: wrong})


def test_a_2_0_capture_and_record_decode_with_their_own_schema():
    # Existing producers and the log's 2.0 records: read with the schema they were written
    # with, never resolved (no ``encryption`` key), stored body bytes exactly as sealed.
    from evidence_contract import read_body, read_canonical_body, record_fingerprint_for

    name, capture = decode(bytes.fromhex(GOLDEN_2_0_FAILED_CAPTURE))
    assert name == "CaptureEvent" and "encryption" not in capture
    assert capture["schema_version"] == "2.0" and capture["outcome"] == "FAILED"
    raw = bytes.fromhex(GOLDEN_2_0_FAILED_CAPTURE)
    assert read_body(raw) == (capture, len(raw))
    assert read_canonical_body(raw) == (capture, len(raw))
    assert record_fingerprint_for(raw[2:10]).hex() == "854b3d02a904fe84"
    assert record_fingerprint_for(fingerprint("CaptureEvent")) == fingerprint("EvidenceRecord")
    stored, record = split_record(bytes.fromhex(GOLDEN_2_0_SEQ2_RECORD))
    assert stored.hex() == GOLDEN_2_0_FAILED_BODY and record["body"] == capture
    s = record["seal"]
    assert record_digest(s["prev_digest"], s["seq"], s["occurred_at"], stored) == s["record_digest"]
    assert canonical_body_bytes(capture, raw[2:10]).hex() == GOLDEN_2_0_FAILED_BODY
    assert encode_sealed(stored, s, bytes.fromhex("854b3d02a904fe84")).hex() == GOLDEN_2_0_SEQ2_RECORD


def test_a_body_without_encryption_encodes_as_null_but_a_wrong_one_does_not():
    event = failed_event()
    del event["encryption"]
    assert body_bytes(event).hex() == GOLDEN_FAILED_BODY
    with pytest.raises(EncodeError):
        body_bytes({**failed_event(), "encryption": {"scheme": "x"}})


def test_header_is_marker_and_fingerprint():
    data = encode("CaptureEvent", committed_event())
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == fingerprint("CaptureEvent")
    assert data[10:] == body_bytes(committed_event())


@pytest.mark.parametrize(
    "name,record",
    [
        ("CaptureEvent", committed_event()),
        ("CaptureEvent", failed_event()),
        ("EvidenceRecord", sealed_records()[0]),
        ("EvidenceRecord", sealed_records()[1]),
        ("WriterHead", HEAD),
        ("WriterHead", {**HEAD, "log_offset": 2**63 - 1}),
    ],
)
def test_round_trip_is_exact(name, record):
    data = encode(name, record)
    assert decode(data) == (name, record)
    assert decode(bytearray(data)) == decode(memoryview(data)) == (name, record)


def test_round_trip_keeps_extreme_values():
    event = committed_event()
    event["captured_at"] = -(2**63)
    event["capture"]["started_at"] = 2**63 - 1
    event["replay"]["temperature"] = 1e-310  # subnormal double survives unchanged
    event["response_bytes"] = bytes(range(256)) * 64
    event["response_length"] = 2**63 - 1
    event["request_length"] = 0
    event["retrieval"] = [{"doc_id": "\u00e9", "doc_version": None, "chunk_digest": bytes(32),
                           "chunk_bytes": None}] * 3 + [
        {"doc_id": "", "doc_version": "", "chunk_digest": b"\xff" * 32, "chunk_bytes": b""}]
    event["replay"]["seed"] = "-" + "9" * 4300  # far beyond 64 bits: text, kept exactly
    assert decode(encode("CaptureEvent", event)) == ("CaptureEvent", event)


def _framed(name, body):
    return b"\xc3\x01" + fingerprint(name) + body


GOOD = encode("CaptureEvent", committed_event())


@pytest.mark.parametrize(
    "data,reason",
    [
        (b"", "too short"),
        (b"\xc3\x01", "too short"),
        (b"\xc3\x02" + GOOD[2:], "marker"),
        (b"\x00\x01" + GOOD[2:], "marker"),
        (b"\xc3\x01" + b"\x00" * 8 + GOOD[10:], "unknown schema fingerprint"),
        (GOOD[:10], "malformed"),
        (GOOD[:-1], "malformed"),
        (GOOD[: len(GOOD) // 2], "malformed"),
        (GOOD + b"\x00", "trailing"),
        (GOOD + b"garbage", "trailing"),
        (_framed("WriterHead", b"\x02s\x0e\x40" + b"\x00" * 31), "malformed"),
        (_framed("CaptureEvent", b"\xff" * 40), "malformed"),
    ],
)
def test_decode_rejects(data, reason):
    with pytest.raises(DecodeError, match=reason):
        decode(data)


def test_decode_rejects_random_bytes():
    rng = random.Random(1234)
    for n in range(500):
        data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 200)))
        if n % 2:  # half with a valid header, so the body parser sees the garbage
            data = _framed(rng.choice(["CaptureEvent", "EvidenceRecord"]), data)
        try:
            decode(data)
        except DecodeError:
            continue
        raise AssertionError(f"decoded random bytes {data.hex()}")


def test_decode_rejects_non_bytes():
    with pytest.raises(TypeError):
        decode(GOOD.hex())


def test_errors_share_the_root():
    assert issubclass(DecodeError, EvidenceError) and issubclass(EncodeError, EvidenceError)


@pytest.mark.parametrize("field", ["event_id", "content_key", "outcome", "capture", "request_bytes"])
def test_encode_rejects_missing_field(field):
    event = committed_event()
    del event[field]
    with pytest.raises(EncodeError) as info:
        encode("CaptureEvent", event)
    assert info.value.__cause__ is not None


@pytest.mark.parametrize(
    "change",
    [
        {"content_key": b"\x00" * 31},
        {"content_key": b"\x00" * 33},
        {"content_key": b""},
        {"input_digest": b"\x00" * 64},
        {"prompt_digest": b"\x00"},
        {"response_digest": b"\x00" * 31},
        {"output_digest": bytearray(16)},
        {"retrieval": [{"doc_id": "d", "doc_version": None, "chunk_digest": b"\x00" * 20,
                        "chunk_bytes": None}]},
        {"content_key": "00" * 32},
        {"replay": {"seed": 42, "temperature": None, "top_p": None, "deterministic": True}},
        {"request_length": None},
        {"http_status": 2**31},
        {"http_status": True},
        {"outcome": "MAYBE"},
        {"request_bytes": "text"},
        {"unexpected": 1},
    ],
)
def test_encode_rejects_mismatched_record(change):
    with pytest.raises(EncodeError):
        encode("CaptureEvent", {**committed_event(), **change})


@pytest.mark.parametrize("field,size", [("content_key", 31), ("response_digest", 0),
                                        ("retrieval[0].chunk_digest", 33)])
def test_encode_names_the_digest_of_the_wrong_size(field, size):
    event = committed_event()
    if field.startswith("retrieval"):
        event["retrieval"] = [{**event["retrieval"][0], "chunk_digest": bytes(size)}]
    else:
        event[field] = bytes(size)
    with pytest.raises(EncodeError, match=rf"{re.escape(field)} must be exactly 32 bytes, got {size}"):
        encode("CaptureEvent", event)
    assert wrong_size_digest("CaptureEvent", event).startswith(field)
    assert wrong_size_digest("CaptureEvent", committed_event()) is None


def _reframe(name, record):
    """Encode ``record`` under ``name`` without the digest size check (a foreign producer)."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, SCHEMAS[name].parsed, record)
    return b"\xc3\x01" + fingerprint(name) + out.getvalue()


def test_decode_rejects_digests_of_the_wrong_size():
    event = {**committed_event(), "output_digest": bytes(31)}
    with pytest.raises(DecodeError, match="output_digest must be exactly 32 bytes"):
        decode(_reframe("CaptureEvent", event))
    record = sealed_records()[0]
    bad_seal = {**record["seal"], "prev_digest": bytes(33)}
    with pytest.raises(DecodeError, match="seal.prev_digest must be exactly 32 bytes"):
        decode(_reframe("EvidenceRecord", {**record, "seal": bad_seal}))
    bad_body = {**record["body"], "content_key": b""}
    with pytest.raises(DecodeError, match="body.content_key must be exactly 32 bytes"):
        split_record(_reframe("EvidenceRecord", {**record, "body": bad_body}))
    with pytest.raises(DecodeError, match="record_digest must be exactly 32 bytes"):
        decode(_reframe("WriterHead", {**HEAD, "record_digest": bytes(8)}))


@pytest.mark.parametrize("name", ["prev_digest", "record_digest"])
@pytest.mark.parametrize("bad", [bytes(31), bytes(33), b"", "00" * 32])
def test_encode_sealed_refuses_digests_of_the_wrong_size(name, bad):
    seal_ = {"seq": 1, "occurred_at": 1, "prev_digest": GENESIS, "record_digest": GENESIS,
             "writer": WRITER, "intake_partition": 0, "intake_offset": 0, name: bad}
    with pytest.raises(EncodeError, match=name):
        encode_sealed(body_bytes(committed_event()), seal_)


def test_digest_fields_cover_every_digest_of_every_schema():
    assert DIGEST_FIELDS["CaptureEvent"] == (
        "content_key", "input_digest", "prompt_digest", "retrieval[].chunk_digest",
        "response_digest", "output_digest", "telemetry?.otlp_digest", "telemetry?.span_digest")
    assert DIGEST_FIELDS["EvidenceRecord"] == tuple(
        f"body.{f}" for f in DIGEST_FIELDS["CaptureEvent"]) + ("seal.prev_digest", "seal.record_digest")
    assert DIGEST_FIELDS["WriterHead"] == ("record_digest",)


def test_encode_rejects_nested_mismatch_and_non_dict():
    event = committed_event()
    event["replay"] = {**event["replay"], "deterministic": None}
    with pytest.raises(EncodeError):
        body_bytes(event)
    with pytest.raises(EncodeError):
        encode("WriterHead", [HEAD])


def test_unknown_schema_name():
    with pytest.raises(ValueError, match="unknown schema"):
        encode("Nope", {})
    with pytest.raises(ValueError):
        fingerprint("evidence.v2.CaptureEvent")


@pytest.mark.parametrize("record", sealed_records())
def test_split_record_returns_stored_body_bytes(record):
    data = encode("EvidenceRecord", record)
    stored, decoded = split_record(data)
    assert decoded == record
    assert stored == body_bytes(record["body"])
    assert data[10:].startswith(stored)
    s = decoded["seal"]
    assert record_digest(s["prev_digest"], s["seq"], s["occurred_at"], stored) == s["record_digest"]


def test_chain_links_seq1_to_seq2():
    first, second = sealed_records()
    assert first["seal"]["seq"] == 1 and first["seal"]["prev_digest"] == GENESIS
    assert second["seal"]["seq"] == 2 and second["seal"]["prev_digest"] == first["seal"]["record_digest"]


def test_split_record_rejects_other_schemas_and_bad_bytes():
    with pytest.raises(DecodeError, match="EvidenceRecord"):
        split_record(GOOD)
    with pytest.raises(DecodeError):
        split_record(encode("EvidenceRecord", sealed_records()[0]) + b"\x00")


def test_tampered_body_breaks_the_recomputed_digest():
    data = bytearray(encode("EvidenceRecord", seal(failed_event(), 0, GENESIS, 5, WRITER, 0, 0)))
    i = data.index(b"rate_limit_error")
    data[i] ^= 0x20  # 'r' -> 'R': still a valid record, different body bytes
    stored, record = split_record(bytes(data))
    s = record["seal"]
    assert record_digest(s["prev_digest"], s["seq"], s["occurred_at"], stored) != s["record_digest"]


def test_a_writer_head_of_the_previous_schema_reads_with_the_added_fields_defaulted():
    # evidence.writer-state is compacted and outlives an upgrade: a head written before the
    # tree fields existed (avro/history/) still decodes, resolved into the current schema.
    import io
    import json
    from pathlib import Path

    import fastavro

    from evidence_contract import decode, encode
    from evidence_contract.codec import fingerprint

    old_file = next((Path(__file__).resolve().parents[2] / "schemas" / "avro" / "history")
                    .glob("WriterHead.*.avsc"))
    old = fastavro.parse_schema(json.loads(old_file.read_text()))
    head = {"stream": "acme:chat", "seq": 7, "record_digest": b"\x05" * 32,
            "occurred_at": 1_700_000_000_000_000, "event_id": "0190a0b0-0000-7000-8000-000000000000",
            "log_partition": 2, "log_offset": 9}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, old, head)
    old_fp = bytes.fromhex(old_file.name.split(".")[1])
    assert old_fp != fingerprint("WriterHead")
    name, rec = decode(b"\xc3\x01" + old_fp + body.getvalue())
    assert name == "WriterHead"
    assert {k: rec[k] for k in head} == head
    assert (rec["tree_size"], rec["tree_nodes"], rec["checkpoint_size"]) == (0, [], 0)
    # and it is written back in the current schema only
    assert encode("WriterHead", rec)[2:10] == fingerprint("WriterHead")


def test_the_compiled_digest_check_agrees_with_the_walk_on_every_digest_path():
    """wrong_size_digest runs a generated straight-line check first and names a misfit with
    the generic walk: every digest path, every bad size and type, and the types the walk
    accepts (bytearray, memoryview), give the walk's own answer."""
    from evidence_contract.codec import _DIGEST_PATHS, _misfit

    def walk(record):
        for parts in _DIGEST_PATHS["CaptureEvent"]:
            found = _misfit(record, parts, 0, "")
            if found:
                return found
        return None

    base = {**committed_event(), "telemetry": mapped_event()["telemetry"]}
    base["retrieval"] = [dict(base["retrieval"][0]) for _ in range(3)]
    for field in DIGEST_FIELDS["CaptureEvent"]:
        for bad in (bytes(31), bytes(33), b"", bytearray(32), memoryview(bytes(32)), "x" * 32, 32):
            event = {**base, "retrieval": [dict(r) for r in base["retrieval"]]}
            if field.startswith("retrieval[]."):
                event["retrieval"][2][field.split(".", 1)[1]] = bad
            elif field.startswith("telemetry?."):
                event["telemetry"] = {**base["telemetry"], field.split(".", 1)[1]: bad}
            else:
                event[field] = bad
            found = wrong_size_digest("CaptureEvent", event)
            assert found == walk(event), (field, bad)
            if isinstance(bad, (str, int)) or len(bad) != 32:
                assert found and found.startswith(field.replace("?", "").replace("[]", "[2]")), found
    assert wrong_size_digest("CaptureEvent", base) is None is walk(base)
    # An optional record that is null, or absent (a body of an earlier version), has no digests.
    for event in ({**base, "telemetry": None}, {k: v for k, v in base.items() if k != "telemetry"}):
        assert wrong_size_digest("CaptureEvent", event) is None is walk(event)


def test_a_body_error_names_no_object_address(monkeypatch):
    """The text goes into a rejection's reason: the same bytes give the same text, whatever
    address fastavro's message carries."""
    from evidence_contract import codec

    def boom(fo, schema, reader_schema):
        fo.read(3)
        raise ValueError(f"cannot read from {fo!r}")

    monkeypatch.setattr(codec.fastavro, "schemaless_reader", boom)
    data = encode("CaptureEvent", committed_event())
    with pytest.raises(DecodeError) as err:
        codec.read_body(data, 10)
    assert " at 0x…>" in str(err.value) and not re.search(r"0x[0-9a-f]{6,}", str(err.value))
