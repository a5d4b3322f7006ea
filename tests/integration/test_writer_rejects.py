"""Bad intake never stops the writer: each kind lands in rejected, verbatim, with its reason."""

from __future__ import annotations

import uuid

import pytest

from evidence_contract import GENESIS, encode
from evidence_contract.codec import MARKER
from tests.fixtures.writer import (
    CONTRACT_1_CAPTURE,
    encode_capture,
    encode_raw_capture,
    make_capture,
    produce_intake,
    read_all,
    verify_log,
    wait_for_count,
)
from topics import MIB

pytestmark = pytest.mark.integration

STREAM = "rej-stream"


def _bad_messages(max_message_bytes: int) -> list[tuple[str, bytes | None, bytes | None, list]]:
    """(reason, key, value, headers) for every kind of malformed intake message."""
    k = STREAM.encode()
    good = encode_capture(make_capture(STREAM))
    fp = good[2:10]
    body = good[10:]
    wrong_digest = make_capture(STREAM)
    wrong_digest["response_digest"] = bytes(32)
    bad_request = make_capture(STREAM)
    bad_request["content_key"] = b"\x01" * 32
    missing = make_capture(STREAM, response_bytes=None, response_digest=None)
    short_digest = make_capture(STREAM, content_key=b"\x01" * 31)
    bad_seed = make_capture(STREAM, replay={"seed": "0x2a", "temperature": None, "top_p": None,
                                            "deterministic": True})
    cut = make_capture(STREAM)
    cut["capture"] = {**cut["capture"], "truncated": True}  # yet its bytes are kept
    wrong_length = make_capture(STREAM)
    wrong_length["request_length"] += 1
    big = make_capture(STREAM, response=b"x" * (max_message_bytes - 40 * 1024))
    head = encode("WriterHead", {"stream": STREAM, "seq": 1, "record_digest": GENESIS, "occurred_at": 1,
                                 "event_id": "e", "log_partition": 0, "log_offset": None,
                                 "tree_size": 0, "tree_nodes": [], "checkpoint_size": 0})
    return [
        ("NOT_AVRO", k, b'{"not": "avro"}', [("origin", b"json-service")]),
        ("NOT_AVRO", k, None, []),
        ("BAD_MARKER", k, b"\xc3\x02" + fp + body, []),
        ("UNKNOWN_FINGERPRINT", k, MARKER + b"\x00" * 8 + body, []),
        ("TRUNCATED", k, good[: len(good) // 2], [("trace", b"\x00\xff")]),
        ("TRUNCATED", k, good[:6], []),
        ("WRONG_SCHEMA", k, head, []),
        ("MALFORMED", k, good + b"\x00", []),
        ("UNSUPPORTED_VERSION", k, encode_capture(make_capture(STREAM, schema_version="9.9")), []),
        ("BAD_STREAM_ID", b"bad stream!", encode_capture(make_capture("bad stream!")), []),
        ("KEY_MISMATCH", b"other-stream", encode_capture(make_capture(STREAM)), []),
        ("KEY_MISMATCH", None, encode_capture(make_capture(STREAM)), []),
        ("BAD_EVENT_ID", k, encode_capture(make_capture(STREAM, event_id=str(uuid.uuid4()))), []),
        ("DIGEST_MISMATCH", k, encode_capture(wrong_digest), []),
        ("DIGEST_MISMATCH", k, encode_capture(bad_request), []),
        ("MISSING_FIELD", k, encode_capture(missing), []),
        ("BAD_DIGEST", k, encode_raw_capture(short_digest), []),
        ("BAD_SEED", k, encode_raw_capture(bad_seed), []),
        ("BAD_TRUNCATION", k, encode_raw_capture(cut), []),
        ("LENGTH_MISMATCH", k, encode_raw_capture(wrong_length), []),
        # A contract 1.0 producer: its schema fingerprint is not one of ours.
        ("UNKNOWN_FINGERPRINT", k, CONTRACT_1_CAPTURE, []),
        ("OVERSIZED", k, encode_capture(big), []),
    ]


def test_malformed_messages_land_in_rejected_verbatim_with_reasons(kafka_bootstrap, make_topics, run_writer):
    settings = make_topics(partitions=2, max_message_bytes=2 * MIB)
    bad = _bad_messages(settings.max_message_bytes)
    valid = [make_capture(STREAM) for _ in range(len(bad) + 1)]
    # Interleave: valid, bad, valid, bad, ..., valid — all on the stream's partition.
    messages: list[tuple] = []
    for i, v in enumerate(valid):
        messages.append((STREAM.encode(), encode_capture(v), []))
        if i < len(bad):
            reason, key, value, headers = bad[i]
            messages.append((key, value, headers))
    writer = run_writer(settings)
    produce_intake(kafka_bootstrap, settings, messages)

    rejected = wait_for_count(kafka_bootstrap, settings.names.rejected, len(bad), 45, writer.assert_alive)
    log = wait_for_count(kafka_bootstrap, settings.names.log, len(valid), 45, writer.assert_alive)
    by_stream = verify_log(log)
    assert [r["body"]["event_id"] for r in by_stream[STREAM]] == [v["event_id"] for v in valid]

    intake = {(m.key(), m.value()): m for m in read_all(kafka_bootstrap, settings.names.intake)}
    assert len(rejected) == len(bad)
    # Match each rejected message to its intake original by (key, value), byte for byte.
    seen_reasons = {}
    for m in rejected:
        h = dict(m.headers())
        source = intake[(m.key(), m.value())]  # key and value byte for byte
        assert h["evidence.source_topic"].decode() == settings.names.intake
        assert int(h["evidence.source_partition"]) == source.partition() == m.partition()
        assert int(h["evidence.source_offset"]) == source.offset()
        assert h["evidence.reason_text"]
        for name, value in source.headers() or []:
            assert (name, value) in m.headers(), "original headers must be kept"
        seen_reasons[(m.key(), m.value())] = h["evidence.reason"].decode()
    assert seen_reasons == {(k, v): r for r, k, v, _ in bad}
    assert len({r for r, *_ in bad}) >= 12
    writer.assert_alive()
    assert writer.terminate() == 0
