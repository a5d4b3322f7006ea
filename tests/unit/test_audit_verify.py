"""The audit's verification core on records built in memory: each kind of damage is found
and named."""

from __future__ import annotations

import copy

from audit import LogAuditor, compare_projection
from projections.rows import RECORD_COLUMNS, record_row
from evidence_contract import (
    GENESIS,
    content_key,
    encode,
    new_event_id,
    output_digest,
    response_digest,
    seal,
)
from evidence_contract.outputs import EXTRACTED, NO_TEXT, UNKNOWN_FORMAT
from evidence_contract.vectors import committed_event

WRITER = {"writer_id": "w", "transactional_id": "t", "version": "0.1.0"}


def body(stream: str, i: int) -> dict:
    b = committed_event()
    req = f'{{"n": {i}}}'.encode()
    resp = f'{{"answer": {i}}}'.encode()
    b.update(stream=stream, event_id=new_event_id(), request_bytes=req,
             content_key=content_key(req), request_length=len(req), response_bytes=resp,
             response_digest=response_digest(resp), response_length=len(resp),
             output_digest=None)
    return b


def chain(stream: str, n: int, start_seq: int = 0, prev: bytes = GENESIS) -> list[dict]:
    out = []
    for i in range(n):
        rec = seal(body(stream, start_seq + i), start_seq + i, prev, 1_700_000_000_000_000 + i,
                   WRITER, 0, i)
        prev = rec["seal"]["record_digest"]
        out.append(rec)
    return out


def audit(values: list[bytes], heads=None) -> LogAuditor:
    a = LogAuditor(keep_index=True)
    for off, v in enumerate(values):
        a.add(0, off, v)
    if heads is not None:
        a.check_heads(heads)
    return a


def enc(records) -> list[bytes]:
    return [encode("EvidenceRecord", r) for r in records]


def kinds(a: LogAuditor) -> list[tuple[str, int | None]]:
    return [(f.kind, f.seq) for f in a.findings]


def test_a_clean_chain_has_no_findings():
    recs = chain("s", 5)
    a = audit(enc(recs), heads={"s": (5, recs[-1]["seal"]["record_digest"])})
    assert a.findings == [] and a.streams["s"].records == 5


def test_gap_duplicate_and_broken_link_are_named():
    recs = chain("s", 4)
    values = enc(recs)
    # The chain step: a gap is one finding; the link across it is not checked.
    assert kinds(audit([values[0], values[2], values[3]])) == [("gap", 3)]
    assert kinds(audit([values[0], values[1], values[1], values[2]])) == [("duplicate", 2)]
    forged = seal(body("s", 9), 2, b"\x07" * 32, 1_700_000_000_000_009, WRITER, 0, 9)
    assert kinds(audit([values[0], values[1], encode("EvidenceRecord", forged)])) == [
        ("broken_link", 3)]


def test_a_lower_seq_not_seen_before_is_out_of_order():
    values = enc(chain("s", 3))
    a = audit([values[0], values[2], values[1], values[1]])
    assert kinds(a) == [("gap", 3), ("out_of_order", 2), ("duplicate", 2)]
    assert a.streams["s"].head.seq == 3 and a.streams["s"].head.missing == ()


def test_altered_bytes_break_the_record_digest():
    recs = chain("s", 2)
    tampered = copy.deepcopy(recs[1])
    tampered["body"]["model_id"] = "someone-else"
    a = audit([enc(recs)[0], encode("EvidenceRecord", tampered)])
    assert kinds(a) == [("record_digest_mismatch", 2)]


def test_altered_response_is_found_by_its_digest_and_the_chain():
    recs = chain("s", 1)
    tampered = copy.deepcopy(recs[0])
    tampered["body"]["response_bytes"] = b'{"answer": 9}'  # forged, of the same length
    assert kinds(audit(enc([tampered]))) == [("record_digest_mismatch", 1),
                                             ("response_digest_mismatch", 1)]


def test_content_key_must_recompute_from_the_request():
    b = body("s", 0)
    b["request_bytes"] = b"other bytes"
    b["request_length"] = len(b"other bytes")
    rec = seal(b, 0, GENESIS, 1, WRITER, 0, 0)
    assert kinds(audit(enc([rec]))) == [("content_key_mismatch", 1)]


def test_input_prompt_and_chunk_digests_must_recompute_from_their_bytes():
    b = body("s", 0)
    assert b["input_bytes"] and b["prompt_bytes"] and b["retrieval"][0]["chunk_bytes"]
    assert kinds(audit(enc([seal(b, 0, GENESIS, 1, WRITER, 0, 0)]))) == []
    b["input_bytes"] = b"said something else"
    b["prompt_bytes"] = b"rendered otherwise"
    b["retrieval"] = [{**b["retrieval"][0], "chunk_bytes": b"another chunk"}]
    rec = seal(b, 0, GENESIS, 1, WRITER, 0, 0)
    assert kinds(audit(enc([rec]))) == [("input_digest_mismatch", 1),
                                         ("prompt_digest_mismatch", 1),
                                         ("chunk_digest_mismatch", 1)]


def test_lengths_must_be_those_of_the_bytes_kept():
    b = body("s", 0)
    b["request_length"] += 1
    b["response_length"] = 0
    a = audit(enc([seal(b, 0, GENESIS, 1, WRITER, 0, 0)]))
    assert kinds(a) == [("length_mismatch", 1), ("length_mismatch", 1)]
    assert "request_length" in a.findings[0].detail and "response_length" in a.findings[1].detail


def test_a_rogue_record_at_the_tail_is_not_in_the_writer_heads():
    recs = chain("s", 3)
    rogue = chain("s", 1, start_seq=3, prev=recs[-1]["seal"]["record_digest"])
    a = audit(enc(recs + rogue), heads={"s": (3, recs[-1]["seal"]["record_digest"])})
    assert kinds(a) == [("not_sealed_by_writer", 4)]
    a = audit(enc(recs), heads={})
    assert kinds(a) == [("not_sealed_by_writer", 3)]


def answering(b: dict, text: str, digest_of: str | None = None, endpoint: str | None = None,
              response: bytes | None = None) -> dict:
    """``b`` answering ``text`` in the OpenAI chat format (or ``response``), sealing the
    output_digest of ``digest_of`` (default ``text``), at ``endpoint`` if given."""
    resp = response if response is not None else (
        '{"choices":[{"index":0,"message":{"content":"%s"}}]}' % text).encode()
    b.update(response_bytes=resp, response_digest=response_digest(resp),
             response_length=len(resp), output_digest=output_digest(digest_of or text))
    if endpoint is not None:
        b["provider"] = {**b["provider"], "endpoint": endpoint}
    return b


def _one(b: dict) -> LogAuditor:
    return audit(enc([seal(b, 0, GENESIS, 1, WRITER, 0, 0)]))


def test_output_digest_recomputes_from_the_contracts_output_text():
    a = _one(answering(body("s", 0), "Hi!"))
    assert kinds(a) == [] and a.output_checks[EXTRACTED] == 1
    a = _one(answering(body("s", 0), "Hi!", digest_of="Bye!"))
    assert kinds(a) == [("output_digest_mismatch", 1)]
    assert "does not recompute" in a.findings[0].detail


def test_an_output_digest_without_output_text_is_a_mismatch():
    a = _one(answering(body("s", 0), "Hi!", response=b'{"choices":[]}'))
    assert kinds(a) == [("output_digest_mismatch", 1)] and a.output_checks[NO_TEXT] == 1
    assert "holds no output text" in a.findings[0].detail


def test_an_output_digest_of_an_unknown_wire_format_is_unverifiable_not_skipped():
    a = _one(answering(body("s", 0), "Hi!", endpoint="https://llm.example/v2/generate"))
    assert kinds(a) == [("output_digest_unverifiable", 1)]
    assert a.output_checks == {EXTRACTED: 0, NO_TEXT: 0, UNKNOWN_FORMAT: 1}
    assert "cannot be recomputed" in a.findings[0].detail
    assert "/v2/generate" in a.findings[0].detail
    a = _one(answering(body("s", 0), "Hi!", endpoint="http://[::1/v1/chat/completions"))
    assert kinds(a) == [("output_digest_unverifiable", 1)] and "does not parse" in \
        a.findings[0].detail


def test_an_output_digest_of_a_dropped_response_is_not_recomputed():
    b = answering(body("s", 0), "Hi!")
    b.update(response_bytes=None)
    a = _one(b)
    assert kinds(a) == [] and sum(a.output_checks.values()) == 0


def test_undecodable_messages_are_findings():
    assert kinds(audit([b"not avro at all"])) == [("undecodable", None)]


def _rows(values):
    return [(record_row(v, 0, off), record_row(v, 0, off)) for off, v in enumerate(values)]


def test_projection_comparison():
    values = enc(chain("s", 3))
    index = audit(values).index
    assert compare_projection(index, _rows(values)) == []

    rows = _rows(values)
    del rows[1]
    assert [(f.kind, f.seq) for f in compare_projection(index, rows)] == [
        ("projection_missing", 2)]

    rows = _rows(values)
    row = list(rows[0][0])
    row[RECORD_COLUMNS.index("response_bytes")] = b"edited response"
    rows[0] = (tuple(row), rows[0][1])
    found = compare_projection(index, rows)
    assert [(f.kind, f.seq) for f in found] == [("projection_altered", 1)]
    assert "response_bytes" in found[0].detail

    rows = _rows(values)
    a, b = list(rows[0][0]), list(rows[1][0])
    a[3], b[3] = b[3], a[3]  # seq swapped between two rows: reordered
    rows[0], rows[1] = (tuple(a), rows[0][1]), (tuple(b), rows[1][1])
    assert {f.kind for f in compare_projection(index, rows)} == {"projection_altered"}

    extra = _rows(values) + [(record_row(values[0], 5, 99), record_row(values[0], 5, 99))]
    assert [f.kind for f in compare_projection(index, extra)] == ["projection_extra"]


def test_a_rogue_copy_the_writer_sealed_over_is_named_by_its_position():
    # A rogue appends seq 4 (a valid continuation); the writer, not knowing, seals its own
    # seq 4 and then seq 5 on top of it. The chain forks at 4 and continues from the writer's.
    recs = chain("s", 3)
    tail = recs[-1]["seal"]["record_digest"]
    rogue = chain("s", 1, start_seq=3, prev=tail)
    mine = chain("s", 2, start_seq=3, prev=tail)
    a = audit(enc(recs + rogue + mine),
              heads={"s": (5, mine[-1]["seal"]["record_digest"])})
    assert [(f.kind, f.seq, f.offset) for f in a.findings] == [
        ("duplicate", 4, 4), ("not_sealed_by_writer", 4, 3)]

    # Before the writer seals on top of its copy, its head names which copy is its own.
    a = audit(enc(recs + rogue + mine[:1]),
              heads={"s": (4, mine[0]["seal"]["record_digest"])})
    assert [(f.kind, f.seq, f.offset) for f in a.findings] == [
        ("duplicate", 4, 4), ("not_sealed_by_writer", 4, 3)]


def test_projection_comparison_stops_at_the_window():
    values = enc(chain("s", 4))
    index = audit(values).index
    rows = _rows(values)[:2]  # the projector has got to offset 2; the log to 4
    assert compare_projection(index, rows, window={0: 2}) == []
    assert [f.kind for f in compare_projection(index, rows)] == ["projection_missing"] * 2


def test_stream_audit_from_projection_rows():
    from audit.stream_audit import StreamAudit

    recs = chain("s", 3)
    values = enc(recs)
    rows = [record_row(v, 0, off) for off, v in enumerate(values)]
    head = (3, recs[-1]["seal"]["record_digest"])

    sa = StreamAudit("s")
    sa.add_rows(rows[:2])
    sa.add_rows(rows[2:])
    sa.check_head(head)
    assert sa.to_dict()["clean"] and sa.to_dict()["records"] == 3
    assert sa.to_dict()["output_digest_checks"] == {EXTRACTED: 0, NO_TEXT: 0, UNKNOWN_FORMAT: 0}

    sa = StreamAudit("s")  # the last row deleted: the head names it
    sa.add_rows(rows[:2])
    sa.check_head(head)
    assert [(f.kind, f.seq) for f in sa.findings] == [("head_mismatch", 2)]

    a, b = list(rows[0]), list(rows[1])
    a[3], b[3] = b[3], a[3]
    sa = StreamAudit("s")
    sa.add_rows([tuple(a), tuple(b), rows[2]])
    sa.check_head(head)
    assert sa.to_dict()["findings_by_kind"] == {"projection_altered": 2}


def test_an_event_id_in_two_streams_is_a_finding_once():
    a = chain("ten-a:chat", 2)
    b = chain("ten-b:chat", 1)
    b[0]["body"]["event_id"] = a[1]["body"]["event_id"]
    b = [seal(b[0]["body"], 0, GENESIS, 1_700_000_000_000_000 + 5, WRITER, 0, 9)]
    values = enc(a) + enc(b) + enc(b)  # b's record twice: the copy is a chain duplicate
    found = audit(values).findings
    assert [(f.kind, f.stream, f.seq, f.offset) for f in found] == [
        ("duplicate_event_id", "ten-b:chat", 1, 2), ("duplicate", "ten-b:chat", 1, 3)]
    # audited in any order the same record is flagged: the first sealed is the original
    found = audit(enc(b) + enc(a)).findings
    assert [(f.kind, f.stream) for f in found] == [("duplicate_event_id", "ten-b:chat")]


def test_a_stream_audit_checks_event_ids_within_its_stream():
    a = chain("ten-a:chat", 1)
    other = chain("ten-b:chat", 1)
    other[0]["body"]["event_id"] = a[0]["body"]["event_id"]
    other = [seal(other[0]["body"], 0, GENESIS, 1_700_000_000_000_009, WRITER, 0, 9)]
    auditor = LogAuditor(stream="ten-a:chat")
    for off, v in enumerate(enc(a) + enc(other)):
        auditor.add(0, off, v)
    assert auditor.findings == []
