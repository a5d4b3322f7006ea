"""PostgreSQL side of the projections: the only module (with ``ddl``) that talks to psycopg.

One connection in autocommit mode; every change runs in an explicit ``transaction()``, and a
batch nested in a longer transaction (a rebuild's final catch-up under the live lock) becomes
a savepoint. psycopg errors are translated to :class:`StoreError` (keeping the SQLSTATE, and
whether a new connection may succeed: ``transient``) in :meth:`Store._errors`, the one place
that does so. The connection carries ``application_name`` (``ProjectorConfig``, by default
``evidence-projector``), which is how an operator (or a test) finds the projector's backends
in ``pg_stat_activity``.

A batch (:meth:`Store.apply`) is one transaction, in this order:

1. ``select generation from <meta>.live for share`` (projector only): a swap takes the row
   ``FOR UPDATE``, so it waits for this batch and the next batch sees the new generation.
   If the live generation is not the one being written, raise ``GenerationChanged``.
2. Lock this generation's position rows ``FOR UPDATE`` and check they are where this writer
   left them; if another writer moved them, raise ``PositionsMoved``. Two projectors (or a
   projector and an in-place rebuild) on one generation therefore serialise batch by batch
   and never store a message twice.
3. Read the heads of the batch's streams, fold (pure), then write: records by binary COPY,
   heads and findings pipelined, positions (next offset, high watermark) in one statement.
4. Commit: rows and positions become visible together, so a crash at any point loses no row
   and duplicates none; the restarted projector seeks to the committed positions.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping

import psycopg
from psycopg import errors as pg_errors
from psycopg.types.string import BytesBinaryDumper

from . import ddl
from .config import ProjectorConfig
from .errors import GenerationChanged, PositionsMoved, StoreError
from .fold import Folded, Message, ProjectedHead, Record, fold
from .rows import RECORD_COLUMNS, RECORD_TYPES

__all__ = ["GenerationInfo", "Store", "StreamSummary", "is_transient"]

CONNECT_TIMEOUT_S = 5  # a server that does not answer fails the connect, then it is retried

# SQLSTATE classes of failures of the connection or the server rather than of the statement:
# 08 connection exception, 40 transaction rollback (serialisation, deadlock), 53 insufficient
# resources, 57 operator intervention (admin shutdown, crash shutdown, cannot connect now),
# 58 system error; and 55P03 lock not available.
_TRANSIENT_CLASSES = frozenset({"08", "40", "53", "57", "58"})


def is_transient(e: psycopg.Error) -> bool:
    """Whether ``e`` may not happen again on a new connection (see ``_TRANSIENT_CLASSES``)."""
    if isinstance(e, (psycopg.OperationalError, psycopg.InterfaceError)) and e.sqlstate is None:
        return True  # no answer from the server: refused, reset, closed, timed out
    state = e.sqlstate or ""
    return state[:2] in _TRANSIENT_CLASSES or state == "55P03"

GenerationInfo = tuple[str, str, Any, Any]  # name, state, created_at, swapped_at
StreamSummary = tuple[int, bytes, bytes]     # count, chain digest, digest of record bytes


class Store:
    """The projections' database; connect with :meth:`open` or ``with Store(cfg) as s``."""

    def __init__(self, cfg: ProjectorConfig) -> None:
        self.cfg = cfg
        self.meta = cfg.meta_schema
        self._conn: psycopg.Connection | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> "Store":
        with self._errors("connect"):
            self._conn = conn = psycopg.connect(self.cfg.database_url, autocommit=True,
                                                application_name=self.cfg.application_name,
                                                connect_timeout=CONNECT_TIMEOUT_S)
            # With set_types("bytea") COPY picks the last dumper registered for bytea's oid,
            # which is psycopg.Binary's pure-Python one; re-registering the bytes dumper makes
            # it the C one (~20 us a row less for a record's five bytea columns).
            conn.adapters.register_dumper(bytes, BytesBinaryDumper)
        return self

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass  # a connection the server already dropped
            self._conn = None

    def __enter__(self) -> "Store":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None:
            raise StoreError("store is not open")
        return self._conn

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except psycopg.Error as e:
            raise StoreError(f"PostgreSQL: {what}: {e}", sqlstate=e.sqlstate,
                             transient=is_transient(e)) from e

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction (a savepoint when nested); errors translated."""
        with self._errors("transaction"), self.conn.transaction():
            yield

    def _lock_meta(self) -> None:
        # Serialises creating the meta schema and the first generation between processes.
        self.conn.execute("select pg_advisory_xact_lock(hashtext(%s))", (f"{self.meta}.ddl",))

    # -- generations -----------------------------------------------------------------------

    def live_generation(self, create: bool = False) -> str | None:
        """The live generation; with ``create``, make and swap in an empty one if none is."""
        with self.transaction():
            self._lock_meta()
            ddl.ensure_meta(self.conn, self.meta)
            row = self.conn.execute(f'select generation from "{self.meta}".live').fetchone()
            if row or not create:
                return row[0] if row else None
            gen = ddl.create_generation(self.conn, self.meta, self.cfg.generation_prefix)
            ddl.make_live(self.conn, gen, self.meta, self.cfg.views_schema)
            return gen

    def create_generation(self, indexes: bool = True) -> str:
        """A new, empty generation in state ``building`` (see ``ddl.create_generation``)."""
        with self.transaction():
            self._lock_meta()
            return ddl.create_generation(self.conn, self.meta, self.cfg.generation_prefix,
                                         indexes)

    def create_indexes(self, gen: str) -> None:
        with self.transaction():
            ddl.create_indexes(self.conn, gen)

    def lock_live(self) -> str | None:
        """Inside a transaction: take the live row ``FOR UPDATE``; returns the live name."""
        with self._errors("lock live"):
            row = self.conn.execute(
                f'select generation from "{self.meta}".live for update').fetchone()
        return row[0] if row else None

    def make_live(self, gen: str) -> str | None:
        """Swap ``gen`` in (inside the caller's transaction); returns the previous one."""
        with self._errors("make live"):
            return ddl.make_live(self.conn, gen, self.meta, self.cfg.views_schema)

    def generations(self) -> list[GenerationInfo]:
        with self._errors("list generations"):
            ddl.ensure_meta(self.conn, self.meta)
            return [tuple(r) for r in self.conn.execute(
                f'select name, state, created_at, swapped_at from "{self.meta}".generations '
                f"order by created_at, name")]

    def drop_generation(self, gen: str, *, in_transaction: bool = False) -> None:
        """Drop ``gen`` (never the live one).

        ``DROP SCHEMA`` needs an exclusive lock on every table, so it waits for readers that
        are still in a query on the old generation; waiting is right, waiting forever is not:
        each attempt has a ``lock_timeout``, and a blocked attempt is retried (a queued
        exclusive lock would otherwise hold up new readers behind it).
        """
        timeout_ms, attempts = self.cfg.drop_lock_timeout_ms, self.cfg.drop_attempts
        for attempt in range(1, attempts + 1):
            try:
                with self.transaction():
                    self.conn.execute(f"set local lock_timeout = {int(timeout_ms)}")
                    live = self.conn.execute(
                        f'select generation from "{self.meta}".live for share').fetchone()
                    if live and live[0] == gen:
                        raise StoreError(f"refusing to drop the live generation {gen}")
                    ddl.drop_generation(self.conn, gen, self.meta)
                return
            except StoreError as e:
                if e.sqlstate != pg_errors.LockNotAvailable.sqlstate or attempt == attempts:
                    raise
                time.sleep(min(0.1 * attempt, 1.0))

    # -- positions and batches ---------------------------------------------------------------

    def positions(self, gen: str, topic: str) -> dict[int, int]:
        with self._errors("read positions"):
            return dict(self.conn.execute(
                f'select partition, next_offset from "{gen}".positions where topic = %s',
                (topic,)).fetchall())

    # -- heartbeat ---------------------------------------------------------------------------

    def follow(self, gen: str) -> None:
        """Before projecting into ``gen``: make sure it has a heartbeat table and, when it is
        the live generation, that the views schema shows it (generations older than the
        heartbeat have neither); under the live row's share lock, so no swap runs between."""
        with self.transaction():
            row = self.conn.execute(
                f'select generation from "{self.meta}".live for share').fetchone()
            ddl.ensure_heartbeat(self.conn, gen)
            views = self.cfg.views_schema
            if row and row[0] == gen and self.conn.execute(
                    "select to_regclass(%s) is null",
                    (f'"{views}".heartbeat',)).fetchone()[0]:
                self.conn.execute(f'create schema if not exists "{views}"')
                self.conn.execute(f'create view "{views}".heartbeat as '
                                  f'select * from "{gen}".heartbeat')

    def beat(self, gen: str, topic: str, end_offsets: Mapping[int, int]) -> bool:
        """The heartbeat: ``end_offsets`` (partition -> the log's end as Kafka said it just
        now) stamped with the server's ``now()``. Only into the live generation, under the
        live row's share lock (a swap, and the drop of the generation it retires, wait);
        False, nothing written, when ``gen`` is no longer live (the next batch says so)."""
        parts = sorted(end_offsets)
        with self.transaction():
            row = self.conn.execute(
                f'select generation from "{self.meta}".live for share').fetchone()
            if row is None or row[0] != gen:
                return False
            self.conn.execute(
                f'insert into "{gen}".heartbeat as h (topic, partition, end_offset, beat_at) '
                f"select %s, p, e, now() from unnest(%s::int[], %s::bigint[]) v(p, e) "
                f"on conflict (topic, partition) do update "
                f"set end_offset = excluded.end_offset, beat_at = excluded.beat_at",
                (topic, parts, [end_offsets[p] for p in parts]))
        return True

    def heartbeat(self, gen: str) -> tuple[float | None, dict[int, int]]:
        """(seconds since ``gen``'s last heartbeat or None if it has none, end offsets)."""
        with self._errors("read heartbeat"):
            if self.conn.execute("select to_regclass(%s) is null",
                                 (f'"{gen}".heartbeat',)).fetchone()[0]:
                return None, {}
            rows = self.conn.execute(
                f"select partition, end_offset, extract(epoch from now() - beat_at)::float8 "
                f'from "{gen}".heartbeat').fetchall()
        ages = [r[2] for r in rows]
        return (min(ages) if ages else None), {r[0]: r[1] for r in rows}

    def apply(self, gen: str, topic: str, expected: Mapping[int, int],
              messages: Iterable[Message], reached: Mapping[int, int],
              watermarks: Mapping[int, int], *, follow_live: bool) -> Folded:
        """Fold and write one batch in one transaction; see the module docstring.

        ``expected`` is where this writer believes each partition stands (its last commit
        or seek), ``reached`` the partitions' consumer positions after the batch (ends of
        partition reached, beyond control records), ``watermarks`` the high watermarks the
        consumer last saw. ``messages`` may be lazy (decoded while the COPY runs); it is
        iterated once. Returns what was written.
        """
        conn = self.conn
        with self.transaction():
            # 1. the live generation, shared: a swap waits for this batch
            if follow_live:
                row = conn.execute(
                    f'select generation from "{self.meta}".live for share').fetchone()
                if row is None or row[0] != gen:
                    raise GenerationChanged(row[0] if row else None)
            # 2. positions: ours, and locked until commit
            parts = sorted(expected)
            conn.execute(
                f'insert into "{gen}".positions (topic, partition, next_offset) '
                f"select %s, p, 0 from unnest(%s::int[]) p on conflict do nothing",
                (topic, parts))
            stored = dict(conn.execute(
                f'select partition, next_offset from "{gen}".positions '
                f"where topic = %s order by partition for update", (topic,)).fetchall())
            if any(stored.get(p, 0) != expected[p] for p in parts):
                raise PositionsMoved(stored)
            # 3. records by binary COPY while they are decoded (the server ingests one
            #    buffer while the next rows are decoded), then fold, then the rest
            decoded = self._copy_records(gen, messages) if messages else []
            streams = sorted({m.stream for m in decoded if isinstance(m, Record)})
            heads = self._heads(gen, streams) if streams else {}
            folded = fold(heads, decoded)
            if folded.heads:
                with conn.cursor() as cur:
                    cur.executemany(
                        f'insert into "{gen}".heads ({", ".join(ProjectedHead.COLUMNS)}) '
                        f"values (%s, %s, %s, %s, %s, %s, %s) "
                        f"on conflict (stream) do update set seq = excluded.seq, "
                        f"record_digest = excluded.record_digest, "
                        f"record_count = excluded.record_count, "
                        f"first_at = excluded.first_at, last_at = excluded.last_at, "
                        f"missing = excluded.missing",
                        [h.row() for h in folded.heads.values()])
            if folded.findings:
                # The finding's log position goes to the table's log_partition/log_offset.
                with conn.cursor() as cur:
                    cur.executemany(
                        f'insert into "{gen}".findings (stream, seq, kind, detail, '
                        f"log_partition, log_offset) values (%s, %s, %s, %s, %s, %s)",
                        [(f.stream, f.seq, f.kind, f.detail, f.partition, f.offset)
                         for f in folded.findings])
            nxt = {p: max(expected[p], folded.next_offsets.get(p, 0), reached.get(p, 0))
                   for p in parts}
            conn.execute(
                f'update "{gen}".positions p set next_offset = v.n, updated_at = now(), '
                f"high_watermark = greatest(coalesce(v.h, p.high_watermark), v.n) "
                f"from unnest(%s::int[], %s::bigint[], %s::bigint[]) v(p, n, h) "
                f"where p.topic = %s and p.partition = v.p",
                (parts, [nxt[p] for p in parts], [watermarks.get(p) for p in parts], topic))
        # 4. committed
        return Folded(folded.rows, folded.heads, folded.findings, nxt)

    def _heads(self, gen: str, streams: list[str]) -> dict[str, ProjectedHead]:
        rows = self.conn.execute(
            f'select {", ".join(ProjectedHead.COLUMNS)} '
            f'from "{gen}".heads where stream = any(%s)', (streams,)).fetchall()
        return {r[0]: ProjectedHead.of_row(tuple(r)) for r in rows}

    def _copy_records(self, gen: str, messages: Iterable[Message]) -> list[Message]:
        """COPY the rows of the Records among ``messages``; returns the messages, consumed
        (``messages`` may be a lazy iterable that decodes as it goes)."""
        out: list[Message] = []
        with self.conn.cursor() as cur, cur.copy(
                f'copy "{gen}".records ({", ".join(RECORD_COLUMNS)}) '
                f"from stdin (format binary)") as copy:
            copy.set_types(RECORD_TYPES)
            for m in messages:
                out.append(m)
                if isinstance(m, Record):
                    copy.write_row(m.row)
        return out

    # -- checks for a rebuild --------------------------------------------------------------

    def stream_summaries(self, gen: str, bounds: Mapping[int, int]) -> dict[str, StreamSummary]:
        """Per stream, over records below ``bounds`` (partition -> next offset): count,
        sha256 of the record_digests in seq order, sha256 of their messages' sha256s."""
        arr = _bounds_array(bounds)
        order = "order by seq, log_partition, log_offset"
        with self._errors("summarise records"):
            return {r[0]: (r[1], r[2], r[3]) for r in self.conn.execute(
                f"select stream, count(*), sha256(string_agg(record_digest, ''::bytea {order})),"
                f" sha256(string_agg(sha256(record_bytes), ''::bytea {order})) "
                f'from "{gen}".records '
                f"where log_offset < (%s::bigint[])[log_partition + 1] group by stream",
                (arr,))}

    def finding_keys(self, gen: str, bounds: Mapping[int, int]) -> list[tuple[Any, ...]]:
        """The findings below ``bounds`` as sorted (partition, offset, kind, stream, seq)."""
        with self._errors("list findings"):
            return [tuple(r) for r in self.conn.execute(
                f"select log_partition, log_offset, kind, stream, seq "
                f'from "{gen}".findings '
                f"where log_offset < (%s::bigint[])[log_partition + 1] "
                f"order by 1, 2, 3", (_bounds_array(bounds),))]

    def try_rebuild_lock(self) -> bool:
        """Take the session-level rebuild lock for this meta schema, if free."""
        with self._errors("rebuild lock"):
            return self.conn.execute("select pg_try_advisory_lock(hashtext(%s))",
                                     (f"{self.meta}.rebuild",)).fetchone()[0]

    # -- status ----------------------------------------------------------------------------

    def generation_status(self, gen: str) -> tuple[int, list[tuple[Any, ...]]]:
        """(records projected, [(topic, partition, next_offset, high_watermark, updated_at)])."""
        with self._errors("status"):
            count = self.conn.execute(
                f'select coalesce(sum(record_count), 0) from "{gen}".heads').fetchone()[0]
            pos = [tuple(r) for r in self.conn.execute(
                f"select topic, partition, next_offset, high_watermark, updated_at "
                f'from "{gen}".positions order by topic, partition')]
        return int(count), pos


def _bounds_array(bounds: Mapping[int, int]) -> list[int]:
    # PostgreSQL arrays are 1-based: element p + 1 is partition p's bound.
    return [bounds.get(p, 0) for p in range(max(bounds, default=-1) + 1)]
