"""The writer's pure core: validation reasons, sealing and chaining, dedup bounds, overlay."""

from __future__ import annotations

import argparse
import uuid

import pytest

import writer
from evidence_contract import (
    GENESIS,
    body_bytes,
    chunk_digest,
    content_key,
    encode,
    encode_sealed,
    input_digest,
    prompt_digest,
    record_digest,
    response_digest,
    split_record,
)
from evidence_contract.vectors import committed_event, failed_event, truncated_event
from tests.fixtures.writer import (
    CONTRACT_1_CAPTURE,
    encode_capture,
    encode_raw_capture,
    make_capture,
)
from topics import MIB
from writer import Capture, DedupWindow, Duplicate, Head, Reason, Rejection, Sealed, Sealer, seal_capture, validate
from writer.config import WriterConfig
from evidence_contract import peek_ids
from writer.core import HEADROOM_BYTES, decode_head, encode_head

MAX = 16 * MIB
W = {"writer_id": "w-1", "transactional_id": "tx", "version": "0.1.0"}
S = "tenant-a:chat"


def _v(**kw):
    return encode_capture(make_capture(S, **kw))


def test_all_is_sorted():
    assert writer.__all__ == sorted(writer.__all__)


def test_a_valid_capture_keeps_its_canonical_bytes():
    e = make_capture(S)
    value = encode_capture(e)
    c = validate(value, S.encode(), MAX)
    assert isinstance(c, Capture) and not c.reencoded
    assert (c.stream, c.event_id, c.body) == (S, e["event_id"], value[10:])


def test_vector_events_are_valid():
    for e in (committed_event(), failed_event(), truncated_event()):
        assert isinstance(validate(encode("CaptureEvent", e), e["stream"].encode(), MAX), Capture)


def test_non_canonical_avro_is_reencoded():
    value = _v()
    assert value[10] == 0x06  # len("2.0") zig-zag; 0x86 0x00 is the same number, over-long
    odd = value[:10] + b"\x86\x00" + value[11:]
    c = validate(odd, S.encode(), MAX)
    assert isinstance(c, Capture) and c.reencoded and c.body == value[10:]
    # The seal covers the re-encoded (canonical) bytes, not the intake bytes.
    record, head = seal_capture(c, Head.genesis(S), 7, W, 0, 0)
    stored, _ = split_record(record)
    assert stored == value[10:] and head.digest == record_digest(GENESIS, 1, 7, value[10:])


def _bad_cases():
    good = _v()
    head = encode("WriterHead", {"stream": S, "seq": 1, "record_digest": GENESIS, "occurred_at": 1,
                                 "event_id": "e", "log_partition": 0, "log_offset": None,
                                 "tree_size": 0, "tree_nodes": [], "checkpoint_size": 0})
    k = S.encode()
    return [
        (None, k, Reason.NOT_AVRO),
        (b"", k, Reason.NOT_AVRO),
        (b'{"a":1}', k, Reason.NOT_AVRO),
        (b"\xc3", k, Reason.TRUNCATED),
        (b"\xc3\x02" + good[2:], k, Reason.BAD_MARKER),
        (good[:7], k, Reason.TRUNCATED),
        (good[:2] + b"\x11" * 8 + good[10:], k, Reason.UNKNOWN_FINGERPRINT),
        (head, k, Reason.WRONG_SCHEMA),
        (good[:-3], k, Reason.TRUNCATED),
        (good + b"\x00", k, Reason.MALFORMED),
        (_v(schema_version="1.0"), k, Reason.UNSUPPORTED_VERSION),
        (_v(schema_version="3.0"), k, Reason.UNSUPPORTED_VERSION),
        (CONTRACT_1_CAPTURE, k, Reason.UNKNOWN_FINGERPRINT),
        (encode_capture(make_capture("a b")), b"a b", Reason.BAD_STREAM_ID),
        (good, b"other", Reason.KEY_MISMATCH),
        (good, None, Reason.KEY_MISMATCH),
        (_v(event_id=str(uuid.uuid4())), k, Reason.BAD_EVENT_ID),
        (_v(event_id="017F22E2-79B0-7CC3-98C4-DC0C0C07398F"), k, Reason.BAD_EVENT_ID),
        (_v(response_digest=bytes(32)), k, Reason.DIGEST_MISMATCH),
        (_v(content_key=content_key(b"something else")), k, Reason.DIGEST_MISMATCH),
        (_v(response_bytes=None, response_digest=None, response_length=None), k,
         Reason.MISSING_FIELD),
        (_v(response_digest=None), k, Reason.MISSING_FIELD),
        (_v(request_bytes=None), k, Reason.MISSING_FIELD),
        (_v(response=b"x" * (1 * MIB)), k, Reason.OVERSIZED),
    ]


@pytest.mark.parametrize("value,key,reason", _bad_cases())
def test_each_bad_message_gets_its_reason(value, key, reason):
    max_bytes = 1 * MIB if reason is Reason.OVERSIZED else MAX
    r = validate(value, key, max_bytes)
    assert isinstance(r, Rejection) and r.reason is reason, r
    assert r.text


def test_size_limit_leaves_headroom_for_the_seal():
    value = _v()
    assert isinstance(validate(value, S.encode(), len(value) + HEADROOM_BYTES), Capture)
    assert validate(value, S.encode(), len(value) + HEADROOM_BYTES - 1).reason is Reason.OVERSIZED


def test_hash_only_capture_without_request_bytes_is_valid():
    e = make_capture(S, request_bytes=None)
    e["capture"] = {**e["capture"], "request_policy": "HASH_ONLY"}
    assert isinstance(validate(encode_capture(e), S.encode(), MAX), Capture)


# --- Record contract 2.0 rules ------------------------------------------------------------


def _check(event, reason, *words):
    r = validate(encode_raw_capture(event), event["stream"].encode(), MAX)
    if reason is None:
        assert isinstance(r, Capture), r
        return
    assert isinstance(r, Rejection) and r.reason is reason, r
    for w in words:
        assert w in r.text, (w, r.text)


def _chunk(data=b"chunk text", digest=None, kept=True):
    return {"doc_id": "kb/a", "doc_version": None,
            "chunk_digest": chunk_digest(data) if digest is None else digest,
            "chunk_bytes": data if kept else None}


def _truncated(**kw):
    e = make_capture(S, **kw)
    e.update(request_bytes=None, response_bytes=None)
    e["capture"] = {**e["capture"], "truncated": True}
    return e


@pytest.mark.parametrize("field,size", [
    ("content_key", 31), ("content_key", 33), ("content_key", 0), ("input_digest", 16),
    ("prompt_digest", 64), ("response_digest", 31), ("output_digest", 1),
])
def test_a_digest_of_the_wrong_length_is_rejected_naming_the_field(field, size):
    e = make_capture(S)
    e[field] = b"\x07" * size
    _check(e, Reason.BAD_DIGEST, field, f"got {size} bytes")


def test_a_chunk_digest_of_the_wrong_length_is_rejected_naming_the_chunk():
    e = make_capture(S, retrieval=[_chunk(), _chunk(digest=b"\x01" * 31, kept=False)])
    _check(e, Reason.BAD_DIGEST, "retrieval[1].chunk_digest", "got 31 bytes")


@pytest.mark.parametrize("change,words", [
    ({"request_length": 5}, ("request_length is 5", "request_bytes")),
    ({"response_length": 1}, ("response_length is 1", "response_bytes")),
    ({"request_length": -1}, ("request_length is -1", "negative")),
])
def test_lengths_must_be_the_lengths_of_the_bytes_kept(change, words):
    e = make_capture(S)
    e.update(change)
    _check(e, Reason.LENGTH_MISMATCH, *words)


def test_lengths_are_checked_also_when_no_bytes_are_kept():
    e = make_capture(S, request_bytes=None, request_length=-7)
    e["capture"] = {**e["capture"], "request_policy": "HASH_ONLY"}
    _check(e, Reason.LENGTH_MISMATCH, "negative")
    _check({**e, "request_length": 12345}, None)  # the full body's length, bytes not kept
    _check(_truncated(response_length=-1), Reason.LENGTH_MISMATCH, "response_length", "negative")


@pytest.mark.parametrize("change,words", [
    ({"response_length": None}, ("response_length", "COMMITTED")),
    ({"response_digest": None}, ("response_digest",)),
])
def test_committed_needs_the_response_digest_and_length(change, words):
    e = make_capture(S)
    e.update(change)
    _check(e, Reason.MISSING_FIELD, *words)


def test_response_length_is_null_exactly_when_there_is_no_response_body():
    failed = make_capture(S, outcome="FAILED", response_bytes=None, response_digest=None,
                          response_length=None, error_bytes=b"boom", http_status=500)
    _check(failed, None)
    _check({**failed, "response_length": 0}, Reason.MISSING_FIELD, "response_digest")
    digest_only = {**failed, "response_digest": response_digest(b"x")}
    _check(digest_only, Reason.MISSING_FIELD, "response_length")
    _check({**digest_only, "response_length": 1}, None)


def test_truncated_capture_needs_no_bodies_but_keeps_digests_and_lengths():
    e = _truncated()
    assert e["response_length"] and e["request_length"]
    _check(e, None)  # COMMITTED and VALUE, yet neither body: allowed when truncated
    _check({**e, "response_digest": None}, Reason.MISSING_FIELD, "response_digest")
    _check({**e, "response_length": None}, Reason.MISSING_FIELD, "response_length")
    # Not truncated, the same capture lacks what VALUE and COMMITTED keep.
    untruncated = {**e, "capture": {**e["capture"], "truncated": False}}
    _check(untruncated, Reason.MISSING_FIELD, "response_bytes")
    _check({**untruncated, "response_bytes": b"x", "response_length": 1,
            "response_digest": response_digest(b"x")}, Reason.MISSING_FIELD, "request_bytes")


@pytest.mark.parametrize("field,value", [
    ("request_bytes", b"{}"), ("response_bytes", b"{}"), ("input_bytes", b"hi"),
    ("prompt_bytes", b"hi"),
])
def test_truncated_capture_keeps_no_body(field, value):
    e = _truncated(input_digest=input_digest(b"hi"), prompt_digest=prompt_digest(b"hi"))
    e[field] = value
    _check(e, Reason.BAD_TRUNCATION, field)


def test_truncated_capture_keeps_no_chunk_bytes_and_at_most_64_kib_of_error():
    _check(_truncated(retrieval=[_chunk(kept=False), _chunk()]), Reason.BAD_TRUNCATION,
           "retrieval[1].chunk_bytes")
    _check(_truncated(retrieval=[_chunk(kept=False)]), None)
    failed = _truncated(outcome="UNKNOWN", response_digest=None, response_length=None)
    _check({**failed, "error_bytes": b"e" * 65536}, None)
    _check({**failed, "error_bytes": b"e" * 65537}, Reason.BAD_TRUNCATION, "error_bytes")


def test_input_and_prompt_bytes_must_match_their_digests():
    ok = make_capture(S, input_bytes=b"user said", input_digest=input_digest(b"user said"),
                      prompt_bytes=b"rendered", prompt_digest=prompt_digest(b"rendered"))
    _check(ok, None)
    _check({**ok, "input_digest": input_digest(b"other")}, Reason.DIGEST_MISMATCH,
           "input_digest")
    _check({**ok, "prompt_digest": prompt_digest(b"other")}, Reason.DIGEST_MISMATCH,
           "prompt_digest")
    # Digests of another kind do not pass: the domain prefix differs.
    _check({**ok, "input_digest": prompt_digest(b"user said")}, Reason.DIGEST_MISMATCH,
           "input_digest")
    _check({**ok, "input_digest": None}, Reason.MISSING_FIELD, "input_digest")
    _check({**ok, "prompt_digest": None}, Reason.MISSING_FIELD, "prompt_digest")
    # A digest without its bytes (HASH_ONLY, or not kept) is fine.
    _check({**ok, "input_bytes": None, "prompt_bytes": None}, None)


def test_chunk_bytes_must_match_their_chunk_digest():
    _check(make_capture(S, retrieval=[_chunk(), _chunk(b"other chunk")]), None)
    _check(make_capture(S, retrieval=[_chunk(), _chunk(b"x", digest=chunk_digest(b"y"))]),
           Reason.DIGEST_MISMATCH, "retrieval[1].chunk_digest")
    _check(make_capture(S, retrieval=[_chunk(b"x", digest=prompt_digest(b"x"))]),
           Reason.DIGEST_MISMATCH, "retrieval[0].chunk_digest")
    _check(make_capture(S, retrieval=[_chunk(b"x", digest=chunk_digest(b"y"), kept=False)]), None)


@pytest.mark.parametrize("seed,deterministic,reason", [
    ("42", True, None),
    (str(2**64), True, None),
    ("-" + "9" * 300, True, None),
    (None, False, None),
    ("42", False, Reason.BAD_SEED),
    (None, True, Reason.BAD_SEED),
    ("abc", True, Reason.BAD_SEED),
    ("042", True, Reason.BAD_SEED),
    ("4.2", True, Reason.BAD_SEED),
    ("", True, Reason.BAD_SEED),
    ("1" * 4301, True, Reason.BAD_SEED),
])
def test_seed_is_integer_decimal_text_and_decides_deterministic(seed, deterministic, reason):
    e = make_capture(S, replay={"seed": seed, "temperature": None, "top_p": None,
                                "deterministic": deterministic})
    _check(e, reason, "replay.")


def test_encode_sealed_is_byte_identical_to_encode():
    for e in (committed_event(), failed_event(), truncated_event()):
        seal = {"seq": 12345678901, "occurred_at": 1_700_000_000_000_000, "prev_digest": b"\x07" * 32,
                "record_digest": b"\x09" * 32, "writer": {**W, "writer_id": "h\u00e9st:1"},
                "intake_partition": 5, "intake_offset": 2**40}
        assert encode_sealed(body_bytes(e), seal) == encode("EvidenceRecord", {"body": e, "seal": seal})


def test_seal_chains_from_genesis_and_verifies():
    captures = [validate(_v(), S.encode(), MAX) for _ in range(3)]
    head = Head.genesis(S)
    for i, c in enumerate(captures, start=1):
        record, new = seal_capture(c, head, 1000 + i, W, 2, 40 + i)
        body, rec = split_record(record)
        seal = rec["seal"]
        assert body == c.body
        assert (seal["seq"], seal["prev_digest"], seal["occurred_at"]) == (i, head.digest, 1000 + i)
        assert seal["record_digest"] == record_digest(head.digest, i, 1000 + i, body) == new.digest
        assert (seal["intake_partition"], seal["intake_offset"], seal["writer"]) == (2, 40 + i, W)
        assert (new.seq, new.event_id) == (i, c.event_id)
        head = new
    assert captures and Head.genesis(S).digest == GENESIS


def test_occurred_at_never_goes_back_within_a_stream():
    c = validate(_v(), S.encode(), MAX)
    _, h1 = seal_capture(c, Head.genesis(S), 5000, W, 0, 0)
    _, h2 = seal_capture(c, h1, 4000, W, 0, 1)  # the clock stepped back
    assert h2.occurred_at == 5000


def test_head_round_trips_and_peek_ids():
    h = Head(S, 7, b"\x01" * 32, 99, "eid")
    assert decode_head(encode_head(h, 3)) == h
    e = make_capture(S)
    c = validate(encode_capture(e), S.encode(), MAX)
    record, _ = seal_capture(c, Head.genesis(S), 1, W, 0, 0)
    assert peek_ids(record) == (S, e["event_id"])
    assert peek_ids(encode_capture(e)) == (S, e["event_id"])


def test_dedup_window_is_bounded_by_age_and_count():
    w = DedupWindow(max_age_us=100, max_ids=3)
    w.add("a", 0)
    w.add("b", 50)
    assert "a" in w and "b" in w
    w.add("c", 120)  # "a" is now older than 100 us
    assert "a" not in w and "b" in w and "c" in w
    w.add("d", 121)
    w.add("e", 122)  # count bound: only 3 remain
    assert len(w) == 3 and "b" not in w
    w.expire(10_000)
    assert len(w) == 0
    with pytest.raises(ValueError):
        DedupWindow(0, 1)


def test_a_transaction_s_ids_added_at_once_leave_what_an_add_each_leaves():
    """add_all (the commit's) expires once: with seal times that do not go down, exactly
    the ids (in order) an add each leaves; with times that do, never an id fewer."""
    import random

    def run(down: bool, max_ids: int, seed: int) -> tuple[DedupWindow, DedupWindow]:
        rng = random.Random(seed)
        one, all_ = DedupWindow(100, max_ids), DedupWindow(100, max_ids)
        t = 0
        for _ in range(rng.randint(1, 6)):  # transactions
            batch: dict[str, int] = {}
            for _ in range(rng.randint(0, 8)):
                t += rng.randint(0, 60)
                eid = f"e{rng.randint(0, 15)}"
                batch.pop(eid, None)  # a repeat id moves to the end, as in the commit
                batch[eid] = t - (rng.choice([0, 0, 150]) if down else 0)
            if not down:  # times that do not go down, as a clock's
                batch = dict(zip(batch, sorted(batch.values())))
            for eid, at in batch.items():
                one.add(eid, at)
            all_.add_all(batch)
            if not down:
                assert list(one._ids.items()) == list(all_._ids.items())
            else:
                assert set(one._ids) <= set(all_._ids)
        return one, all_

    for seed in range(300):
        run(False, 1 + seed % 12, seed)
        run(True, 10_000, seed)


def _sealer():
    s = Sealer(W, MAX, dedup_max_age_us=10**12, dedup_max_ids=1000)
    s.assign(0, {}, s.new_window())
    return s


def test_sealer_overlay_commit_and_abort():
    s = _sealer()
    v1, v2 = _v(), _v()
    out = s.handle(v1, S.encode(), 0, 0, 10)
    assert isinstance(out, Sealed) and out.head.seq == 1
    assert s.handle(v2, S.encode(), 0, 1, 11).head.seq == 2
    s.abort()  # nothing committed: the same messages get the same seqs again
    assert s.head(0, S).seq == 0
    assert s.handle(v1, S.encode(), 0, 0, 12).head.seq == 1
    assert isinstance(s.handle(v1, S.encode(), 0, 1, 13), Duplicate)  # duplicate inside a batch
    assert set(s.pending_heads()) == {(0, S)}
    s.commit()
    assert s.head(0, S).seq == 1 and s.pending_heads() == {}
    assert isinstance(s.handle(v1, S.encode(), 0, 2, 14), Duplicate)  # duplicate across batches
    assert s.handle(v2, S.encode(), 0, 3, 15).head.seq == 2


def test_sealer_rejects_without_touching_heads():
    s = _sealer()
    r = s.handle(b"junk", S.encode(), 0, 0, 1)
    assert isinstance(r, Rejection) and r.reason is Reason.NOT_AVRO
    assert s.pending_heads() == {}


def test_config_from_env_and_args():
    cfg = WriterConfig.from_env({"EVIDENCE_KAFKA_BOOTSTRAP": "k:1", "EVIDENCE_TOPIC_PREFIX": "p",
                                 "EVIDENCE_WRITER_BATCH_MAX_MESSAGES": "7",
                                 "EVIDENCE_WRITER_METRICS_PORT": "0"})
    assert (cfg.bootstrap, cfg.topics.names.intake, cfg.batch_max_messages, cfg.metrics_port) == \
        ("k:1", "p.intake", 7, 0)
    assert (cfg.transactional_id, cfg.group_id, cfg.instance_id) == \
        ("evidence-writer", "evidence-writer", "evidence-writer")
    args = argparse.Namespace(batch_linger_ms=5, transactional_id="tx-2", topic_prefix="q")
    cfg2 = cfg.with_args(args)
    assert (cfg2.batch_linger_ms, cfg2.transactional_id, cfg2.instance_id, cfg2.topics.names.log) == \
        (5, "tx-2", "tx-2", "q.log")
    with pytest.raises(ValueError):
        cfg.with_args(argparse.Namespace(batch_max_messages=0))


def test_digest_helpers_agree_with_fixture():
    e = make_capture(S)
    assert e["response_digest"] == response_digest(e["response_bytes"])


def test_a_capture_on_another_partition_than_its_streams_is_rejected():
    from evidence_contract.topics import partition_for

    home = partition_for(S, 3)
    s = Sealer(W, MAX, dedup_max_age_us=10**12, dedup_max_ids=1000, partitions=3)
    for p in range(3):
        s.assign(p, {}, s.new_window())
    wrong = s.handle(_v(), S.encode(), (home + 1) % 3, 0, 10)
    assert isinstance(wrong, Rejection) and wrong.reason == Reason.WRONG_PARTITION
    assert f"partition {home}" in wrong.text
    assert isinstance(s.handle(_v(), S.encode(), home, 0, 11), Sealed)


def test_an_event_id_sealed_in_another_stream_of_the_partition_is_absorbed():
    # The writer sees every stream of its partitions: a capture that reuses an event_id
    # already sealed there, in any stream, is absorbed (the projector and the audit flag
    # what lands on another partition, which the writer cannot see).
    s = _sealer()
    first = make_capture(S)
    other = make_capture("tenant-b:chat", event_id=first["event_id"])
    assert isinstance(s.handle(encode_capture(first), S.encode(), 0, 0, 10), Sealed)
    out = s.handle(encode_capture(other), b"tenant-b:chat", 0, 1, 11)
    assert isinstance(out, Duplicate) and out.stream == "tenant-b:chat"
    s.commit()
    again = make_capture("tenant-c:chat", event_id=first["event_id"])
    assert isinstance(s.handle(encode_capture(again), b"tenant-c:chat", 0, 2, 12), Duplicate)
