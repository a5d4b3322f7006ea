"""projections.summary: the per-stream digests a bulk load folds as it writes its rows (the
same bytes as RecordStore.summaries' SQL; test_projections_bulk checks them against it)."""

from __future__ import annotations

import hashlib

import pytest

from projections.columns import RECORD_COLUMNS
from projections.redact import MASKED
from projections.summary import RunningSummaries


def _row(stream: str, seq: int, partition: int, offset: int, **values) -> tuple:
    cols = {"stream": stream, "seq": seq, "log_partition": partition, "log_offset": offset,
            "record_digest": hashlib.sha256(f"{stream}/{seq}".encode()).digest(),
            "record_bytes": f"record {stream} {seq}".encode(),
            "request_bytes": b"req", "response_bytes": b"resp %d" % seq, "params": "{\"t\": \"é\"}",
            **values}
    return tuple(cols.get(c) for c in RECORD_COLUMNS)


def _body(r: tuple) -> bytes:
    """A row's served bodies, as the SQL digests them: per masked column its length (8 bytes,
    big-endian; all ones for a null) and its bytes, one sha256."""
    col = RECORD_COLUMNS.index
    out = b""
    for c in MASKED:
        v = r[col(c)]
        if v is None:
            out += b"\xff" * 8
            continue
        v = v.encode("utf-8") if c == "params" else v
        out += len(v).to_bytes(8, "big") + v
    return hashlib.sha256(out).digest()


def _expected(rows: list[tuple], bodies: bool):
    """What the SQL computes: per stream, rows in (seq, partition, offset) order."""
    col = RECORD_COLUMNS.index
    out, body = {}, {}
    for stream in {r[col("stream")] for r in rows}:
        mine = sorted((r for r in rows if r[col("stream")] == stream),
                      key=lambda r: (r[col("seq")], r[col("log_partition")], r[col("log_offset")]))
        out[stream] = (len(mine),
                       hashlib.sha256(b"".join(r[col("record_digest")] for r in mine)).digest(),
                       hashlib.sha256(b"".join(hashlib.sha256(r[col("record_bytes")]).digest()
                                               for r in mine)).digest())
        body[stream] = hashlib.sha256(b"".join(_body(r) for r in mine)).digest()
    return out, body if bodies else None


@pytest.mark.parametrize("bodies", [True, False])
def test_rows_folded_as_they_come_give_the_summaries_of_the_sorted_rows(bodies):
    a = [_row("a", s, 0, s - 1) for s in range(1, 6)]
    b = [_row("b", s, 1, s - 1, params=None, error_bytes=b"boom") for s in range(1, 4)]
    s = RunningSummaries(bodies)
    s.add([a[0], b[0], a[1]])  # streams interleaved, each in its own order, over batches
    s.add([b[1], a[2], a[3], b[2], a[4]])
    assert s.usable
    assert s.result() == _expected(a + b, bodies)


def test_a_stream_whose_seqs_do_not_rise_along_the_log_gives_no_summary():
    s = RunningSummaries(True)
    s.add([_row("a", 1, 0, 0), _row("a", 2, 0, 1)])
    s.add([_row("a", 2, 0, 2)])  # the same seq again, later in the log: still in order
    assert s.usable
    s.add([_row("a", 1, 0, 3)])  # a seq going back: the SQL would sort it before
    assert not s.usable
    s.add([_row("a", 3, 0, 4)])
    assert not s.usable
    with pytest.raises(AssertionError):
        s.result()


def test_a_row_without_a_record_digest_gives_no_summary():
    s = RunningSummaries(False)
    s.add([_row("a", 1, 0, 0, record_digest=None)])
    assert not s.usable


def test_a_body_moved_to_another_column_or_split_differently_changes_the_digest():
    """The served bodies' digest is unambiguous: the same bytes in another column (a
    response served as an error), or cut at another place between two columns, differ."""
    def digest(**values) -> bytes:
        s = RunningSummaries(True)
        s.add([_row("a", 1, 0, 0, params=None, **values)])
        body = s.result()[1]
        assert body is not None
        return body["a"]

    as_response = digest(response_bytes=b"the answer", error_bytes=None)
    assert as_response != digest(response_bytes=None, error_bytes=b"the answer")
    assert digest(request_bytes=b"ab", response_bytes=b"c") != digest(request_bytes=b"a",
                                                                       response_bytes=b"bc")
    assert digest(response_bytes=b"") != digest(response_bytes=None)
