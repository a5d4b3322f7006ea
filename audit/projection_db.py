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
