"""Reading the live projection for comparison with the log (the audit's only psycopg module)."""

from __future__ import annotations

from typing import Any, Iterator

import psycopg

from audit.errors import AuditError
from projections.rows import RECORD_COLUMNS, record_row
from evidence_contract import DecodeError


def projection_rows(database_url: str, views: str = "evidence", stream: str | None = None,
                    redaction: Any = None
                    ) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...] | None]]:
    """Yield ``(row, recomputed)`` for every row of ``<views>.records`` (or one stream's);
    recomputed with the projection's ``redaction`` policy (:mod:`projections.redact`)."""
    cols = ", ".join(RECORD_COLUMNS)
    where, params = ("where stream = %s", (stream,)) if stream else ("", ())
    try:
        with psycopg.connect(database_url) as conn:
            # A server-side cursor: a large projection is streamed, not loaded.
            with conn.cursor(name="audit_rows") as cur:
                cur.itersize = 2000
                cur.execute(f'select {cols} from "{views}".records {where} '
                            f"order by log_partition, log_offset", params)
                for row in cur:
                    try:
                        recomputed = record_row(bytes(row[-1]), row[0], row[1], redaction)
                    except DecodeError:
                        recomputed = None
                    yield row, recomputed
    except psycopg.Error as e:
        raise AuditError(f"PostgreSQL: {e}") from e


def recorded_redaction(database_url: str, views: str = "evidence") -> tuple[bool, Any]:
    """``(recorded, policy)``: the redaction policy the live generation records (its
    ``redaction`` view), or ``(False, None)`` when it records none (an older generation)."""
    from projections.redact import parse

    try:
        with psycopg.connect(database_url) as conn:
            if not conn.execute("select to_regclass(%s) is not null",
                                (f'"{views}".redaction',)).fetchone()[0]:
                return False, None
            row = conn.execute(f'select policy from "{views}".redaction').fetchone()
    except psycopg.Error as e:
        raise AuditError(f"PostgreSQL: {e}") from e
    if row is None:
        return False, None
    return True, None if row[0] is None else parse(row[0])


def locate(database_url: str, stream: str, seq: int, views: str = "evidence"
           ) -> tuple[int, int] | None:
    """The log position of ``stream`` #``seq`` (the first, if the log holds it twice)."""
    try:
        with psycopg.connect(database_url) as conn:
            row = conn.execute(
                f'select log_partition, log_offset from "{views}".records '
                "where stream = %s and seq = %s order by log_partition, log_offset limit 1",
                (stream, seq)).fetchone()
    except psycopg.Error as e:
        raise AuditError(f"PostgreSQL: {e}") from e
    return (row[0], row[1]) if row else None


def projected_positions(database_url: str, views: str, topic: str) -> dict[int, int]:
    """The projector's next offset per partition of ``topic`` (stored with its rows)."""
    try:
        with psycopg.connect(database_url) as conn:
            rows = conn.execute(f'select partition, next_offset from "{views}".positions '
                                "where topic = %s", (topic,)).fetchall()
    except psycopg.Error as e:
        raise AuditError(f"PostgreSQL: {e}") from e
    return {p: n for p, n in rows}


def erasure_of(database_url: str, stream: str, seq: int, views: str = "evidence"
               ) -> tuple[int, str, bytes] | None:
    """(erased_at µs, request id, signed receipt) of the earliest erasure of the key that
    sealed ``stream`` #``seq``; None when the record is plain or its key is live."""
    try:
        with psycopg.connect(database_url) as conn:
            row = conn.execute(
                f'select e.erased_at_us, e.request_id, e.note from "{views}".records r '
                f'join "{views}".erasures e on e.key_id = r.key_id '
                "where r.stream = %s and r.seq = %s "
                "order by r.log_partition, r.log_offset, e.erased_at_us limit 1",
                (stream, seq)).fetchone()
    except psycopg.Error as e:
        raise AuditError(f"PostgreSQL: {e}") from e
    return None if row is None else (int(row[0]), row[1], bytes(row[2]))


# --- A range of one stream (audit.range_run): where its records are, its checkpoints, its
# tree's nodes, its erasures. Nothing read here is trusted: the range audit checks it all.


def range_rows(database_url: str, stream: str, first: int, last: int,
               views: str = "evidence") -> list[tuple[int, int, int]]:
    """``(seq, log_partition, log_offset)`` of every row of ``stream`` with seq in
    ``first..last`` (every copy of a seq the projection holds), in log order."""
    return _fetch(database_url,
                  f'select seq, log_partition, log_offset from "{views}".records '
                  "where stream = %s and seq between %s and %s "
                  "order by log_partition, log_offset", (stream, first, last))


def time_span(database_url: str, stream: str, since: int | None, until: int | None,
              views: str = "evidence") -> tuple[int, int] | None:
    """(first, last) seq of ``stream`` sealed in ``[since, until)`` (µs), None when none."""
    row = _fetch(database_url,
                 f'select min(seq), max(seq) from "{views}".records where stream = %s '
                 "and occurred_at_us >= %s and occurred_at_us < %s",
                 (stream, -(1 << 63) if since is None else since,
                  (1 << 63) - 1 if until is None else until))[0]
    return None if row[0] is None else (int(row[0]), int(row[1]))


def head_seq(database_url: str, stream: str, views: str = "evidence") -> int | None:
    """The projection's head seq of ``stream``, None when it has none."""
    rows = _fetch(database_url, f'select seq from "{views}".heads where stream = %s',
                  (stream,))
    return int(rows[0][0]) if rows else None


def stream_checkpoints(database_url: str, stream: str, views: str = "evidence",
                       limit: int = 20) -> list[tuple[int, bytes]]:
    """The ``limit`` largest checkpoints of ``stream``: ``(tree_size, note)``, each note
    followed by the cosignature lines held for it (as ``GET /streams/{s}/checkpoint``)."""
    rows = _fetch(database_url,
                  f'select c.tree_size, c.note, array(select s.line from "{views}".cosignatures '
                  "s where s.stream = c.stream and s.tree_size = c.tree_size "
                  "order by s.witness, s.key_id) "
                  f'from "{views}".checkpoints c where c.stream = %s '
                  "order by c.tree_size desc limit %s", (stream, limit))
    return [(int(size), bytes(note) + "".join(lines or []).encode("utf-8"))
            for size, note, lines in rows]


def tree_nodes(database_url: str, stream: str, nodes: list[tuple[int, int]],
               views: str = "evidence") -> dict[tuple[int, int], bytes]:
    """The stored hashes of ``nodes`` ``(level, index)`` of ``stream``'s tree."""
    out: dict[tuple[int, int], bytes] = {}
    for i in range(0, len(nodes), 10_000):
        chunk = nodes[i:i + 10_000]
        for level, idx, h in _fetch(
                database_url,
                f'select n.level, n.idx, n.hash from "{views}".tree_nodes n '
                "join unnest(%s::int[], %s::bigint[]) w(level, idx) "
                "on n.level = w.level and n.idx = w.idx where n.stream = %s",
                ([lv for lv, _ in chunk], [ix for _, ix in chunk], stream)):
            out[(int(level), int(idx))] = bytes(h)
    return out


def range_erasures(database_url: str, stream: str, first: int, last: int,
                   views: str = "evidence") -> dict[int, tuple[int, str, bytes]]:
    """seq -> (erased_at µs, request id, signed receipt) of the earliest erasure of the key
    that sealed each record of ``stream`` in ``first..last`` whose key was erased."""
    rows = _fetch(database_url,
                  f'select distinct on (r.seq) r.seq, e.erased_at_us, e.request_id, e.note '
                  f'from "{views}".records r join "{views}".erasures e on e.key_id = r.key_id '
                  "where r.stream = %s and r.seq between %s and %s "
                  "order by r.seq, e.erased_at_us", (stream, first, last))
    return {int(seq): (int(at), req, bytes(note)) for seq, at, req, note in rows}


def _fetch(database_url: str, sql: str, params: tuple) -> list[tuple]:
    try:
        with psycopg.connect(database_url) as conn:
            return conn.execute(sql, params).fetchall()
    except psycopg.Error as e:
        raise AuditError(f"PostgreSQL: {e}") from e
