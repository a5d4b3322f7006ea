"""The API's only database module: the read model's queries over a connection pool.

Every query reads the stable views (``<views_schema>.records`` etc.), never a generation, so a
projection rebuild swaps under the API without it noticing; the queries and the columns of
each row are in :mod:`api.sql`, the pool's life and the translation of database errors into
503s in :mod:`api.pool` (both re-exported here).

A record is *erased* when its key is in the ``erasures`` view: every record query adds
:data:`ERASED_COLUMNS`. A lookup by event id is scoped to the caller's streams in SQL and
answers the original by the contract's rule, never a copy, and adds :data:`EVENT_COLUMNS`:
how many other records the key may read carry the id, and whether the one answered is itself
flagged as a copy (its original in a stream the key may not read).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, AsyncIterator

import psycopg
from psycopg.types.numeric import Int8

from evidence_contract.merkle import consistency_nodes, inclusion_nodes
from projections.redact import parse

from .auth import Scope
from .pool import APPLICATION_NAME, Pool, check_connection, translate
from .sql import (
    BYTES_COLUMNS, ERASED_COLUMNS, EVENT_COLUMNS, FINDING_COLUMNS, HEAD_COLUMNS, META_COLUMNS,
    VERIFY_COLUMNS, RecordFilter, bound_sql, queries, records_sql,
)

__all__ = ["APPLICATION_NAME", "BYTES_COLUMNS", "Database", "ERASED_COLUMNS", "EVENT_COLUMNS",
           "FINDING_COLUMNS", "HEAD_COLUMNS", "META_COLUMNS", "VERIFY_COLUMNS",
           "check_connection", "translate"]


class Database:
    """Queries of the read model over a pool; :meth:`open` and :meth:`close` bracket its life."""

    def __init__(self, url: str, views: str, *, min_size: int = 2, max_size: int = 10,
                 timeout: float = 5.0, statement_timeout_ms: int = 5000) -> None:
        self.views = views
        self.timeout = timeout
        self._pool = Pool(url, min_size=min_size, max_size=max_size, timeout=timeout,
                          statement_timeout_ms=statement_timeout_ms)
        self._q = queries(views)  # views: validated as a plain identifier by Settings
        self._redaction_cache: tuple[Any, float] | None = None

    async def open(self) -> None:
        await self._pool.open()

    async def close(self) -> None:
        await self._pool.close()

    # -- records -------------------------------------------------------------------------

    async def verify_row(self, stream: str | None, seq: int | None,
                         event_id: uuid.UUID | None, scope: Scope) -> tuple[Any, ...] | None:
        """``VERIFY_COLUMNS`` and ``ERASED_COLUMNS`` of one record, by (stream, seq) or by
        event id among the streams of ``scope`` (the caller checks a stream it names against
        the scope); by event id, the original (never a copy), then ``EVENT_COLUMNS``."""
        if event_id is not None:
            return await self._by_event("verify", "verify_event", event_id, scope)
        return await self._pool.one("verify", self._q["verify_seq"], (stream, Int8(seq)))

    async def record(self, stream: str, seq: int, with_bytes: bool) -> tuple[Any, ...] | None:
        return await self._pool.one("record", self._q["full_seq" if with_bytes else "meta_seq"],
                                    (stream, Int8(seq)))

    async def event(self, event_id: uuid.UUID, with_bytes: bool, scope: Scope
                    ) -> tuple[tuple[Any, ...], int, bool] | None:
        """``(row, copies, is_copy)``: the original record with ``event_id`` among the streams
        of ``scope`` (the first by the contract's order, never a later copy), how many other
        records there carry the id, and whether the row is itself flagged as a copy."""
        row = await self._by_event("event", "full_event" if with_bytes else "meta_event",
                                   event_id, scope)
        if row is None:
            return None
        n = len(EVENT_COLUMNS)
        return row[:-n], int(row[-n]), bool(row[-n + 1])

    async def _by_event(self, what: str, query: str, event_id: uuid.UUID,
                        scope: Scope) -> tuple[Any, ...] | None:
        cond, params = scope.sql()
        return await self._pool.one(what, self._q[query].format(scope=cond), (event_id, *params))

    async def trace(self, trace_id: bytes, scope: Scope, limit: int) -> list[tuple[Any, ...]]:
        """Up to ``limit`` records of the trace ``trace_id`` (16 bytes) that ``scope`` may
        read, in the order they were sealed (``occurred_at``, then the log position)."""
        cond, params = scope.sql()
        return await self._pool.all("trace", self._q["meta_trace"].format(scope=cond),
                                    (trace_id, *params, limit))

    async def page(self, stream: str, after_seq: int, limit: int,
                   with_bytes: bool = False) -> list[tuple[Any, ...]]:
        """Up to ``limit`` records of ``stream`` after ``after_seq``, in seq order."""
        return await self._pool.all("records", self._q["full_page" if with_bytes else "meta_page"],
                                    (stream, Int8(after_seq), limit))

    async def stream_records(self, stream: str, after_seq: int, f: RecordFilter, limit: int,
                             with_bytes: bool, scan: int | None
                             ) -> tuple[list[tuple[Any, ...]], tuple[str, int] | None]:
        """Up to ``limit`` records of ``stream`` after ``after_seq`` that ``f`` keeps, in seq
        order, reading at most ``scan`` records (None: no bound); and the (stream, seq) where
        that reading stopped (None: it reached the end)."""
        return await self._listing("records", "stream = %s and seq > %s",
                                   [stream, Int8(after_seq)], f, limit, with_bytes, scan)

    async def scoped_records(self, scope: Scope, like: str, after: tuple[str, int] | None,
                             f: RecordFilter, limit: int, with_bytes: bool, scan: int | None
                             ) -> tuple[list[tuple[Any, ...]], tuple[str, int] | None]:
        """As :meth:`stream_records`, over the streams of ``scope`` whose id is ``like`` (a
        LIKE pattern), in (stream, seq) order, after ``after`` (a (stream, seq) cursor)."""
        cond, params = scope.sql()
        window, wparams = f"{cond} and stream like %s", [*params, like]
        if after is not None:
            window += " and (stream, seq) > (%s, %s)"
            wparams += [after[0], Int8(after[1])]
        return await self._listing("records", window, wparams, f, limit, with_bytes, scan)

    async def _listing(self, what: str, window: str, wparams: list[Any], f: RecordFilter,
                       limit: int, with_bytes: bool, scan: int | None
                       ) -> tuple[list[tuple[Any, ...]], tuple[str, int] | None]:
        v = f'"{self.views}"'
        bound = None
        if scan is not None:
            row = await self._pool.one(what, bound_sql(v, window), (*wparams, scan - 1))
            if row is not None:
                bound = (row[0], int(row[1]))
                window += " and (stream, seq) <= (%s, %s)"
                wparams = [*wparams, bound[0], Int8(bound[1])]
        sql, fparams = records_sql(v, window, f, with_bytes)
        rows = await self._pool.all(what, sql, (*wparams, *fparams, limit))
        return rows, bound

    async def replay(self, content_key: bytes, scope: Scope, stream: str | None,
                     seq: int | None) -> tuple[Any, ...] | None:
        """The earliest COMMITTED record with ``content_key`` that ``scope`` may read, as
        ``api.evidence.SERVE_COLUMNS`` (checked there before anything is served)."""
        cond, params = scope.sql("r.stream")
        sql = (self._q["served"] + f"where r.content_key = %s and r.outcome = 'COMMITTED' "
               f"and r.response_bytes is not null and {cond}")
        args: list[Any] = [content_key, *params]
        if stream is not None:
            sql += " and r.stream = %s"
            args.append(stream)
        if seq is not None:
            sql += " and r.seq = %s"
            args.append(Int8(seq))
        sql += " order by r.occurred_at_us, r.log_partition, r.log_offset limit 1"
        return await self._pool.one("replay", sql, tuple(args))

    async def served_record(self, stream: str, seq: int) -> tuple[Any, ...] | None:
        """Record ``seq`` of ``stream`` (the earliest copy) as ``api.evidence.SERVE_COLUMNS``."""
        sql = (self._q["served"] + "where r.stream = %s and r.seq = %s "
               "order by r.log_partition, r.log_offset limit 1")
        return await self._pool.one("record", sql, (stream, Int8(seq)))

    async def add_finding(self, stream: str, seq: int, kind: str, detail: str,
                          partition: int, offset: int) -> None:
        """A finding in the live generation (through its view), unless the same kind is
        already recorded for that record."""
        async def work(conn: psycopg.AsyncConnection) -> None:
            await conn.execute(self._q["add_finding"], (
                stream, Int8(seq), kind, detail, partition, Int8(offset),
                stream, Int8(seq), kind))
        await self._pool.run("finding", work)

    # -- streams -------------------------------------------------------------------------

    async def streams(self, scope: Scope, after: str | None, limit: int) -> list[tuple[Any, ...]]:
        cond, params = scope.sql()
        sql = self._q["streams"] + cond
        args: list[Any] = list(params)
        if after is not None:
            sql += " and stream > %s"
            args.append(after)
        sql += " order by stream limit %s"
        args.append(limit)
        return await self._pool.all("streams", sql, tuple(args))

    async def stream(self, stream: str, findings_limit: int
                     ) -> tuple[tuple[Any, ...] | None, list[tuple[Any, ...]], int]:
        """The head of ``stream``, its first findings, and how many findings it has."""
        async def work(conn: psycopg.AsyncConnection) -> Any:
            async with conn.pipeline():  # the three reads in one round trip
                head = await conn.execute(self._q["head"], (stream,))
                findings = await conn.execute(self._q["findings"], (stream, findings_limit))
                count = await conn.execute(self._q["findings_count"], (stream,))
            return (await head.fetchone(), await findings.fetchall(),
                    (await count.fetchone())[0])
        return await self._pool.run("stream", work)

    # -- audit ---------------------------------------------------------------------------

    async def audit_chunks(self, stream: str, chunk: int = 500
                           ) -> AsyncIterator[list[tuple[Any, ...]]]:
        """Every ``records`` row of ``stream`` (``RECORD_COLUMNS``) in log order, in chunks,
        through a server-side cursor: a long stream is streamed, never loaded at once."""
        with translate("audit"):
            async with self._pool.connection() as conn:
                async with conn.transaction():
                    async with conn.cursor(name="stream_audit") as cur:
                        await cur.execute(self._q["audit"], (stream,))
                        while rows := await cur.fetchmany(chunk):
                            yield rows

    async def redaction(self, fresh: bool = False) -> Any:
        """The redaction policy the live generation was built with
        (``projections.redact.Policy``), or None: no policy, or a generation older than the
        redaction table. Cached for a few seconds (a rebuild swaps it) unless ``fresh``."""
        now = time.monotonic()
        cached = self._redaction_cache
        if cached is not None and not fresh and now - cached[1] < 5.0:
            return cached[0]
        exists = await self._pool.one("redaction", self._q["redaction_exists"],
                                      (f'"{self.views}".redaction',))
        rows = (await self._pool.all("redaction", self._q["redaction"], ())
                if exists and exists[0] else [])
        policy = parse(rows[0][0]) if rows and rows[0][0] is not None else None
        self._redaction_cache = (policy, now)
        return policy

    async def erased_keys(self, stream: str) -> set[str]:
        """The key ids (32 hex) of ``stream``'s records that an erasure names."""
        rows = await self._pool.all("erased keys", self._q["erased_keys"], (stream,))
        return {bytes(r[0]).hex() for r in rows}

    async def head(self, stream: str) -> tuple[Any, ...] | None:
        return await self._pool.one("head", self._q["head"], (stream,))

    async def head_seq(self, stream: str) -> int | None:
        """The head's seq of ``stream``; None when it has no records."""
        row = await self._pool.one("head", self._q["head_seq"], (stream,))
        return None if row is None else row[0]

    async def findings(self, stream: str, limit: int) -> tuple[list[tuple[Any, ...]], int]:
        """The projector's first ``limit`` findings for ``stream`` and how many there are."""
        async def work(conn: psycopg.AsyncConnection) -> Any:
            async with conn.pipeline():  # both reads in one round trip
                rows = await conn.execute(self._q["findings"], (stream, limit))
                count = await conn.execute(self._q["findings_count"], (stream,))
            return await rows.fetchall(), (await count.fetchone())[0]
        return await self._pool.run("findings", work)

    # -- the verifiable log -------------------------------------------------------------

    async def checkpoint(self, stream: str, tree_size: int | None, max_cosignatures: int
                         ) -> tuple[tuple[int, bytes, bytes] | None, list[str]]:
        """(tree_size, root, note) of the latest checkpoint of ``stream`` (or the one of
        ``tree_size``), and the cosignature lines held for it."""
        async def work(conn: psycopg.AsyncConnection) -> Any:
            if tree_size is None:
                cur = await conn.execute(self._q["checkpoint_latest"], (stream,))
            else:
                cur = await conn.execute(self._q["checkpoint_at"], (stream, Int8(tree_size)))
            row = await cur.fetchone()
            if row is None:
                return None, []
            lines = await (await conn.execute(
                self._q["cosignatures"], (stream, Int8(row[0]), max_cosignatures))).fetchall()
            return (int(row[0]), bytes(row[1]), bytes(row[2])), [r[0] for r in lines]
        return await self._pool.run("checkpoint", work)

    async def bundle_proofs(self, stream: str, seq: int, known_size: int | None,
                            max_cosignatures: int) -> tuple[Any, list[str], Any]:
        """What an evidence bundle of record ``seq`` needs, on one connection in two round
        trips: ``((tree_size, root, note) of the latest checkpoint, its cosignature lines,
        {(level, index): hash} of the nodes of the record's inclusion proof and of the
        consistency proof from ``known_size``)``. The nodes are None when the projected tree
        is smaller than the checkpoint (catching up) and {} when no checkpoint covers
        ``seq``."""
        async def work(conn: psycopg.AsyncConnection) -> Any:
            row = await (await conn.execute(
                self._q["bundle_head"], (max_cosignatures, stream))).fetchone()
            if row is None:
                return None, [], {}
            size = int(row[0])
            cp, lines = (size, bytes(row[1]), bytes(row[2])), list(row[4] or [])
            if seq > size:
                return cp, lines, {}
            if row[3] is None or int(row[3]) < size:
                return cp, lines, None
            wanted = inclusion_nodes(seq - 1, size)
            if known_size is not None and known_size < size:
                wanted = list(dict.fromkeys([*wanted, *consistency_nodes(known_size, size)]))
            found = await (await conn.execute(self._q["nodes"], (
                [lv for lv, _ in wanted], [i for _, i in wanted], stream))).fetchall()
            return cp, lines, {(int(lv), int(i)): bytes(h) for lv, i, h in found}
        return await self._pool.run("bundle", work)

    async def tree(self, stream: str) -> tuple[int, bytes] | None:
        """The projected tree of ``stream``: (size, root); None before its first record."""
        row = await self._pool.one("tree", self._q["tree"], (stream,))
        return None if row is None else (int(row[0]), bytes(row[1]))

    async def nodes(self, stream: str, wanted: list[tuple[int, int]]
                    ) -> dict[tuple[int, int], bytes]:
        """The stored perfect subtree hashes of ``stream`` at ``wanted`` (level, index)."""
        if not wanted:
            return {}
        rows = await self._pool.all("tree nodes", self._q["nodes"],
                                    ([lv for lv, _ in wanted], [i for _, i in wanted], stream))
        return {(int(lv), int(i)): bytes(h) for lv, i, h in rows}

    async def stream_hashes(self, stream: str, level: int, start: int, count: int
                            ) -> list[tuple[int, bytes]]:
        """``(index, hash)`` of ``stream``'s stored subtree hashes at ``level``, indexes
        ``start`` to ``start + count - 1`` that the projection holds, in order."""
        rows = await self._pool.all("stream hash tile", self._q["stream_hashes"],
                                    (stream, level, Int8(start), Int8(start + count)))
        return [(int(i), bytes(h)) for i, h in rows]

    # -- the deployment log (docs/witnessing.md) -------------------------------------------

    async def log_checkpoint(self, max_cosignatures: int
                             ) -> tuple[tuple[int, bytes, bytes] | None, list[str]]:
        """(tree_size, root, note) of the latest deployment checkpoint whose root the
        projected tree has not contradicted, and the cosignature lines held for it."""
        row = await self._pool.one("log checkpoint", self._q["log_checkpoint"], (max_cosignatures,))
        if row is None:
            return None, []
        return (int(row[0]), bytes(row[1]), bytes(row[2])), list(row[3] or [])

    async def log_size(self) -> int | None:
        """The size of that checkpoint: how much of the deployment tree is signed."""
        row = await self._pool.one("log size", self._q["log_size"], ())
        return None if row is None else int(row[0])

    async def log_hashes(self, level: int, start: int, count: int) -> list[tuple[int, bytes]]:
        """``(index, hash)`` of the deployment tree's stored subtree hashes at ``level``,
        indexes ``start`` to ``start + count - 1`` that the projection holds, in order."""
        rows = await self._pool.all("log hash tile", self._q["log_hashes"],
                                    (level, Int8(start), Int8(start + count)))
        return [(int(i), bytes(h)) for i, h in rows]

    async def log_entries(self, start: int, count: int) -> list[tuple[int, bytes]]:
        """``(index, entry)`` of the deployment log's entries ``start`` to ``start + count -
        1`` that the projection holds, in order."""
        rows = await self._pool.all("log entry bundle", self._q["log_entries"],
                                    (Int8(start), Int8(start + count)))
        return [(int(i), bytes(e)) for i, e in rows]

    async def log_cover(self, stream: str, seq: int, max_cosignatures: int, candidates: int
                        ) -> tuple[Any, Any, list[tuple[int, int, bytes]]]:
        """What a bundle's path to the deployment log starts from, on one connection: the
        ``(tree_size, root, note, cosignature lines)`` of the latest deployment checkpoint a
        witness cosigned and of the latest one (each None when there is none; both among
        those whose root the projected tree has not contradicted), and the first
        ``candidates`` entries ``(idx, tree_size, entry)`` of ``stream`` of a size that covers
        ``seq`` within the latest, by size then index."""
        def row(r: Any) -> Any:
            return None if r is None else (int(r[0]), bytes(r[1]), bytes(r[2]), list(r[3] or []))

        async def work(conn: psycopg.AsyncConnection) -> Any:
            latest = row(await (await conn.execute(
                self._q["log_checkpoint"], (max_cosignatures,))).fetchone())
            if latest is None:
                return None, None, []
            cosigned = row(await (await conn.execute(
                self._q["log_checkpoint_cosigned"], (max_cosignatures,))).fetchone())
            found = await (await conn.execute(self._q["log_covering"], (
                stream, Int8(seq), Int8(latest[0]), candidates))).fetchall()
            return cosigned, latest, [(int(i), int(n), bytes(e)) for i, n, e in found]
        return await self._pool.run("log cover", work)

    async def log_path_nodes(self, log_wanted: list[tuple[int, int]], stream: str,
                             stream_wanted: list[tuple[int, int]]
                             ) -> tuple[dict[tuple[int, int], bytes], dict[tuple[int, int], bytes]]:
        """The stored subtree hashes ``{(level, idx): hash}`` of the deployment tree at
        ``log_wanted`` and of ``stream``'s tree at ``stream_wanted``, on one connection."""
        def nodes(rows: list[Any]) -> dict[tuple[int, int], bytes]:
            return {(int(lv), int(i)): bytes(h) for lv, i, h in rows}

        async def work(conn: psycopg.AsyncConnection) -> Any:
            log = nodes(await (await conn.execute(self._q["log_nodes"], (
                [lv for lv, _ in log_wanted], [i for _, i in log_wanted]))).fetchall())
            own = {} if not stream_wanted else nodes(await (await conn.execute(
                self._q["nodes"], ([lv for lv, _ in stream_wanted],
                                   [i for _, i in stream_wanted], stream))).fetchall())
            return log, own
        return await self._pool.run("log path nodes", work)

    # -- health --------------------------------------------------------------------------

    async def lag(self) -> tuple[int, int, float | None]:
        """(total projection lag in records, number of tracked partitions, seconds since the
        projector's last heartbeat or None when it has not beaten)."""
        # A readiness probe must answer quickly even when the pool is exhausted.
        row = await self._pool.one("lag", self._q["lag"], (), timeout=min(self.timeout, 2.0))
        if not row:
            return 0, 0, None
        return int(row[0]), int(row[1]), (None if row[2] is None else float(row[2]))
