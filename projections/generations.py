"""The generations role: which generation is live, making, swapping, dropping and describing
generations, the redaction policy each was built with, and the swaps accepted with
differences.

A generation is a schema of its own (:mod:`projections.ddl`); the live one is named by the
one row of ``<meta>.live``, which a batch into it shares and a swap takes ``FOR UPDATE``
(:meth:`GenerationStore.lock_live`, :meth:`GenerationStore.make_live`), so readers see the
old generation or the new one, never a mix.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from . import ddl
from .errors import StoreError
from .pg import LOCK_NOT_AVAILABLE, Connection, connect, errors
from .redact import parse as parse_policy

__all__ = ["INDEX_BUILDERS", "AcceptedSwap", "GenerationInfo", "GenerationStore"]

INDEX_BUILDERS = 8
"""Index builds side by side: all of a generation's (six) at once. Each build is one scan of
the records and a sort; the scan of a wide table is most of it, and builds that start
together share one pass over the heap (PostgreSQL's synchronized scans). 200k records of
1 KiB: one at a time 2.1 s, two 1.2-1.5 s, all six 1.1 s (measured here, 2 cores). Each may
use ``maintenance_work_mem``."""

GenerationInfo = tuple[str, str, Any, Any]  # name, state, created_at, swapped_at


class AcceptedSwap(NamedTuple):
    """A row of ``<meta>.accepted_swaps`` (:data:`projections.ddl.ACCEPTED_SWAPS`)."""

    id: int
    accepted_at: Any
    accepted_by: str
    db_user: str
    reason: str
    previous: str
    generation: str
    differences: list[str]
    verdict: list[str]


_ACCEPTED_COLUMNS = ", ".join(AcceptedSwap._fields)


class GenerationStore:
    """Generations on the shared :class:`~projections.pg.Connection` ``db``."""

    def __init__(self, db: Connection) -> None:
        self.db = db
        self.meta = db.meta
        # Generations bulk-loading without their secondary indexes (a rebuild's step 2), and
        # the hashes of the event ids put into each so far: the records role reads it (see
        # projections.records.RecordStore.judge_event_ids).
        self.bulk_ids: dict[str, set[int]] = {}

    def _lock_meta(self) -> None:
        # Serialises creating the meta schema and the first generation between processes.
        self.db.advisory_lock(f"{self.meta}.ddl")

    def live_generation(self, create: bool = False) -> str | None:
        """The live generation; with ``create``, make and swap in an empty one if none is."""
        db = self.db
        with db.transaction():
            self._lock_meta()
            ddl.ensure_meta(db.conn, self.meta)
            row = db.conn.execute(f'select generation from "{self.meta}".live').fetchone()
            if row or not create:
                return row[0] if row else None
            gen = ddl.create_generation(db.conn, self.meta, db.cfg.generation_prefix,
                                        redaction=db.cfg.redaction())
            ddl.make_live(db.conn, gen, self.meta, db.cfg.views_schema)
            return gen

    def create_generation(self, indexes: bool = True) -> str:
        """A new, empty generation in state ``building`` (see ``ddl.create_generation``),
        recording the redaction policy configured now (re-read: a rebuild applies the file
        as it is)."""
        policy = self.db.cfg.redaction()
        with self.db.transaction():
            self._lock_meta()
            gen = ddl.create_generation(self.db.conn, self.meta, self.db.cfg.generation_prefix,
                                        indexes, redaction=policy)
        if not indexes:
            self.bulk_ids[gen] = set()
        return gen

    def redaction(self, gen: str) -> tuple[bool, Any]:
        """``(recorded, policy)``: the redaction policy ``gen`` was built with (a
        ``projections.redact.Policy`` or None); ``recorded`` is false for a generation
        older than the redaction table that no projector has followed yet."""
        with errors("read redaction"):
            if not self.db.has_table(gen, "redaction"):
                return False, None
            row = self.db.conn.execute(f'select policy from "{gen}".redaction').fetchone()
        if row is None:
            return False, None
        return True, None if row[0] is None else parse_policy(row[0])

    def record_redaction(self, gen: str, policy: Any) -> None:
        with self.db.transaction():
            ddl.record_redaction(self.db.conn, gen, policy)

    def create_indexes(self, gen: str) -> None:
        """Add the indexes a bulk-loaded ``gen`` was made without, ``INDEX_BUILDERS`` at a
        time, each on a connection of its own.

        An index build is one scan of its table and a sort, in one server process: the
        records' five, one after another, were a third of a 200k-record rebuild on a 2-core
        machine, one core idle. Side by side, each build single-process (the server's own
        parallel build workers would only contend for the same cores), they take the cores
        there are and share their scans (:data:`INDEX_BUILDERS`). A failure leaves the
        generation half-indexed: it is still ``building``, so it is never made live, and the
        next rebuild drops it."""
        def build(statement: str) -> None:
            with errors("create index"), connect(self.db.cfg) as conn:
                conn.execute("set max_parallel_maintenance_workers = 0")
                conn.execute(statement)

        builds, attaches = ddl.index_statements(gen)
        with ThreadPoolExecutor(INDEX_BUILDERS, thread_name_prefix="index") as pool:
            for done in [pool.submit(build, st) for st in builds]:
                done.result()
        with self.db.transaction():
            for statement in attaches:
                self.db.conn.execute(statement)
            ddl.ensure_erasures(self.db.conn, gen)
            ddl.ensure_traces(self.db.conn, gen)
        self.bulk_ids.pop(gen, None)  # event ids are looked up by index from now on

    def lock_live(self) -> str | None:
        """Inside a transaction: take the live row ``FOR UPDATE``; returns the live name."""
        with errors("lock live"):
            return self.db.live("update")

    def make_live(self, gen: str) -> str | None:
        """Swap ``gen`` in (inside the caller's transaction); returns the previous one."""
        with errors("make live"):
            return ddl.make_live(self.db.conn, gen, self.meta, self.db.cfg.views_schema)

    def generations(self) -> list[GenerationInfo]:
        with errors("list generations"):
            ddl.ensure_meta(self.db.conn, self.meta)
            return [tuple(r) for r in self.db.conn.execute(
                f'select name, state, created_at, swapped_at from "{self.meta}".generations '
                f"order by created_at, name")]

    def record_accepted_swap(self, previous: str, generation: str, reason: str, by: str,
                             differences: list[str], verdict: list[str]) -> AcceptedSwap:
        """Inside the swap's transaction: record that ``generation`` replaced ``previous``
        although they differed (``differences``), on ``by``'s word (``reason``), and what
        the log said of both (``verdict``); returns the row as stored."""
        with errors("record accepted swap"):
            row = self.db.conn.execute(
                f'insert into "{self.meta}".accepted_swaps (accepted_by, reason, previous, '
                f"generation, differences, verdict) values (%s, %s, %s, %s, %s, %s) "
                f"returning {_ACCEPTED_COLUMNS}",
                (by, reason, previous, generation, differences, verdict)).fetchone()
        return AcceptedSwap(*row)

    def accepted_swaps(self, limit: int = 5) -> tuple[int, list[AcceptedSwap]]:
        """(how many swaps were accepted with differences, the latest ``limit``, newest
        first)."""
        conn = self.db.conn
        with errors("list accepted swaps"):
            ddl.ensure_meta(conn, self.meta)
            n = conn.execute(f'select count(*) from "{self.meta}".accepted_swaps').fetchone()[0]
            rows = conn.execute(
                f'select {_ACCEPTED_COLUMNS} from "{self.meta}".accepted_swaps '
                f"order by id desc limit %s", (limit,)).fetchall()
        return int(n), [AcceptedSwap(*r) for r in rows]

    def drop_generation(self, gen: str) -> None:
        """Drop ``gen`` (never the live one).

        ``DROP SCHEMA`` needs an exclusive lock on every table, so it waits for readers that
        are still in a query on the old generation; waiting is right, waiting forever is not:
        each attempt has a ``lock_timeout``, and a blocked attempt is retried (a queued
        exclusive lock would otherwise hold up new readers behind it).
        """
        timeout_ms, attempts = self.db.cfg.drop_lock_timeout_ms, self.db.cfg.drop_attempts
        for attempt in range(1, attempts + 1):
            try:
                with self.db.transaction():
                    self.db.conn.execute(f"set local lock_timeout = {int(timeout_ms)}")
                    if self.db.live() == gen:
                        raise StoreError(f"refusing to drop the live generation {gen}")
                    ddl.drop_generation(self.db.conn, gen, self.meta)
                return
            except StoreError as e:
                if e.sqlstate != LOCK_NOT_AVAILABLE or attempt == attempts:
                    raise
                time.sleep(min(0.1 * attempt, 1.0))

    def try_rebuild_lock(self) -> bool:
        """Take the session-level rebuild lock for this meta schema, if free."""
        with errors("rebuild lock"):
            return self.db.conn.execute("select pg_try_advisory_lock(hashtext(%s))",
                                        (f"{self.meta}.rebuild",)).fetchone()[0]

    def positions(self, gen: str, topic: str) -> dict[int, int]:
        """Where ``gen`` stands on each partition of ``topic`` (next offset to project)."""
        with errors("read positions"):
            return dict(self.db.conn.execute(
                f'select partition, next_offset from "{gen}".positions where topic = %s',
                (topic,)).fetchall())

    def generation_status(self, gen: str) -> tuple[int, list[tuple[Any, ...]]]:
        """(records projected, [(topic, partition, next_offset, high_watermark, updated_at)])."""
        with errors("status"):
            count = self.db.conn.execute(
                f'select coalesce(sum(record_count), 0) from "{gen}".heads').fetchone()[0]
            pos = [tuple(r) for r in self.db.conn.execute(
                f"select topic, partition, next_offset, high_watermark, updated_at "
                f'from "{gen}".positions order by topic, partition')]
        return int(count), pos
