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
        body[stream] = hashlib.sha256(b"".join(
            b"".join(b"" if r[col(c)] is None else hashlib.sha256(
                r[col(c)].encode("utf-8") if c == "params" else r[col(c)]).digest() for c in MASKED)
            for r in mine)).digest()
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
