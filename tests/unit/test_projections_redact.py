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
