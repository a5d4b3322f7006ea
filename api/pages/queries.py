"""The few read-model questions only the pages ask, over the API's own pool.

The JSON API's queries are in :mod:`api.sql` and :class:`api.db.Database`; the pages reuse
them wherever one answers (heads, records, findings, checkpoints, bundles). What no route
needed until now is here, read through the same pool and views (so the same statement
timeout and the same translation of database errors into 503s): a stream's finding kinds,
its encrypted and erased record counts, a record's neighbours in its chain, and the records
with a content key. Parameters are bound, never formatted in; the views' schema is the
identifier ``Settings`` validated.
"""

from __future__ import annotations

from typing import Any

from ..auth import Scope
from ..db import Database

__all__ = ["content_key_records", "erasure_receipt", "finding_kinds", "neighbours", "record_counts",
           "stream_records"]


def _v(db: Database) -> str:
    return f'"{db.views}"'


async def finding_kinds(db: Database, stream: str) -> dict[str, int]:
    """How many findings of each kind ``stream`` has."""
    rows = await db._pool.all(  # noqa: SLF001 - the Database's pool, its one way to PostgreSQL
        "page findings", f"select kind, count(*) from {_v(db)}.findings where stream = %s "
                         f"group by kind order by kind", (stream,))
    return {str(k): int(n) for k, n in rows}


async def record_counts(db: Database, stream: str) -> tuple[int, int]:
    """(encrypted, erased) records of ``stream``: sealed under a content key, and of those
    whose key an erasure destroyed."""
    v = _v(db)
    row = await db._pool.one(  # noqa: SLF001
        "page counts", f"select count(*) filter (where r.key_id is not null), "
                       f"count(*) filter (where exists (select 1 from {v}.erasures e "
                       f"where e.key_id = r.key_id)) from {v}.records r where r.stream = %s",
        (stream,))
    return (0, 0) if row is None else (int(row[0]), int(row[1]))


async def neighbours(db: Database, stream: str, seq: int) -> tuple[int | None, int | None]:
    """The seqs before and after ``seq`` that ``stream`` holds (None at either end)."""
    row = await db._pool.one(  # noqa: SLF001
        "page neighbours", f"select (select max(seq) from {_v(db)}.records where stream = %s "
                           f"and seq < %s::bigint), (select min(seq) from {_v(db)}.records "
                           f"where stream = %s and seq > %s::bigint)",
        (stream, seq, stream, seq))
    return (None, None) if row is None else (row[0], row[1])


async def content_key_records(db: Database, content_key: bytes, scope: Scope, limit: int
                              ) -> list[tuple[Any, ...]]:
    """(stream, seq, event_id, occurred_at, outcome) of the records with ``content_key``
    among the streams of ``scope``, earliest first."""
    cond, params = scope.sql()
    return await db._pool.all(  # noqa: SLF001
        "page content key", f"select stream, seq, event_id, occurred_at, outcome "
                            f"from {_v(db)}.records where content_key = %s and {cond} "
                            f"order by occurred_at_us, log_partition, log_offset limit %s",
        (content_key, *params, limit))


async def stream_records(db: Database, stream: str, before: int | None, limit: int
                         ) -> list[tuple[Any, ...]]:
    """(seq, event_id, occurred_at, outcome, model, key_id, erased) of ``stream``'s records,
    newest first, below seq ``before`` (None: from the head)."""
    v = _v(db)
    bound = "" if before is None else " and seq < %s::bigint"
    args: tuple[Any, ...] = (stream,) if before is None else (stream, before)
    return await db._pool.all(  # noqa: SLF001
        "page records", f"select seq, event_id, occurred_at, outcome, "
                        f"coalesce(response_model, model_id), key_id, exists (select 1 from "
                        f"{v}.erasures e where e.key_id = r.key_id) from {v}.records r "
                        f"where stream = %s{bound} order by seq desc, log_partition, "
                        f"log_offset limit %s", (*args, limit))


async def erasure_receipt(db: Database, key_id: bytes) -> tuple[bytes, str, Any] | None:
    """(signed receipt note, request id, erased at) of the earliest erasure of ``key_id``."""
    row = await db._pool.one(  # noqa: SLF001
        "page receipt", f"select note, request_id, erased_at from {_v(db)}.erasures "
                        f"where key_id = %s order by erased_at_us, request_id limit 1",
        (key_id,))
    return None if row is None else (bytes(row[0]), row[1], row[2])
