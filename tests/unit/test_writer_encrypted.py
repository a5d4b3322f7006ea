"""The writer and record contract 2.1: encrypted captures, and 2.0 captures of existing producers."""

from __future__ import annotations

import io

import fastavro

from evidence_contract import (
    GENESIS,
    decode,
    encode,
    fingerprint,
    record_digest,
    split_record,
)
from evidence_contract import envelope as fmt
from evidence_contract.vectors import committed_event, encrypted_event
from tests.fixtures.writer import encode_raw_capture
from topics import MIB
from writer import Capture, Head, Reason, Rejection, Sealer, seal_capture, validate

MAX = 16 * MIB
W = {"writer_id": "w-1", "transactional_id": "tx", "version": "0.1.0"}
S = "tenant-a:support.chat"  # the vectors' stream


def _validate(event):
    return validate(encode_raw_capture(event), event["stream"].encode(), MAX)


def test_an_encrypted_capture_is_sealed_byte_for_byte():
    value = encode("CaptureEvent", encrypted_event())
    c = validate(value, S.encode(), MAX)
    assert isinstance(c, Capture) and not c.reencoded and c.record_fp is None
    record, head = seal_capture(c, Head.genesis(S), 5, W, 0, 0)
    stored, rec = split_record(record)
    assert stored == value[10:] and rec["body"]["encryption"]["key_id"] == encrypted_event()[
        "encryption"]["key_id"]
    assert record_digest(GENESIS, 1, 5, stored) == head.digest


def test_keyed_commitments_are_not_checked_against_the_sealed_bytes():
    # The writer has no data key: a commitment that matches nothing it could compute is
    # fine; a plain digest where a commitment belongs is as opaque to it.
    e = encrypted_event()
    assert isinstance(_validate({**e, "content_key": b"\x07" * 32}), Capture)
    assert isinstance(_validate({**e, "response_digest": b"\x08" * 32}), Capture)


def test_bad_encrypted_captures_are_rejected_as_bad_encryption():
    e = encrypted_event()
    env = e["response_bytes"]
    cases = [
        ({"encryption": {"scheme": "aes128-ecb", "key_id": e["encryption"]["key_id"]}},
         "encryption.scheme"),
        ({"encryption": {"scheme": fmt.SCHEME, "key_id": "not hex"}}, "encryption.key_id"),
        ({"request_bytes": b'{"model":"gpt-4o-mini","messages":[]} -- in the clear'},
         "request_bytes is not an envelope"),
        ({"response_bytes": env[:1] + bytes(16) + env[17:]}, "response_bytes is sealed under key"),
        ({"request_length": e["request_length"] + 45}, "request_length is"),
        ({"schema_version": "2.0"}, "schema_version '2.0' has no encryption"),
    ]
    for change, words in cases:
        r = _validate({**e, **change})
        assert isinstance(r, Rejection) and r.reason is Reason.BAD_ENCRYPTION, (change, r)
        assert words in r.text, (words, r.text)


def test_the_other_rules_still_hold_for_encrypted_captures():
    e = encrypted_event()
    r = _validate({**e, "response_bytes": None})  # COMMITTED without its (sealed) response
    assert isinstance(r, Rejection) and r.reason is Reason.MISSING_FIELD
    r = _validate({**e, "content_key": b"\x07" * 31})
    assert isinstance(r, Rejection) and r.reason is Reason.BAD_DIGEST
    big = {**e, "capture": {**e["capture"], "truncated": True}}
    r = _validate(big)
    assert isinstance(r, Rejection) and r.reason is Reason.BAD_TRUNCATION


def _old_schema():
    from evidence_contract._avro import HISTORY

    return next(s for s in HISTORY if s.name == "CaptureEvent")


def _encode_2_0(event) -> bytes:
    old = _old_schema()
    body = {k: v for k, v in event.items() if k != "encryption"}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, old.parsed, {**body, "schema_version": "2.0"})
    return b"\xc3\x01" + old.fingerprint + out.getvalue()


def test_a_2_0_capture_of_an_existing_producer_is_sealed_as_a_2_0_record_byte_for_byte():
    value = _encode_2_0(committed_event())
    c = validate(value, S.encode(), MAX)
    assert isinstance(c, Capture) and not c.reencoded
    assert c.record_fp == bytes.fromhex("854b3d02a904fe84") and c.body == value[10:]
    record, head = seal_capture(c, Head.genesis(S), 5, W, 3, 4)
    assert record[2:10] == c.record_fp
    stored, rec = split_record(record)
    assert stored == value[10:] and "encryption" not in rec["body"]
    assert rec["body"]["schema_version"] == "2.0"
    assert record_digest(GENESIS, 1, 5, stored) == head.digest


def test_a_2_0_capture_that_is_not_canonical_is_re_encoded_with_its_own_schema():
    value = bytearray(_encode_2_0(committed_event()))
    # captured_at is the fourth field; pad its varint by one byte (same value, non-minimal)
    pos = 10
    for _ in range(3):  # schema_version, event_id, stream: a one-byte length, then the text
        pos += 1 + (value[pos] >> 1)
    end = pos
    while value[end] & 0x80:
        end += 1
    value[end] |= 0x80
    value[end + 1:end + 1] = b"\x00"
    c = validate(bytes(value), S.encode(), MAX)
    assert isinstance(c, Capture) and c.reencoded
    assert c.body == _encode_2_0(committed_event())[10:]
    assert c.record_fp == bytes.fromhex("854b3d02a904fe84")


def test_one_stream_chains_2_0_and_2_1_records():
    sealer = Sealer(W, MAX, dedup_max_age_us=10**9, dedup_max_ids=100)
    sealer.assign(0, {}, sealer.new_window())
    old = _encode_2_0(committed_event())
    new = encode("CaptureEvent", encrypted_event() | {"event_id": "017f22e2-79b0-7cc3-98c4-dc0c0c07399a"})
    first = sealer.handle(old, S.encode(), 0, 0, 10)
    second = sealer.handle(new, S.encode(), 0, 1, 11)
    assert first.record[2:10] != second.record[2:10] == fingerprint("EvidenceRecord")
    _, r1 = split_record(first.record)
    stored2, r2 = split_record(second.record)
    assert r2["seal"]["prev_digest"] == r1["seal"]["record_digest"]
    assert record_digest(r1["seal"]["record_digest"], 2, 11, stored2) == r2["seal"]["record_digest"]
    assert decode(second.record)[1]["body"]["encryption"] is not None
