"""The API's only database module: a connection pool and the read model's queries.

Every query reads the stable views (``<views_schema>.records`` etc.), never a generation, so a
projection rebuild swaps under the API without it noticing. Each request runs one indexed
query on a pooled autocommit connection: no transaction to open or close, and psycopg prepares
a statement after its fifth use on a connection, so the hot path is a single round trip.

A record is *erased* when its ``key_id`` (its ``encryption.key_id``) is in the ``erasures`` view
(folded from the log's signed receipts): every record query adds :data:`ERASED_COLUMNS`, the
earliest erasure of the record's key (its µs and request id, null for a record that is plain
or whose key is live), by an indexed subquery on ``erasures.key_id``.

A lookup by event id is scoped to the caller's streams in SQL: an event id is unique only
within what one writer dedups, so a record of another stream that reuses it must neither hide
the caller's record nor be verified in its place. Among the records with that id the key may
read, it answers the original by the contract's rule (``evidence_contract.chain.Sighting.order``:
the earliest ``occurred_at``, then the log position; the projector flags every other one
``duplicate_event_id``), never a copy, and adds :data:`EVENT_COLUMNS`: how many other records
the key may read carry the id, and whether the one answered is itself flagged as a copy (its
original in a stream the key may not read).

The pool checks a connection as it hands it out (:func:`check_connection`): after a
PostgreSQL restart or a terminated backend, the pooled connections are dead, and without the
check each would fail one request (503) before the pool replaced it.

:func:`translate` is the one place where psycopg and pool errors become
:class:`~api.errors.Unavailable` (503 with Retry-After).
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any, AsyncIterator, Iterator

import psycopg
from psycopg.types.numeric import Int8
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from server.logs import event_logger

from .auth import Scope
from .errors import Unavailable

__all__ = ["APPLICATION_NAME", "BYTES_COLUMNS", "Database", "ERASED_COLUMNS", "EVENT_COLUMNS",
           "META_COLUMNS", "VERIFY_COLUMNS", "check_connection", "translate"]

log = event_logger("evidence.api")

META_COLUMNS = (
    "stream", "seq", "event_id", "schema_version", "occurred_at", "occurred_at_us",
    "captured_at", "outcome", "content_key", "prev_digest", "record_digest",
    "response_digest", "output_digest", "input_digest", "prompt_digest", "provider_name",
    "provider_endpoint", "provider_api_version", "model_id", "response_model", "fingerprint",
    "params", "http_status", "response_content_type", "seed", "temperature", "top_p",
    "deterministic", "request_policy", "streamed", "closed_early", "truncated", "writer_id",
    "request_length", "response_length", "log_partition", "log_offset",
)
ERASED_COLUMNS = ("key_id", "erased_at_us", "erasure_request_id")
"""After ``META_COLUMNS`` in every record query: the record's key id (null: plain) and, when
that key was erased, the earliest erasure's µs and request id."""
BYTES_COLUMNS = ("request_bytes", "response_bytes", "error_bytes", "input_bytes",
                 "prompt_bytes", "record_bytes")
VERIFY_COLUMNS = ("stream", "seq", "output_digest", "response_digest", "deterministic",
                  "seed", "model_version", "outcome", "endpoint")
"""Then ``ERASED_COLUMNS``: a verify row is ``VERIFY_COLUMNS + ERASED_COLUMNS``."""
EVENT_COLUMNS = ("copies", "is_copy")
"""Last in a lookup by event id (``verify_event``, ``*_event``): the number of *other* records
with that event id in the key's scope, and whether the record answered carries a
``duplicate_event_id`` finding (a later copy of an id sealed before)."""


def _erased_sql(v: str, table: str = "records") -> str:
    """``ERASED_COLUMNS`` of the ``records`` row named ``table`` in the query."""
    first = (f'from {v}.erasures e where e.key_id = {table}.key_id '
             f"order by e.erased_at_us, e.request_id limit 1")
    return (f"{table}.key_id, (select e.erased_at_us {first}), "
            f"(select e.request_id {first})")
HEAD_COLUMNS = ("stream", "seq", "record_digest", "record_count", "first_at", "last_at")
FINDING_COLUMNS = ("id", "stream", "seq", "kind", "detail", "log_partition", "log_offset",
                   "found_at")

APPLICATION_NAME = "evidence-api"
"""The pool's connections' ``application_name`` in ``pg_stat_activity``."""


async def check_connection(conn: psycopg.AsyncConnection) -> None:
    """Raise if PostgreSQL has closed ``conn``: the pool then discards it and hands out
    another (psycopg_pool's ``check`` on checkout).

    A backend that is terminated (``pg_terminate_backend``, a restart, a crash) sends a FATAL
    message and closes its socket; both are waiting on the connection when it is next taken
    from the pool. Reading what is waiting, without blocking, finds them: the first read
    takes the message, the second meets the end of the stream and raises. That costs two
    ``recv`` calls, where ``AsyncConnectionPool.check_connection`` (an empty query) costs a
    round trip on every request (116 us on loopback, about as long as the verify query). A
    server that vanished without closing (a partitioned host) is not seen by either: the
    statement timeout and the pool's timeout bound that request, and the broken connection
    is not returned to the pool."""
    pgconn = conn.pgconn
    for _ in range(2):
        pgconn.consume_input()  # raises OperationalError once the server has closed
    if pgconn.status != psycopg.pq.ConnStatus.OK:
        raise psycopg.OperationalError("the connection is closed")


# A duplicate seq is kept in the read model (and reported as a finding); lookups answer the
# earliest copy in log order, the one the chain was built on.
_FIRST = "order by log_partition, log_offset limit 1"
# Records sharing an event id (in any streams): the original is the first by the contract's
# order (evidence_contract.chain.Sighting.order: occurred_at, then the log position), the one
# the projector and the auditor leave unflagged; the log position alone would answer a later
# copy that a writer sealed on a lower partition. The window counts every record the WHERE
# kept (before the LIMIT): the copies are the others.
_FIRST_EVENT = "order by occurred_at_us, log_partition, log_offset limit 1"


def _event_sql(v: str) -> str:
    """``EVENT_COLUMNS`` of the ``records`` row in a lookup by event id."""
    return (f"count(*) over () - 1, exists (select 1 from {v}.findings f "
            f"where f.stream = records.stream and f.seq = records.seq "
            f"and f.kind = 'duplicate_event_id' and f.log_partition = records.log_partition "
            f"and f.log_offset = records.log_offset)")


@contextlib.contextmanager
def translate(what: str) -> Iterator[None]:
    """Turn database failures into :class:`Unavailable`, keeping the original as the cause."""
    try:
        yield
    except PoolTimeout as e:
        log("warning", "db_pool_timeout", what=what, error=str(e))
        raise Unavailable("the database is busy or unreachable; retry shortly") from e
    except psycopg.errors.UndefinedTable as e:
        log("warning", "read_model_missing", what=what, error=str(e))
        raise Unavailable("the read model is not built yet (no projection is live); "
                          "retry once the projector has run", retry_after=5) from e
    except psycopg.Error as e:
        log("warning", "db_error", what=what, sqlstate=e.sqlstate, error=str(e))
        raise Unavailable("the database could not answer; retry shortly") from e


class Database:
    """Queries of the read model over a pool; :meth:`open` and :meth:`close` bracket its life."""

    def __init__(self, url: str, views: str, *, min_size: int = 2, max_size: int = 10,
                 timeout: float = 5.0, statement_timeout_ms: int = 5000) -> None:
        self.views = views
        self.timeout = timeout
        self._pool_args = dict(
            conninfo=url, min_size=min_size, max_size=max_size, open=False, timeout=timeout,
            name="evidence-api", check=check_connection,
            kwargs={"autocommit": True, "connect_timeout": max(1, int(timeout)),
                    "application_name": APPLICATION_NAME,
                    "options": f"-c statement_timeout={statement_timeout_ms}"})
        self._pool: AsyncConnectionPool | None = None
        v = f'"{views}"'  # validated as a plain identifier by Settings
        cols = ", ".join(META_COLUMNS) + ", " + _erased_sql(v)
        page = (f"from {v}.records where stream = %s and seq > %s "
                f"order by seq, log_partition, log_offset limit %s")
        verify_cols = ("stream, seq, output_digest, response_digest, deterministic, seed, "
                       "coalesce(response_model, model_id), outcome, provider_endpoint, "
                       + _erased_sql(v))
        self._q = {
            "verify_seq": f"select {verify_cols} from {v}.records "
                          f"where stream = %s and seq = %s {_FIRST}",
            # by event id: "{scope}" is the caller's stream condition (Scope.sql)
            "verify_event": f"select {verify_cols}, {_event_sql(v)} from {v}.records "
                            f"where event_id = %s and {{scope}} {_FIRST_EVENT}",
            "meta_seq": f"select {cols} from {v}.records where stream = %s and seq = %s {_FIRST}",
            "full_seq": f"select {cols}, {', '.join(BYTES_COLUMNS)} from {v}.records "
                        f"where stream = %s and seq = %s {_FIRST}",
            "meta_event": f"select {cols}, {_event_sql(v)} from {v}.records "
                          f"where event_id = %s and {{scope}} {_FIRST_EVENT}",
            "full_event": f"select {cols}, {', '.join(BYTES_COLUMNS)}, {_event_sql(v)} "
                          f"from {v}.records where event_id = %s and {{scope}} {_FIRST_EVENT}",
            "meta_page": f"select {cols} {page}",
            "full_page": f"select {cols}, {', '.join(BYTES_COLUMNS)} {page}",
            "head": f"select {', '.join(HEAD_COLUMNS)} from {v}.heads where stream = %s",
            "head_seq": f"select seq from {v}.heads where stream = %s",
            "findings": f"select {', '.join(FINDING_COLUMNS)} from {v}.findings "
                        f"where stream = %s order by id limit %s",
            "findings_count": f"select count(*) from {v}.findings where stream = %s",
            # The verifiable log: checkpoints folded from evidence.checkpoints, the projected
            # tree (size, root) and its perfect subtree hashes (api.routers.tlog).
            "checkpoint_latest": f"select tree_size, root, note from {v}.checkpoints "
                                 f"where stream = %s order by tree_size desc limit 1",
            "checkpoint_at": f"select tree_size, root, note from {v}.checkpoints "
                             f"where stream = %s and tree_size = %s",
            "cosignatures": f"select line from {v}.cosignatures "
                            f"where stream = %s and tree_size = %s "
                            f"order by witness, key_id limit %s",
            "tree": f"select size, root from {v}.trees where stream = %s",
            # The public tlog-tiles read of the deployment log and of each stream's tree
            # (api.routers.publiclog): a run of one level's stored hashes, of the entries.
            "stream_hashes": f"select idx, hash from {v}.tree_nodes where stream = %s "
                             f"and level = %s and idx >= %s and idx < %s order by idx",
            # The deployment checkpoint served is the latest whose root the projected tree
            # has not contradicted (root_matches: null until the tree reaches it).
            "log_checkpoint": f"select c.tree_size, c.root, c.note, array(select s.line "
                              f"from {v}.log_cosignatures s where s.tree_size = c.tree_size "
                              f"order by s.witness, s.key_id limit %s) "
                              f"from {v}.log_checkpoints c where c.root_matches is not false "
                              f"order by c.tree_size desc limit 1",
            "log_size": f"select tree_size from {v}.log_checkpoints "
                        f"where root_matches is not false order by tree_size desc limit 1",
            "log_hashes": f"select idx, hash from {v}.log_nodes "
                          f"where level = %s and idx >= %s and idx < %s order by idx",
            "log_entries": f"select idx, entry from {v}.log_entries "
                           f"where idx >= %s and idx < %s order by idx",
            # A bundle's path to the deployment log (api.routers.bundles): the latest
            # deployment checkpoint a witness cosigned, the entries of a stream that cover a
            # seq within a size (first by size: log_entries_stream), the proof's nodes.
            "log_checkpoint_cosigned": f"select c.tree_size, c.root, c.note, array(select "
                                       f"s.line from {v}.log_cosignatures s "
                                       f"where s.tree_size = c.tree_size "
                                       f"order by s.witness, s.key_id limit %s) "
                                       f"from {v}.log_checkpoints c "
                                       f"where c.root_matches is not false and c.tree_size = "
                                       f"(select max(tree_size) from {v}.log_cosignatures)",
            "log_covering": f"select idx, tree_size, entry from {v}.log_entries "
                            f"where stream = %s and tree_size >= %s and idx < %s "
                            f"order by tree_size, idx limit %s",
            "log_nodes": f"select n.level, n.idx, n.hash from {v}.log_nodes n "
                         f"join unnest(%s::int[], %s::bigint[]) w(level, idx) "
                         f"on n.level = w.level and n.idx = w.idx",
            "nodes": f"select n.level, n.idx, n.hash from {v}.tree_nodes n "
                     f"join unnest(%s::int[], %s::bigint[]) w(level, idx) "
                     f"on n.level = w.level and n.idx = w.idx where n.stream = %s",
            # Lag against the log ends the projector's heartbeat last saw in Kafka (its own
            # stored high watermarks where it has not beaten yet), and the heartbeat's age:
            # of the oldest partition's beat, as several projectors each beat their own
            # partitions and one that is gone leaves its partitions unprojected.
            "lag": f"select coalesce(sum(greatest(coalesce(h.end_offset, p.high_watermark) "
                   f"- p.next_offset, 0)), 0)::bigint, count(*), "
                   f"(select extract(epoch from now() - min(beat_at))::float8 "
                   f"from {v}.heartbeat) "
                   f"from {v}.positions p left join {v}.heartbeat h "
                   f"on h.topic = p.topic and h.partition = p.partition",
        }

    async def open(self) -> None:
        # wait=False: the API starts (and /healthz answers) while PostgreSQL is still coming
        # up; /readyz and every query say 503 until it answers.
        # The pool is made here, inside the running loop, never at import or construction.
        self._pool = AsyncConnectionPool(**self._pool_args)
        await self._pool.open(wait=False)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def _connection(self, timeout: float | None = None):
        if self._pool is None:
            raise Unavailable("the API is starting or stopping; retry shortly")
        return self._pool.connection(timeout=timeout)

    async def _one(self, what: str, sql: str, params: tuple[Any, ...],
                   timeout: float | None = None) -> tuple[Any, ...] | None:
        with translate(what):
            async with self._connection(timeout) as conn:
                cur = await conn.execute(sql, params)
                return await cur.fetchone()

    async def _all(self, what: str, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with translate(what):
            async with self._connection() as conn:
                cur = await conn.execute(sql, params)
                return await cur.fetchall()

    # -- records -------------------------------------------------------------------------

    async def verify_row(self, stream: str | None, seq: int | None,
                         event_id: uuid.UUID | None, scope: Scope) -> tuple[Any, ...] | None:
        """``VERIFY_COLUMNS`` and ``ERASED_COLUMNS`` of one record, by (stream, seq) or by
        event id among the streams of ``scope`` (the caller checks a stream it names against
        the scope); by event id, the original (never a copy), then ``EVENT_COLUMNS``."""
        if event_id is not None:
            return await self._by_event("verify", "verify_event", event_id, scope)
        return await self._one("verify", self._q["verify_seq"], (stream, Int8(seq)))

    async def record(self, stream: str, seq: int, with_bytes: bool) -> tuple[Any, ...] | None:
        return await self._one("record", self._q["full_seq" if with_bytes else "meta_seq"],
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
        return await self._one(what, self._q[query].format(scope=cond), (event_id, *params))

    async def page(self, stream: str, after_seq: int, limit: int,
                   with_bytes: bool = False) -> list[tuple[Any, ...]]:
        """Up to ``limit`` records of ``stream`` after ``after_seq``, in seq order."""
        return await self._all("records", self._q["full_page" if with_bytes else "meta_page"],
                               (stream, Int8(after_seq), limit))

    def _served_sql(self) -> str:
        v = f'"{self.views}"'
        return (f"select r.stream, r.seq, r.record_digest, r.event_id, "
                f"r.response_content_type, r.response_bytes, {_erased_sql(v, 'r')}, "
                f"r.record_bytes, r.log_partition, r.log_offset, "
                f"(select n.hash from {v}.tree_nodes n where n.stream = r.stream "
                f"and n.level = 0 and n.idx = r.seq - 1) "
                f"from {v}.records r ")

    async def replay(self, content_key: bytes, scope: Scope, stream: str | None,
                     seq: int | None) -> tuple[Any, ...] | None:
        """The earliest COMMITTED record with ``content_key`` that ``scope`` may read, as
        ``api.evidence.SERVE_COLUMNS`` (checked there before anything is served)."""
        cond, params = scope.sql("r.stream")
        sql = (self._served_sql() + f"where r.content_key = %s and r.outcome = 'COMMITTED' "
               f"and r.response_bytes is not null and {cond}")
        args: list[Any] = [content_key, *params]
        if stream is not None:
            sql += " and r.stream = %s"
            args.append(stream)
        if seq is not None:
            sql += " and r.seq = %s"
            args.append(Int8(seq))
        sql += " order by r.occurred_at_us, r.log_partition, r.log_offset limit 1"
        return await self._one("replay", sql, tuple(args))

    async def served_record(self, stream: str, seq: int) -> tuple[Any, ...] | None:
        """Record ``seq`` of ``stream`` (the earliest copy) as ``api.evidence.SERVE_COLUMNS``."""
        sql = (self._served_sql() + "where r.stream = %s and r.seq = %s "
               "order by r.log_partition, r.log_offset limit 1")
        return await self._one("record", sql, (stream, Int8(seq)))

    async def add_finding(self, stream: str, seq: int, kind: str, detail: str,
                          partition: int, offset: int) -> None:
        """A finding in the live generation (through its view), unless the same kind is
        already recorded for that record."""
        v = f'"{self.views}"'
        sql = (f"insert into {v}.findings (stream, seq, kind, detail, log_partition, "
               f"log_offset) select %s, %s, %s, %s, %s, %s where not exists (select 1 from "
               f"{v}.findings where stream = %s and seq = %s and kind = %s)")
        with translate("finding"):
            async with self._connection() as conn:
                await conn.execute(sql, (stream, Int8(seq), kind, detail, partition,
                                         Int8(offset), stream, Int8(seq), kind))

    # -- streams -------------------------------------------------------------------------

    async def streams(self, scope: Scope, after: str | None, limit: int) -> list[tuple[Any, ...]]:
        cond, params = scope.sql()
        sql = f'select {", ".join(HEAD_COLUMNS)} from "{self.views}".heads where {cond}'
        args: list[Any] = list(params)
        if after is not None:
            sql += " and stream > %s"
            args.append(after)
        sql += " order by stream limit %s"
        args.append(limit)
        return await self._all("streams", sql, tuple(args))

    async def stream(self, stream: str, findings_limit: int
                     ) -> tuple[tuple[Any, ...] | None, list[tuple[Any, ...]], int]:
        """The head of ``stream``, its first findings, and how many findings it has."""
        with translate("stream"):
            async with self._connection() as conn:
                head = await (await conn.execute(self._q["head"], (stream,))).fetchone()
                findings = await (await conn.execute(
                    self._q["findings"], (stream, findings_limit))).fetchall()
                count = (await (await conn.execute(
                    self._q["findings_count"], (stream,))).fetchone())[0]
        return head, findings, count

    # -- audit ---------------------------------------------------------------------------

    async def audit_chunks(self, stream: str, chunk: int = 500) -> AsyncIterator[list[tuple[Any, ...]]]:
        """Every ``records`` row of ``stream`` (``RECORD_COLUMNS``) in log order, in chunks,
        through a server-side cursor: a long stream is streamed, never loaded at once."""
        from projections.rows import RECORD_COLUMNS

        sql = (f'select {", ".join(RECORD_COLUMNS)} from "{self.views}".records '
               f"where stream = %s order by log_partition, log_offset")
        with translate("audit"):
            async with self._connection() as conn:
                async with conn.transaction():
                    async with conn.cursor(name="stream_audit") as cur:
                        await cur.execute(sql, (stream,))
                        while rows := await cur.fetchmany(chunk):
                            yield rows

    async def redaction(self, fresh: bool = False) -> Any:
        """The redaction policy the live generation was built with
        (``projections.redact.Policy``), or None: no policy, or a generation older than the
        redaction table. Cached for a few seconds (a rebuild swaps it) unless ``fresh``."""
        import time

        from projections.redact import parse

        now = time.monotonic()
        cached = getattr(self, "_redaction_cache", None)
        if cached is not None and not fresh and now - cached[1] < 5.0:
            return cached[0]
        v = f'"{self.views}"'
        exists = await self._one("redaction", "select to_regclass(%s) is not null",
                                 (f"{v}.redaction",))
        rows = (await self._all("redaction", f"select policy from {v}.redaction", ())
                if exists and exists[0] else [])
        policy = parse(rows[0][0]) if rows and rows[0][0] is not None else None
        self._redaction_cache = (policy, now)
        return policy

    async def erased_keys(self, stream: str) -> set[str]:
        """The key ids (32 hex) of ``stream``'s records that an erasure names."""
        v = f'"{self.views}"'
        rows = await self._all("erased keys", (
            f"select distinct e.key_id from {v}.erasures e where e.key_id in "
            f"(select r.key_id from {v}.records r where r.stream = %s "
            f"and r.key_id is not null)"), (stream,))
        return {bytes(r[0]).hex() for r in rows}

    async def head(self, stream: str) -> tuple[Any, ...] | None:
        return await self._one("head", self._q["head"], (stream,))

    async def head_seq(self, stream: str) -> int | None:
        """The head's seq of ``stream``; None when it has no records."""
        row = await self._one("head", self._q["head_seq"], (stream,))
        return None if row is None else row[0]

    async def findings(self, stream: str, limit: int) -> tuple[list[tuple[Any, ...]], int]:
        """The projector's first ``limit`` findings for ``stream`` and how many there are."""
        with translate("findings"):
            async with self._connection() as conn:
                rows = await (await conn.execute(self._q["findings"], (stream, limit))).fetchall()
                count = (await (await conn.execute(
                    self._q["findings_count"], (stream,))).fetchone())[0]
        return rows, count

    # -- the verifiable log -------------------------------------------------------------

    async def checkpoint(self, stream: str, tree_size: int | None, max_cosignatures: int
                         ) -> tuple[tuple[int, bytes, bytes] | None, list[str]]:
        """(tree_size, root, note) of the latest checkpoint of ``stream`` (or the one of
        ``tree_size``), and the cosignature lines held for it."""
        with translate("checkpoint"):
            async with self._connection() as conn:
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

    async def bundle_proofs(self, stream: str, seq: int, known_size: int | None,
                            max_cosignatures: int) -> tuple[Any, list[str], Any]:
        """What an evidence bundle of record ``seq`` needs, on one connection in two round
        trips: ``((tree_size, root, note) of the latest checkpoint, its cosignature lines,
        {(level, index): hash} of the nodes of the record's inclusion proof and of the
        consistency proof from ``known_size``)``. The nodes are None when the projected tree
        is smaller than the checkpoint (catching up) and {} when no checkpoint covers
        ``seq``."""
        from evidence_contract.merkle import consistency_nodes, inclusion_nodes

        v = f'"{self.views}"'
        head = (f"select c.tree_size, c.root, c.note, t.size, array(select s.line from "
                f"{v}.cosignatures s where s.stream = c.stream and s.tree_size = c.tree_size "
                f"order by s.witness, s.key_id limit %s) from {v}.checkpoints c "
                f"left join {v}.trees t on t.stream = c.stream "
                f"where c.stream = %s order by c.tree_size desc limit 1")
        with translate("bundle"):
            async with self._connection() as conn:
                row = await (await conn.execute(head, (max_cosignatures, stream))).fetchone()
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

    async def tree(self, stream: str) -> tuple[int, bytes] | None:
        """The projected tree of ``stream``: (size, root); None before its first record."""
        row = await self._one("tree", self._q["tree"], (stream,))
        return None if row is None else (int(row[0]), bytes(row[1]))

    async def nodes(self, stream: str, wanted: list[tuple[int, int]]
                    ) -> dict[tuple[int, int], bytes]:
        """The stored perfect subtree hashes of ``stream`` at ``wanted`` (level, index)."""
        if not wanted:
            return {}
        rows = await self._all("tree nodes", self._q["nodes"],
                               ([lv for lv, _ in wanted], [i for _, i in wanted], stream))
        return {(int(lv), int(i)): bytes(h) for lv, i, h in rows}

    async def stream_hashes(self, stream: str, level: int, start: int, count: int
                            ) -> list[tuple[int, bytes]]:
        """``(index, hash)`` of ``stream``'s stored subtree hashes at ``level``, indexes
        ``start`` to ``start + count - 1`` that the projection holds, in order."""
        rows = await self._all("stream hash tile", self._q["stream_hashes"],
                               (stream, level, Int8(start), Int8(start + count)))
        return [(int(i), bytes(h)) for i, h in rows]

    # -- the deployment log (docs/witnessing.md) -------------------------------------------

    async def log_checkpoint(self, max_cosignatures: int
                             ) -> tuple[tuple[int, bytes, bytes] | None, list[str]]:
        """(tree_size, root, note) of the latest deployment checkpoint whose root the
        projected tree has not contradicted, and the cosignature lines held for it."""
        row = await self._one("log checkpoint", self._q["log_checkpoint"], (max_cosignatures,))
        if row is None:
            return None, []
        return (int(row[0]), bytes(row[1]), bytes(row[2])), list(row[3] or [])

    async def log_size(self) -> int | None:
        """The size of that checkpoint: how much of the deployment tree is signed."""
        row = await self._one("log size", self._q["log_size"], ())
        return None if row is None else int(row[0])

    async def log_hashes(self, level: int, start: int, count: int) -> list[tuple[int, bytes]]:
        """``(index, hash)`` of the deployment tree's stored subtree hashes at ``level``,
        indexes ``start`` to ``start + count - 1`` that the projection holds, in order."""
        rows = await self._all("log hash tile", self._q["log_hashes"],
                               (level, Int8(start), Int8(start + count)))
        return [(int(i), bytes(h)) for i, h in rows]

    async def log_entries(self, start: int, count: int) -> list[tuple[int, bytes]]:
        """``(index, entry)`` of the deployment log's entries ``start`` to ``start + count -
        1`` that the projection holds, in order."""
        rows = await self._all("log entry bundle", self._q["log_entries"],
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

        with translate("log cover"):
            async with self._connection() as conn:
                latest = row(await (await conn.execute(
                    self._q["log_checkpoint"], (max_cosignatures,))).fetchone())
                if latest is None:
                    return None, None, []
                cosigned = row(await (await conn.execute(
                    self._q["log_checkpoint_cosigned"], (max_cosignatures,))).fetchone())
                found = await (await conn.execute(self._q["log_covering"], (
                    stream, Int8(seq), Int8(latest[0]), candidates))).fetchall()
        return cosigned, latest, [(int(i), int(n), bytes(e)) for i, n, e in found]

    async def log_path_nodes(self, log_wanted: list[tuple[int, int]], stream: str,
                             stream_wanted: list[tuple[int, int]]
                             ) -> tuple[dict[tuple[int, int], bytes], dict[tuple[int, int], bytes]]:
        """The stored subtree hashes ``{(level, idx): hash}`` of the deployment tree at
        ``log_wanted`` and of ``stream``'s tree at ``stream_wanted``, on one connection."""
        def nodes(rows: list[Any]) -> dict[tuple[int, int], bytes]:
            return {(int(lv), int(i)): bytes(h) for lv, i, h in rows}

        with translate("log path nodes"):
            async with self._connection() as conn:
                log = nodes(await (await conn.execute(self._q["log_nodes"], (
                    [lv for lv, _ in log_wanted], [i for _, i in log_wanted]))).fetchall())
                own = {} if not stream_wanted else nodes(await (await conn.execute(
                    self._q["nodes"], ([lv for lv, _ in stream_wanted],
                                       [i for _, i in stream_wanted], stream))).fetchall())
        return log, own

    # -- health --------------------------------------------------------------------------

    async def lag(self) -> tuple[int, int, float | None]:
        """(total projection lag in records, number of tracked partitions, seconds since the
        projector's last heartbeat or None when it has not beaten)."""
        # A readiness probe must answer quickly even when the pool is exhausted.
        row = await self._one("lag", self._q["lag"], (), timeout=min(self.timeout, 2.0))
        if not row:
            return 0, 0, None
        return int(row[0]), int(row[1]), (None if row[2] is None else float(row[2]))
