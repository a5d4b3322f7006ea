"""The strict canonical reader must never vouch for bytes that are not canonical.

The property, for any input: ``read_canonical_body`` answers None, or ``(record, end)`` where
``record`` is what fastavro decodes and ``data[start:end]`` is exactly the canonical encoding
of ``record``. Saying None for canonical bytes only costs time, so the tests below pin that
the fast path is taken for the records we produce, and fuzz the soundness direction.
"""

import random

import pytest

from evidence_contract import (
    HEADER_SIZE,
    DecodeError,
    canonical_body_bytes,
    encode,
    read_body,
    read_canonical_body,
)
from evidence_contract._fastread import compile_reader
from evidence_contract.vectors import committed_event, failed_event, truncated_event


def _events():
    c, f = committed_event(), failed_event()
    yield c
    yield f
    yield truncated_event()
    yield {**c, "retrieval": [
        {"doc_id": "d", "doc_version": None, "chunk_digest": bytes(32), "chunk_bytes": None},
        {"doc_id": "é" * 70, "doc_version": "v" * 200, "chunk_digest": bytes(range(32)),
         "chunk_bytes": b"c" * 300}]}
    yield {**c, "captured_at": -1, "http_status": -(1 << 31), "request_length": (1 << 62) - 1,
           "response_length": 0,
           "replay": {"seed": str(1 << 64), "temperature": -0.0, "top_p": 1e308, "deterministic": True}}
    yield {**c, "response_bytes": bytes(range(256)) * 40, "response_length": 10240,
           "params": "x" * 5000, "input_bytes": b"i" * 200, "prompt_bytes": bytes(range(256))}


def _sound(data: bytes, start: int = HEADER_SIZE) -> None:
    got = read_canonical_body(data, start)
    if got is None:
        return
    record, end = got
    ref, ref_end = read_body(data, start)
    assert record == ref and end == ref_end
    assert data[start:end] == canonical_body_bytes(record)


@pytest.mark.parametrize("event", list(_events()), ids=lambda e: str(len(repr(e))))
def test_canonical_records_take_the_fast_path(event):
    data = encode("CaptureEvent", event)
    got = read_canonical_body(data)
    assert got is not None
    assert got == read_body(data)
    assert got[1] == len(data)


def _varint(n: int) -> bytes:
    z, out = (n << 1) ^ (n >> 63), bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    return bytes(out + bytes([z]))


def _splice(data: bytes, at: int, old_len: int, new: bytes) -> bytes:
    return data[:at] + new + data[at + old_len:]


def test_padded_varints_are_not_canonical():
    data = encode("CaptureEvent", committed_event())
    # schema_version's length (0x06) padded to two bytes: same value, longer encoding.
    padded = _splice(data, HEADER_SIZE, 1, b"\x86\x00")
    assert read_body(padded)[0] == read_body(data)[0]
    assert read_canonical_body(padded) is None


def test_boolean_bytes_other_than_0_and_1_are_not_canonical():
    event = committed_event()
    data = encode("CaptureEvent", event)
    # capture.closed_early is the third-to-last field group: find a byte pair to mutate by
    # re-encoding with a different boolean and locating the difference.
    flipped = encode("CaptureEvent", {**event, "capture": {**event["capture"], "closed_early": True}})
    at = next(i for i, (a, b) in enumerate(zip(data, flipped)) if a != b)
    assert flipped[at] == 1
    bad = flipped[:at] + b"\x02" + flipped[at + 1:]
    assert read_body(bad)[0] == read_body(flipped)[0]  # fastavro reads 2 as true
    assert read_canonical_body(bad) is None


def test_split_and_sized_array_blocks_are_not_canonical():
    chunk = {"doc_id": "d", "doc_version": None, "chunk_digest": bytes(32), "chunk_bytes": None}
    event = {**committed_event(), "retrieval": [chunk, chunk]}
    data = encode("CaptureEvent", event)
    item = b"\x02d\x00" + b"\x40" + bytes(32) + b"\x00"  # a digest is bytes: length 32 first
    one_block = b"\x04" + item + item + b"\x00"
    at = data.index(one_block)
    for blocks in (b"\x02" + item + b"\x02" + item + b"\x00",  # two blocks
                   b"\x03" + _varint(2 * len(item)) + item + item + b"\x00"):  # count -2, sized
        bad = _splice(data, at, len(one_block), blocks)
        assert read_body(bad)[0] == read_body(data)[0]
        assert read_canonical_body(bad) is None


def test_padded_digest_lengths_are_not_canonical():
    # A digest's length (32, one byte 0x40) written as two bytes: same value, not canonical.
    event = committed_event()
    data = encode("CaptureEvent", event)
    at = data.index(b"\x40" + event["content_key"])
    padded = _splice(data, at, 1, b"\xc0\x00")
    assert read_body(padded)[0] == read_body(data)[0]
    assert read_canonical_body(padded) is None


def test_the_new_fields_are_read_exactly():
    event = truncated_event()
    got = read_canonical_body(encode("CaptureEvent", event))
    assert got is not None and got[0] == event
    assert got[0]["replay"]["seed"] == "18446744073709551615"
    assert got[0]["capture"]["truncated"] is True
    assert (got[0]["request_length"], got[0]["response_length"]) == (
        event["request_length"], event["response_length"])
    assert all(type(d) is bytes and len(d) == 32 for d in
               (got[0]["content_key"], got[0]["response_digest"],
                got[0]["retrieval"][0]["chunk_digest"]))


def test_ten_byte_varints_are_left_to_the_slow_path():
    reader = compile_reader({"type": "record", "name": "R", "fields": [{"name": "x", "type": "long"}]})
    assert reader(b"\x02", 0) == ({"x": 1}, 1)
    assert reader(b"\xfe" + b"\xff" * 8 + b"\x01", 0) is None  # 2**63 - 1 needs ten bytes
    assert reader(b"\xfe" + b"\xff" * 8 + b"\x7f", 0) is None  # ... and so does this


def test_maps_and_logical_types_get_no_fast_path():
    assert compile_reader({"type": "record", "name": "M", "fields": [
        {"name": "m", "type": {"type": "map", "values": "long"}}]}) is None
    assert compile_reader({"type": "record", "name": "T", "fields": [
        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}) is None


def test_fuzzed_bytes_are_never_wrongly_vouched_for():
    rng = random.Random(1234)
    bases = [encode("CaptureEvent", e) for e in _events()]
    checked = 0
    for _ in range(4000):
        data = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 3)):
            if len(data) <= HEADER_SIZE + 1:
                break
            op, at = rng.random(), rng.randrange(HEADER_SIZE, len(data))
            if op < 0.5:
                data[at] = rng.randrange(256)
            elif op < 0.7:
                data.insert(at, rng.choice((0x00, 0x01, 0x02, 0x80, 0xFF, rng.randrange(256))))
            elif op < 0.85:
                del data[at]
            else:
                del data[at:]
        try:
            _sound(bytes(data))
        except DecodeError:
            pass  # fast path vouched, fastavro refused: that would fail the assert in _sound
        checked += 1
    assert checked == 4000



def test_decode_gives_fastavros_answer_for_every_schema():
    import io

    import fastavro

    from evidence_contract import decode, encode_sealed
    from evidence_contract._avro import SCHEMAS

    rng = random.Random(99)
    seal = {"seq": 3, "occurred_at": 1_700_000_000_000_000, "prev_digest": bytes(32),
            "record_digest": bytes(range(32)), "writer": {"writer_id": "w", "transactional_id": "t",
                                                          "version": "v"},
            "intake_partition": 2, "intake_offset": 99}
    bases = [encode_sealed(encode("CaptureEvent", e)[HEADER_SIZE:], seal) for e in _events()]
    for _ in range(3000):
        data = bytearray(rng.choice(bases))
        at = rng.randrange(HEADER_SIZE, len(data))
        data[at] = rng.randrange(256)
        data = bytes(data)
        try:
            got = decode(data)
        except DecodeError:
            continue
        fo = io.BytesIO(data)
        fo.seek(HEADER_SIZE)
        assert got == ("EvidenceRecord", fastavro.schemaless_reader(fo, SCHEMAS["EvidenceRecord"].parsed, None))
