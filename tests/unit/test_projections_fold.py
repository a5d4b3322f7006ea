from datetime import timedelta

import pytest

from projections.fold import ProjectedHead, Record, Undecodable, decode_message, fold
from projections.rows import RECORD_COLUMNS, RECORD_TYPES, record_row
from evidence_contract import GENESIS, encode
from evidence_contract.chain import BROKEN_LINK, DUPLICATE, GAP, OUT_OF_ORDER, UNDECODABLE, Head
from tests.fixtures.log import chain, make_body, seal_record


def msgs(records, partition=0, first_offset=0):
    return [decode_message(partition, first_offset + i, r.value) for i, r in enumerate(records)]


def kinds(folded):
    return [(f.kind, f.stream, f.seq) for f in folded.findings]


def test_a_clean_chain_has_no_findings_and_its_head_is_the_last_record():
    recs = chain({"a": 5})
    out = fold({}, msgs(recs))
    assert out.findings == []
    assert [r[RECORD_COLUMNS.index("seq")] for r in out.rows] == [1, 2, 3, 4, 5]
    head = out.heads["a"]
    assert (head.chain.seq, head.chain.digest, head.record_count) == (
        5, recs[-1].record_digest, 5)
    assert head.first_at < head.last_at
    assert out.next_offsets == {0: 5}


def test_a_chain_split_over_batches_continues_from_the_given_head():
    recs = chain({"a": 6})
    first = fold({}, msgs(recs[:3]))
    second = fold(first.heads, msgs(recs[3:], first_offset=3))
    assert second.findings == []
    assert second.heads["a"].chain.seq == 6 and second.heads["a"].record_count == 6
    assert second.heads["a"].first_at == first.heads["a"].first_at


def test_interleaved_streams_are_chained_independently():
    recs = chain({"a": 4, "b": 3, "c": 1})
    out = fold({}, msgs(recs))
    assert out.findings == []
    assert {s: h.chain.seq for s, h in out.heads.items()} == {"a": 4, "b": 3, "c": 1}


def test_a_gap_is_reported_and_the_record_still_stored():
    recs = chain({"a": 4})
    out = fold({}, msgs([recs[0], recs[3]]))
    assert kinds(out) == [(GAP, "a", 4)]
    assert "seqs 2..3 missing" in out.findings[0].detail
    assert len(out.rows) == 2 and out.heads["a"].chain.seq == 4


def test_a_first_record_above_one_is_a_gap():
    recs = chain({"a": 2})
    out = fold({}, msgs(recs[1:]))
    assert kinds(out) == [(GAP, "a", 2)]
    assert "seq 1 missing" in out.findings[0].detail


def test_a_repeated_seq_is_a_duplicate_and_does_not_lower_the_head():
    recs = chain({"a": 3})
    out = fold({}, msgs([recs[0], recs[1], recs[2], recs[1]]))
    assert kinds(out) == [(DUPLICATE, "a", 2)]
    head = out.heads["a"]
    assert (head.chain.seq, head.chain.digest, head.record_count) == (
        3, recs[2].record_digest, 4)
    assert len(out.rows) == 4


def test_a_wrong_prev_digest_is_a_broken_link():
    recs = chain({"a": 2})
    forged = seal_record(make_body("a", 3), 3, b"\x01" * 32)
    out = fold({}, msgs([*recs, forged]))
    assert kinds(out) == [(BROKEN_LINK, "a", 3)]
    assert out.heads["a"].chain.seq == 3
    assert out.heads["a"].chain.digest == forged.record_digest


def test_the_first_record_must_chain_from_genesis():
    forged = seal_record(make_body("a", 1), 1, b"\x02" * 32)
    assert kinds(fold({}, msgs([forged]))) == [(BROKEN_LINK, "a", 1)]


def test_the_link_is_checked_against_the_given_head():
    recs = chain({"a": 2})
    t = record_row(recs[0].value, 0, 0)[RECORD_COLUMNS.index("occurred_at")]
    stale = ProjectedHead(Head("a", 1, b"\x09" * 32), 1, t, t)
    assert kinds(fold({"a": stale}, msgs(recs[1:]))) == [(BROKEN_LINK, "a", 2)]


def test_undecodable_messages_become_findings_with_their_position():
    recs = chain({"a": 2})
    capture = encode("CaptureEvent", make_body("a", 9))
    batch = [*msgs(recs[:1]), decode_message(0, 1, b"garbage"), decode_message(0, 2, capture),
             decode_message(0, 3, None), decode_message(0, 4, recs[1].value)]
    assert all(isinstance(m, Undecodable) for m in batch[1:4])
    out = fold({}, batch)
    assert [(f.kind, f.partition, f.offset) for f in out.findings] == [
        (UNDECODABLE, 0, 1), (UNDECODABLE, 0, 2), (UNDECODABLE, 0, 3)]
    assert out.heads["a"].chain.seq == 2 and out.next_offsets == {0: 5}


def test_messages_are_folded_in_partition_offset_order():
    recs = chain({"a": 3})
    batch = msgs(recs)
    out = fold({}, list(reversed(batch)))
    assert out.findings == [] and out.heads["a"].chain.seq == 3


def test_first_and_last_time_track_occurred_at_extremes():
    recs = chain({"a": 2})
    rows = [record_row(r.value, 0, i) for i, r in enumerate(recs)]
    t1 = rows[0][RECORD_COLUMNS.index("occurred_at")]
    head = ProjectedHead(Head.genesis("a"), 0, t1 + timedelta(days=1), t1 - timedelta(days=1))
    out = fold({"a": head}, [Record(0, 0, rows[0])])
    assert out.heads["a"].first_at == t1 and out.heads["a"].last_at == t1


def test_fold_does_not_modify_the_heads_it_is_given():
    recs = chain({"a": 2})
    first = fold({}, msgs(recs[:1]))
    given = dict(first.heads)
    fold(given, msgs(recs[1:], first_offset=1))
    assert given == first.heads


def test_a_late_seq_is_out_of_order_across_batches_through_the_stored_head():
    # The heads table keeps the seqs a gap skipped: a head read back from its row tells a
    # late seq (out_of_order) from one seen before (duplicate) in a later batch.
    recs = chain({"a": 5})
    first = fold({}, msgs([recs[0], recs[3]]))
    assert kinds(first) == [(GAP, "a", 4)]
    row = first.heads["a"].row()
    assert row[ProjectedHead.COLUMNS.index("missing")] == "2-3"
    stored = {"a": ProjectedHead.of_row(row)}
    assert stored["a"].chain.missing == ((2, 3),)
    second = fold(stored, msgs([recs[2], recs[2], recs[4]], first_offset=2))
    assert kinds(second) == [(OUT_OF_ORDER, "a", 3), (DUPLICATE, "a", 3)]
    head = second.heads["a"]
    assert head.row()[ProjectedHead.COLUMNS.index("missing")] == "2-2"
    assert ProjectedHead.of_row(head.row()) == ProjectedHead(
        Head("a", 5, recs[4].record_digest, missing=((2, 2),)), 5, head.first_at, head.last_at)


def test_a_head_without_missing_seqs_stores_empty_text():
    out = fold({}, msgs(chain({"a": 2})))
    row = out.heads["a"].row()
    assert row[ProjectedHead.COLUMNS.index("missing")] == ""
    assert ProjectedHead.of_row(row).chain.missing == ()


def test_record_row_keeps_bytes_verbatim_and_matches_the_column_types():
    rec = chain({"a": 1}, response=bytes(range(256)))[0]
    row = record_row(rec.value, 2, 7)
    assert len(row) == len(RECORD_COLUMNS) == len(RECORD_TYPES)
    col = dict(zip(RECORD_COLUMNS, row))
    assert (col["log_partition"], col["log_offset"], col["stream"], col["seq"]) == (2, 7, "a", 1)
    assert col["record_bytes"] == rec.value
    assert col["response_bytes"] == bytes(range(256))
    assert col["record_digest"] == rec.record_digest and col["prev_digest"] == GENESIS


def test_record_row_carries_the_contract_2_fields():
    from evidence_contract import GENESIS as G, encode, seal
    from evidence_contract.vectors import committed_event, truncated_event

    for body in (committed_event(), truncated_event()):
        value = encode("EvidenceRecord", seal(body, 0, G, 1, {"writer_id": "w",
                                                              "transactional_id": "t",
                                                              "version": "v"}, 0, 0))
        col = dict(zip(RECORD_COLUMNS, record_row(value, 0, 0)))
        assert col["seed"] == int(body["replay"]["seed"]) and type(col["seed"]) is int
        assert col["truncated"] is body["capture"]["truncated"]
        assert (col["request_length"], col["response_length"]) == (
            body["request_length"], body["response_length"])
        assert (col["input_bytes"], col["prompt_bytes"]) == (body["input_bytes"],
                                                             body["prompt_bytes"])
        assert (col["input_digest"], col["prompt_digest"]) == (body["input_digest"],
                                                               body["prompt_digest"])
    assert RECORD_TYPES[RECORD_COLUMNS.index("seed")] == "numeric"
    assert RECORD_COLUMNS[-1] == "record_bytes"


@pytest.mark.parametrize("value", [b"", b"\xc3\x01", b"\xc3\x01" + b"\x00" * 8 + b"x"])
def test_short_or_unknown_messages_are_undecodable(value):
    assert isinstance(decode_message(0, 0, value), Undecodable)


def _reference(heads, messages):
    """advance() record by record, in position order: what fold must give."""
    from evidence_contract.chain import Link, advance

    from projections.fold import SEQ, PREV_DIGEST, RECORD_DIGEST, STREAM

    at_us = RECORD_COLUMNS.index("occurred_at_us")
    chain_heads = {s: h.chain for s, h in heads.items()}
    found = []
    for m in sorted(messages, key=lambda m: (m.partition, m.offset)):
        if isinstance(m, Undecodable):
            found.append(("undecodable", None, None))
            continue
        r = m.row
        s = r[STREAM]
        head, f = advance(chain_heads.get(s) or Head.genesis(s),
                          Link(s, r[SEQ], r[PREV_DIGEST], r[RECORD_DIGEST], r[at_us]))
        chain_heads[s] = head
        if f:
            found.append((f.kind, f.stream, f.seq, f.detail))
    return chain_heads, found


def test_the_fold_is_advance_record_by_record_whatever_the_order_and_batches():
    """fold keeps a stream's head as a tuple while records follow it (no Head, no Link per
    record): the heads and findings are those of advance() on each record, for logs with
    gaps, late records, duplicates and broken links, split into any batches."""
    from hypothesis import given, settings, strategies as st

    recs = chain({"a": 12, "b": 9})
    broken = seal_record(make_body("a", 5), 5, b"\x07" * 32)
    pool = recs + [broken, recs[3], recs[14]]

    @settings(max_examples=150, deadline=None)
    @given(st.lists(st.sampled_from(range(len(pool))), max_size=30),
           st.lists(st.integers(1, 8), min_size=1, max_size=6))
    def check(picks, cuts):
        messages = [decode_message(0, i, pool[k].value) for i, k in enumerate(picks)]
        heads, findings, start = {}, [], 0
        for n in cuts + [len(messages)]:
            batch = messages[start:start + n]
            start += n
            out = fold(heads, batch)
            heads = {**heads, **{s: ProjectedHead.of_row(h.row()) for s, h in out.heads.items()}}
            findings += [(f.kind, f.stream, f.seq, f.detail) for f in out.findings]
            if start >= len(messages):
                break
        ref_heads, ref_findings = _reference({}, messages)
        assert findings == [f for f in ref_findings]
        assert {s: (h.chain.seq, h.chain.digest, h.chain.missing) for s, h in heads.items()} == {
            s: (h.seq, h.digest, h.missing) for s, h in ref_heads.items()}

    check()
