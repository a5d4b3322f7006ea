"""Redaction as a projection (pure): the served body columns masked by JSON path and pattern,
record_bytes verbatim, encrypted rows untouched, and the audit's recompute agrees."""

from __future__ import annotations

import json

import pytest

from audit.verify import Indexed, compare_projection
from evidence_contract import GENESIS, encode, seal
from evidence_contract.vectors import committed_event
from projections.redact import RedactionError, apply, parse
from projections.rows import RECORD_COLUMNS, record_row

W = {"writer_id": "w", "transactional_id": "tx", "version": "0"}
POLICY = parse({"json_paths": ["$.messages[*].content"], "patterns": ["4711-[0-9]{4}"]})


def _value(**over) -> bytes:
    body = {**committed_event(), **over}
    return encode("EvidenceRecord", seal(body, 0, GENESIS, 1, W, 0, 0))


def test_masks_the_served_bodies_never_the_record_bytes():
    req = json.dumps({"model": "m", "messages": [{"role": "user", "content": "I am Ada"}],
                      "note": "acct 4711-0815"}).encode()
    value = _value(request_bytes=req)
    row = record_row(value, 0, 0, POLICY)
    i = RECORD_COLUMNS.index("request_bytes")
    masked = json.loads(row[i])
    assert masked["messages"][0]["content"] == "[REDACTED]"
    assert masked["note"] == "acct [REDACTED]"
    assert row[-1] == value  # the log message verbatim
    plain = record_row(value, 0, 0)
    assert [c for c, a, b in zip(RECORD_COLUMNS, row, plain) if a != b] == ["request_bytes"]


def test_the_audit_recomputes_with_the_same_policy():
    import hashlib

    value = _value()
    row = record_row(value, 0, 0, POLICY)
    index = {(0, 0): Indexed(row[2], row[3], hashlib.sha256(value).digest())}
    assert compare_projection(index, [(row, record_row(value, 0, 0, POLICY))]) == []
    [f] = compare_projection(index, [(row, record_row(value, 0, 0))])  # without: altered
    assert f.kind == "projection_altered"


def test_streams_filter_digest_and_bad_policies():
    only = parse({"streams": ["other:*"], "patterns": ["."]})
    row = record_row(_value(), 0, 0)
    assert apply(row, only) == row
    assert POLICY.digest != only.digest and len(POLICY.digest) == 32
    assert parse(POLICY.canonical()).digest == POLICY.digest
    for bad in ({"json_paths": ["messages"]}, {"patterns": ["("]}, {"unknown": 1}):
        with pytest.raises(RedactionError):
            parse(bad)


EMAIL = "ada.lovelace@example.com"
EMAIL_POLICY = parse({"json_paths": ["$.choices[*].delta.content", "$.messages[*].content"],
                      "patterns": [r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[a-z]{2,}"]})


def _sse(*pieces: str) -> bytes:
    """An OpenAI chat completion stream whose deltas carry ``pieces``, as the wire has it."""
    events = [json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                          "choices": [{"index": 0, "delta": {"content": p}}]})
              for p in pieces]
    return b"".join(b"data: " + e.encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def _joined(body: bytes) -> str:
    """What a reader of the stream reconstructs: every delta's content, joined."""
    text = []
    for line in body.split(b"\n"):
        if line.startswith(b"data: {"):
            for choice in json.loads(line[6:])["choices"]:
                text.append(choice["delta"].get("content") or "")
    return "".join(text)


def _streamed_value(body: bytes, *, streamed: bool = True,
                    content_type: str = "text/event-stream; charset=utf-8") -> bytes:
    capture = {**committed_event()["capture"], "streamed": streamed}
    return _value(response_bytes=body, response_length=len(body),
                  response_content_type=content_type, capture=capture)


def test_an_address_split_across_stream_deltas_is_not_served():
    body = _sse("Write to ", "ada.lo", "velace@exam", "ple.com", " today.")
    assert _joined(body) == f"Write to {EMAIL} today."
    # What masking each delta would serve: every piece passes the pattern and the path does
    # not apply to SSE, so the joined "redacted" deltas give the address back.
    assert EMAIL in _joined(EMAIL_POLICY.mask_bytes(body))

    value = _streamed_value(body)
    row = record_row(value, 0, 0, EMAIL_POLICY)
    served = row[RECORD_COLUMNS.index("response_bytes")]
    assert served == b"[REDACTED]"
    assert b"lovelace" not in served and b"ada.lo" not in served
    assert row[-1] == value  # the log message verbatim: the digests still prove the record
    assert row[RECORD_COLUMNS.index("response_length")] == len(body)
    assert row[RECORD_COLUMNS.index("response_digest")] == committed_event()["response_digest"]
    # The request is JSON, not a stream: masked by path and pattern as before.
    request = json.loads(row[RECORD_COLUMNS.index("request_bytes")])
    assert request["messages"][0]["content"] == "[REDACTED]" and request["seed"] == 42


def test_a_stream_is_known_by_its_content_type_when_the_producer_did_not_flag_it():
    body = _sse("mail ", "ada.lo", "velace@example.com")
    for content_type in ("text/event-stream", "Text/Event-Stream; charset=utf-8",
                         "application/x-ndjson"):
        row = record_row(_streamed_value(body, streamed=False, content_type=content_type),
                         0, 0, EMAIL_POLICY)
        assert row[RECORD_COLUMNS.index("response_bytes")] == b"[REDACTED]", content_type
    # A plain JSON response is masked in place, field by field, as before.
    plain = json.dumps({"choices": [{"delta": {"content": EMAIL}, "note": f"to {EMAIL}"}]})
    row = record_row(_streamed_value(plain.encode(), streamed=False,
                                     content_type="application/json"), 0, 0, EMAIL_POLICY)
    assert json.loads(row[RECORD_COLUMNS.index("response_bytes")]) == {
        "choices": [{"delta": {"content": "[REDACTED]"}, "note": "to [REDACTED]"}]}


def test_an_uncovered_stream_is_served_as_recorded_and_mask_response_agrees():
    body = _sse("ada.lo", "velace@example.com")
    value = _streamed_value(body)
    other = parse({**EMAIL_POLICY.canonical(), "streams": ["someone-else:*"]})
    assert record_row(value, 0, 0, other) == record_row(value, 0, 0)
    assert EMAIL_POLICY.mask_response(body, False, "application/json") == \
        EMAIL_POLICY.mask_bytes(body)
    assert EMAIL_POLICY.mask_response(body, True, None) == b"[REDACTED]"


def test_the_audit_recomputes_a_masked_stream_clean_and_an_unmasked_one_altered():
    import hashlib

    value = _streamed_value(_sse("ada.lo", "velace@example.com"))
    row = record_row(value, 0, 0, EMAIL_POLICY)
    index = {(0, 0): Indexed(row[2], row[3], hashlib.sha256(value).digest())}
    assert compare_projection(index, [(row, record_row(value, 0, 0, EMAIL_POLICY))]) == []
    deltas_masked = list(row)
    deltas_masked[RECORD_COLUMNS.index("response_bytes")] = EMAIL_POLICY.mask_bytes(
        _sse("ada.lo", "velace@example.com"))
    [f] = compare_projection(index, [(tuple(deltas_masked),
                                      record_row(value, 0, 0, EMAIL_POLICY))])
    assert f.kind == "projection_altered"


@pytest.mark.parametrize("name, text, words", [
    ("policy.yaml", "streams: [unclosed\n", "not YAML"),
    ("policy.json", "{not json", "not JSON"),
])
def test_a_malformed_policy_file_is_a_redaction_error_naming_the_file(tmp_path, name, text, words):
    from projections.redact import load

    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RedactionError, match=words) as err:
        load(path)
    assert str(path) in str(err.value)
