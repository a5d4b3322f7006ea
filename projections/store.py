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
   on a partition they both write, and never store a message twice; only the batch's own
   partitions are locked, so projectors that own different partitions (scale-out,
   :mod:`projections.service`) write side by side.
3. Read the heads of the batch's streams, fold (pure), then write: records by binary COPY,
   heads and findings pipelined; the records' Merkle tree nodes (binary COPY) and each
   stream's tree size and root (:mod:`projections.tlog`), and the verdict on checkpoints
   that were waiting for their trees to reach their size; positions (next offset, high
   watermark) in one statement. A batch of ``evidence.checkpoints``
   (:meth:`Store.apply_checkpoints`), of ``evidence.erasures`` (:meth:`Store.apply_erasures`)
   and of ``<prefix>.tree`` (:meth:`Store.apply_log`, the deployment log) takes the same steps
   with its own positions.
4. Commit: rows and positions become visible together, so a crash at any point loses no row
   and duplicates none; the restarted projector seeks to the committed positions.
"""

from __future__ import annotations

import struct
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple

import psycopg
from psycopg import errors as pg_errors
from psycopg.types.string import BytesBinaryDumper

from evidence_contract.chain import Finding, Sighting, event_id_findings
from evidence_contract.merkle import CompactRange, range_nodes, root_from, root_nodes

from . import ddl, logtree, tlog
from .config import ProjectorConfig
from .errors import GenerationChanged, PositionsMoved, StoreError
from .fastrows import COPY_SIGNATURE, COPY_TRAILER
from .fold import Folded, Message, ProjectedHead, Record, fold, row_event_key, sightings
from .notify import heads_channel, payload as notice
from .rows import RECORD_COLUMNS, RECORD_TYPES

__all__ = ["AcceptedSwap", "GenerationInfo", "Store", "StreamSummary", "is_transient",
           "next_positions"]

CONNECT_TIMEOUT_S = 5  # a server that does not answer fails the connect, then it is retried
_COPY_CHUNK = 64 * 1024  # compiled COPY tuples are sent in buffers of about this size
INDEX_BUILDERS = 8
"""Index builds side by side: all of a generation's (six) at once. Each build is one scan of
the records and a sort; the scan of a wide table is most of it, and builds that start
together share one pass over the heap (PostgreSQL's synchronized scans). 200k records of
1 KiB: one at a time 2.1 s, two 1.2-1.5 s, all six 1.1 s (measured here, 2 cores). Each may
use ``maintenance_work_mem``."""

# SQLSTATE classes of failures of the connection or the server rather than of the statement:
# 08 connection exception, 40 transaction rollback (serialisation, deadlock), 53 insufficient
# resources, 57 operator intervention (admin shutdown, crash shutdown, cannot connect now),
# 58 system error; and 55P03 lock not available.
_SIGHTING_COLUMNS = ("event_id", "stream", "seq", "occurred_at_us", "log_partition",
                     "log_offset")  # chain.Sighting's fields
_TRANSIENT_CLASSES = frozenset({"08", "40", "53", "57", "58"})


def is_transient(e: psycopg.Error) -> bool:
    """Whether ``e`` may not happen again on a new connection (see ``_TRANSIENT_CLASSES``)."""
    if isinstance(e, (psycopg.OperationalError, psycopg.InterfaceError)) and e.sqlstate is None:
        return True  # no answer from the server: refused, reset, closed, timed out
    state = e.sqlstate or ""
    return state[:2] in _TRANSIENT_CLASSES or state == "55P03"

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
StreamSummary = tuple[int, bytes, bytes]     # count, chain digest, digest of record bytes


_NODE_FIELDS = struct.Struct(">ihiqi")  # int2 level (length 2), int8 idx (8), bytea length


def _node_tuples(nodes: Iterable[tuple[str, int, int, bytes]]) -> bytes:
    """The binary COPY data (signature, tuples, trailer) of ``tree_nodes`` rows
    ``(stream, level, idx, hash)``: per tuple the field count, then each field's length and
    bytes (text as UTF-8, int2 and int8 big-endian), as psycopg's ``write_row`` writes them."""
    out = bytearray(COPY_SIGNATURE)
    heads: dict[str, bytes] = {}
    pack = _NODE_FIELDS.pack
    for stream, level, idx, digest in nodes:
        head = heads.get(stream)
        if head is None:
            b = stream.encode("utf-8")
            head = heads[stream] = b"\x00\x04" + len(b).to_bytes(4, "big") + b
        out += head
        out += pack(2, level, 8, idx, len(digest))
        out += digest
    out += COPY_TRAILER
    return bytes(out)


def next_positions(parts: Iterable[int], expected: Mapping[int, int],
                   next_offsets: Mapping[int, int], reached: Mapping[int, int]) -> dict[int, int]:
    """Where each of ``parts`` stands after a batch: past its last message and its consumer
    position (``reached``), never behind where it stood (``expected``)."""
    return {p: max(expected[p], next_offsets.get(p, 0), reached.get(p, 0)) for p in parts}


class Store:
    """The projections' database; connect with :meth:`open` or ``with Store(cfg) as s``."""

    def __init__(self, cfg: ProjectorConfig) -> None:
        self.cfg = cfg
        self.meta = cfg.meta_schema
        self._conn: psycopg.Connection | None = None
        # Generations bulk-loading without their secondary indexes (a rebuild's step 2): the
        # hashes of the event ids put into each so far (see _judge_event_ids).
        self._bulk_ids: dict[str, set[int]] = {}

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
            # See ProjectorConfig.synchronous_commit: why not waiting for the flush is safe.
            conn.execute("select set_config('synchronous_commit', %s, false)",
                         (self.cfg.synchronous_commit,))
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
            gen = ddl.create_generation(self.conn, self.meta, self.cfg.generation_prefix,
                                        redaction=self.cfg.redaction())
            ddl.make_live(self.conn, gen, self.meta, self.cfg.views_schema)
            return gen

    def create_generation(self, indexes: bool = True) -> str:
        """A new, empty generation in state ``building`` (see ``ddl.create_generation``),
        recording the redaction policy configured now (re-read: a rebuild applies the file
        as it is)."""
        policy = self.cfg.redaction()
        with self.transaction():
            self._lock_meta()
            gen = ddl.create_generation(self.conn, self.meta, self.cfg.generation_prefix,
                                        indexes, redaction=policy)
        if not indexes:
            self._bulk_ids[gen] = set()
        return gen

    def redaction(self, gen: str) -> tuple[bool, Any]:
        """``(recorded, policy)``: the redaction policy ``gen`` was built with (a
        ``projections.redact.Policy`` or None); ``recorded`` is false for a generation
        older than the redaction table that no projector has followed yet."""
        from .redact import parse

        with self._errors("read redaction"):
            if self.conn.execute("select to_regclass(%s) is null",
                                 (f'"{gen}".redaction',)).fetchone()[0]:
                return False, None
            row = self.conn.execute(f'select policy from "{gen}".redaction').fetchone()
        if row is None:
            return False, None
        return True, None if row[0] is None else parse(row[0])

    def record_redaction(self, gen: str, policy: Any) -> None:
        with self.transaction():
            ddl.record_redaction(self.conn, gen, policy)

    def create_indexes(self, gen: str) -> None:
        """Add the indexes a bulk-loaded ``gen`` was made without, ``INDEX_BUILDERS`` at a
        time, each on a connection of its own.

        An index build is one scan of its table and a sort, in one server process: the
        records' five, one after another, were a third of a 200k-record rebuild on a 2-core
        machine, one core idle. Side by side, each build single-process (the server's own
        parallel build workers would only contend for the same cores), they take the
        cores there are and share their scans (:data:`INDEX_BUILDERS`). A failure leaves the generation half-indexed: it is still
        ``building``, so it is never made live, and the next rebuild drops it."""
        from concurrent.futures import ThreadPoolExecutor

        def build(statement: str) -> None:
            with self._errors("create index"), psycopg.connect(
                    self.cfg.database_url, autocommit=True,
                    application_name=self.cfg.application_name,
                    connect_timeout=CONNECT_TIMEOUT_S) as conn:
                conn.execute("set max_parallel_maintenance_workers = 0")
                conn.execute(statement)

        builds, attaches = ddl.index_statements(gen)
        with ThreadPoolExecutor(INDEX_BUILDERS, thread_name_prefix="index") as pool:
            for done in [pool.submit(build, st) for st in builds]:
                done.result()
        with self.transaction():
            for statement in attaches:
                self.conn.execute(statement)
            ddl.ensure_erasures(self.conn, gen)
        self._bulk_ids.pop(gen, None)  # event ids are looked up by index from now on

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

    def record_accepted_swap(self, previous: str, generation: str, reason: str, by: str,
                             differences: list[str], verdict: list[str]) -> AcceptedSwap:
        """Inside the swap's transaction: record that ``generation`` replaced ``previous``
        although they differed (``differences``), on ``by``'s word (``reason``), and what
        the log said of both (``verdict``); returns the row as stored."""
        with self._errors("record accepted swap"):
            row = self.conn.execute(
                f'insert into "{self.meta}".accepted_swaps (accepted_by, reason, previous, '
                f"generation, differences, verdict) values (%s, %s, %s, %s, %s, %s) "
                f"returning {_ACCEPTED_COLUMNS}",
                (by, reason, previous, generation, differences, verdict)).fetchone()
        return AcceptedSwap(*row)

    def accepted_swaps(self, limit: int = 5) -> tuple[int, list[AcceptedSwap]]:
        """(how many swaps were accepted with differences, the latest ``limit``, newest
        first)."""
        with self._errors("list accepted swaps"):
            ddl.ensure_meta(self.conn, self.meta)
            n = self.conn.execute(
                f'select count(*) from "{self.meta}".accepted_swaps').fetchone()[0]
            rows = self.conn.execute(
                f'select {_ACCEPTED_COLUMNS} from "{self.meta}".accepted_swaps '
                f"order by id desc limit %s", (limit,)).fetchall()
        return int(n), [AcceptedSwap(*r) for r in rows]

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

    def notify_heads(self, streams: Iterable[str]) -> None:
        """After a live batch committed: tell the API's waiters which heads moved (see
        :mod:`projections.notify`; a statement of its own, never inside a batch)."""
        with self._errors("notify heads"):
            self.conn.execute("select pg_notify(%s, %s)",
                              (heads_channel(self.cfg.views_schema), notice(streams)))

    # -- heartbeat ---------------------------------------------------------------------------

    def follow(self, gen: str) -> None:
        """Before projecting into ``gen``: make sure it has a heartbeat table and the
        verifiable log's tables and, when it is the live generation, that the views schema
        shows them (generations older than those have neither); under the live row's share
        lock, so no swap runs between."""
        with self.transaction():
            # Projectors starting side by side would race to create the same tables and
            # views (the loser failing on a duplicate name): one at a time.
            self.conn.execute("select pg_advisory_xact_lock(hashtext(%s))",
                              (f"{self.meta}.follow",))
            row = self.conn.execute(
                f'select generation from "{self.meta}".live for share').fetchone()
            ddl.ensure_heartbeat(self.conn, gen)
            ddl.ensure_tlog(self.conn, gen)
            ddl.ensure_erasures(self.conn, gen)
            ddl.ensure_redaction(self.conn, gen)
            ddl.ensure_logtree(self.conn, gen)
            views = self.cfg.views_schema
            for table in ("heartbeat", "tree_nodes", "trees", "checkpoints", "cosignatures",
                          "erasures", "redaction", "log_entries", "log_nodes",
                          "log_checkpoints", "log_cosignatures"):
                if row and row[0] == gen and self.conn.execute(
                        "select to_regclass(%s) is null",
                        (f'"{views}".{table}',)).fetchone()[0]:
                    self.conn.execute(f'create schema if not exists "{views}"')
                    self.conn.execute(f'create view "{views}".{table} as '
                                      f'select * from "{gen}".{table}')
            if row and row[0] == gen and not self.conn.execute(
                    "select 1 from information_schema.columns where table_schema = %s "
                    "and table_name = 'records' and column_name = 'key_id'",
                    (views,)).fetchone():
                # A records view made before the key id column: the column was added last,
                # so the view can be replaced in place (readers keep reading).
                self.conn.execute(f'create or replace view "{views}".records as '
                                  f'select * from "{gen}".records')

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

    def heartbeat(self, gen: str) -> tuple[float | None, dict[tuple[str, int], int]]:
        """(seconds since ``gen``'s oldest partition heartbeat or None if it has none, end
        offsets by (topic, partition)). Several projectors each beat the partitions they
        own; the oldest beat is the one that says whether every partition is being
        projected. Keyed by topic too: the same partition numbers of the checkpoints and
        erasures topics have other ends than the log's."""
        with self._errors("read heartbeat"):
            if self.conn.execute("select to_regclass(%s) is null",
                                 (f'"{gen}".heartbeat',)).fetchone()[0]:
                return None, {}
            rows = self.conn.execute(
                f"select topic, partition, end_offset, "
                f"extract(epoch from now() - beat_at)::float8 "
                f'from "{gen}".heartbeat').fetchall()
        ages = [r[3] for r in rows]
        return (max(ages) if ages else None), {(r[0], r[1]): r[2] for r in rows}

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
            parts = self._lock_positions(gen, topic, expected)
            # 3. records by binary COPY while they are decoded (the server ingests one
            #    buffer while the next rows are decoded), then fold, then the rest
            decoded = self._copy_records(gen, messages) if messages else []
            streams = sorted({m.stream for m in decoded if isinstance(m, Record)})
            heads = self._heads(gen, streams) if streams else {}
            folded = fold(heads, decoded)
            folded = self._judge_event_ids(gen, folded)
            # the records' Merkle trees, and the checkpoints that waited for them (a COPY:
            # before the pipeline below, which cannot hold one)
            checked = self._grow_trees(gen, decoded)
            # The writes whose answers nothing waits for go in one pipeline: one round trip
            # to the server, not one each (most of a small batch's time was round trips).
            with conn.pipeline():
                nxt = self._write_batch(gen, topic, parts, expected, folded, checked,
                                        reached, watermarks)
        # 4. committed
        return Folded(folded.rows, folded.heads, folded.findings + checked, nxt)

    def _write_batch(self, gen: str, topic: str, parts: list[int], expected: Mapping[int, int],
                     folded: Folded, checked: list[Finding], reached: Mapping[int, int],
                     watermarks: Mapping[int, int]) -> dict[int, int]:
        """Inside a batch: the new heads, the findings and the positions; returns those."""
        conn = self.conn
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
        self._insert_findings(gen, checked, self.cfg.checkpoint_topic)
        return self._move_positions(gen, topic, parts, expected, folded.next_offsets,
                                    reached, watermarks)

    def _lock_positions(self, gen: str, topic: str, expected: Mapping[int, int]) -> list[int]:
        """Inside a batch: lock ``topic``'s position rows; raise ``PositionsMoved`` unless they
        are at ``expected``. Returns the partitions, sorted."""
        parts = sorted(expected)
        with self.conn.pipeline():  # one round trip for both
            self.conn.execute(
                f'insert into "{gen}".positions (topic, partition, next_offset) '
                f"select %s, p, 0 from unnest(%s::int[]) p on conflict do nothing",
                (topic, parts))
            cur = self.conn.execute(
                f'select partition, next_offset from "{gen}".positions '
                f"where topic = %s and partition = any(%s) order by partition for update",
                (topic, parts))
        stored = dict(cur.fetchall())
        if any(stored.get(p, 0) != expected[p] for p in parts):
            raise PositionsMoved(stored)
        return parts

    def _move_positions(self, gen: str, topic: str, parts: list[int],
                        expected: Mapping[int, int], next_offsets: Mapping[int, int],
                        reached: Mapping[int, int], watermarks: Mapping[int, int]
                        ) -> dict[int, int]:
        """Inside a batch: store where each partition now stands; returns that."""
        nxt = next_positions(parts, expected, next_offsets, reached)
        self.conn.execute(
            f'update "{gen}".positions p set next_offset = v.n, updated_at = now(), '
            f"high_watermark = greatest(coalesce(v.h, p.high_watermark), v.n) "
            f"from unnest(%s::int[], %s::bigint[], %s::bigint[]) v(p, n, h) "
            f"where p.topic = %s and p.partition = v.p",
            (parts, [nxt[p] for p in parts], [watermarks.get(p) for p in parts], topic))
        return nxt

    def _judge_event_ids(self, gen: str, folded: Folded,
                         before_lookup: Any = None) -> Folded:
        """``folded`` plus its ``duplicate_event_id`` findings: the batch's records against
        every record of the generation with the same event_id, in any stream (the batch's
        own rows are already in the table, and are told apart by position).

        Projectors that own different partitions write one generation side by side, and
        a batch's own rows are invisible to the others until it commits: two batches with the
        same event_id would each find nothing. So the check is made under a lock on the
        generation's event_ids, held until commit: the second batch sees the first's rows
        (read committed takes a new snapshot per statement) and ``event_id_findings`` flags
        exactly the records that are not the first by order, whichever committed first. One
        lock for all ids rather than one per id: a batch holds thousands, more than the
        server's lock table is sized for; the decode and COPY, most of a batch, stay
        parallel."""
        seen = self._bulk_ids.get(gen)
        if seen is not None:
            # A bulk load (rebuild step 2: one writer, no index on event_id yet), where the
            # lookup below would scan the whole table every batch. ``seen`` holds the hash
            # of every event id this Store has put into ``gen`` (it made ``gen``: that is all
            # of them), so a batch none of whose ids is in it has no earlier record to be
            # judged against and needs no lookup; and one whose ids are all distinct has no
            # finding at all. A hash collision, or the ids of a batch rolled back, cost one
            # lookup more, never a missed one.
            ids = [hash(row_event_key(r)) for r in folded.rows]
            before = not seen.isdisjoint(ids)
            seen.update(ids)
            if not before:
                if len(set(ids)) == len(ids):
                    return folded
                found = event_id_findings((), sightings(folded))
                return folded if not found else Folded(
                    folded.rows, folded.heads, folded.findings + found, folded.next_offsets)
        new = sightings(folded)
        if not new:
            return folded
        if before_lookup is not None:
            before_lookup()  # a bulk load: every batch before this one committed first
        self.conn.execute("select pg_advisory_xact_lock(hashtext(%s))", (f"{gen}.event_ids",))
        batch = {(r[0], r[1]) for r in folded.rows}  # log_partition, log_offset
        rows = self.conn.execute(
            f"select {', '.join(_SIGHTING_COLUMNS)} from \"{gen}\".records "
            f"where event_id = any(%s::uuid[])",
            (sorted({s.event_id for s in new}),)).fetchall()
        known = [Sighting(str(r[0]), *r[1:]) for r in rows if (r[4], r[5]) not in batch]
        found = event_id_findings(known, new)
        if not found:
            return folded
        return Folded(folded.rows, folded.heads, folded.findings + found, folded.next_offsets)

    def _heads(self, gen: str, streams: list[str]) -> dict[str, ProjectedHead]:
        rows = self.conn.execute(
            f'select {", ".join(ProjectedHead.COLUMNS)} '
            f'from "{gen}".heads where stream = any(%s)', (streams,)).fetchall()
        return {r[0]: ProjectedHead.of_row(tuple(r)) for r in rows}

    def _copy_records(self, gen: str, messages: Iterable[Message]) -> list[Message]:
        """COPY the rows of the Records among ``messages``; returns the messages, consumed
        (``messages`` may be a lazy iterable that decodes as it goes).

        A Record of the compiled row path carries its COPY tuple (``Record.copy``), written
        as it is; any other goes through ``write_row``. The two mix in one COPY: the
        signature is written first, so ``write_row`` adds none, and psycopg ends a COPY that
        had rows written with the trailer; one without gets it here. The tuples hold text as
        UTF-8: on a connection of another encoding every row goes through ``write_row``."""
        out: list[Message] = []
        tuples = bytearray()
        by_row = False
        native = self.copies_natively()
        with self.conn.cursor() as cur, self._records_copy(cur, gen) as copy:
            copy.write(COPY_SIGNATURE)
            for m in messages:
                out.append(m)
                if isinstance(m, Record):
                    if m.copy is not None and native:
                        tuples += m.copy
                        if len(tuples) >= _COPY_CHUNK:
                            copy.write(tuples)
                            tuples = bytearray()
                    else:
                        copy.write_row(m.row)
                        by_row = True
            if tuples:
                copy.write(tuples)
            if not by_row:
                copy.write(COPY_TRAILER)
        return out

    # -- a bulk load (projections.bulk) -----------------------------------------------------

    def bulk_state(self, gen: str) -> tuple[dict[str, ProjectedHead], dict[str, CompactRange]]:
        """Every stream's head and tree range in ``gen``: where a bulk load starts. Raises
        ``StoreError`` for a generation that holds checkpoints already (a bulk load folds
        records only: their checkpoints come after, checked as they arrive)."""
        with self._errors("read bulk state"):
            if self.conn.execute(f'select exists (select from "{gen}".checkpoints)').fetchone()[0]:
                raise StoreError(f"{gen} holds checkpoints: it cannot be bulk-loaded")
            streams = [r[0] for r in self.conn.execute(f'select stream from "{gen}".heads')]
            heads = self._heads(gen, streams) if streams else {}
            trees = [r[0] for r in self.conn.execute(f'select stream from "{gen}".trees')]
            ranges = self._ranges(gen, trees) if trees else {}
        return heads, ranges

    def write_bulk(self, gen: str, topic: str, expected: Mapping[int, int], tuples: bytes,
                   rows: list[tuple[Any, ...]], folded: Folded, grown: tlog.Grown,
                   reached: Mapping[int, int], watermarks: Mapping[int, int],
                   before_commit: Callable[[], None] | None = None) -> dict[int, int]:
        """Write one batch a bulk load folded already, in one transaction: the same rows,
        nodes, heads, findings and positions :meth:`apply` writes for it. ``tuples`` are the
        records' binary COPY tuples, or ``rows`` the records rows when some have none.
        ``before_commit`` runs last inside the transaction (an exception from it rolls the
        batch back). Raises ``PositionsMoved`` as ``apply`` does."""
        with self.transaction():
            parts = self._lock_positions(gen, topic, expected)
            if tuples or rows:
                self._copy_tuples(gen, tuples, rows)
            self._write_tree(gen, grown)
            with self.conn.pipeline():
                moved = self._write_batch(gen, topic, parts, expected, folded, [], reached,
                                          watermarks)
            if before_commit is not None:
                before_commit()
            return moved

    def copy_records(self, gen: str, tuples: bytes, rows: list[tuple[Any, ...]],
                     before_commit: Callable[[], None]) -> None:
        """COPY records rows (``tuples`` or ``rows``, as :meth:`write_bulk` takes them) into
        ``gen`` in a transaction of their own, committed only if ``before_commit`` returns
        (its exception rolls them back): a bulk load's second connection."""
        with self.transaction():
            self._copy_tuples(gen, tuples, rows)
            before_commit()

    def _copy_tuples(self, gen: str, tuples: bytes, rows: list[tuple[Any, ...]]) -> None:
        with self.conn.cursor() as cur, self._records_copy(cur, gen) as copy:
            if rows:
                for row in rows:
                    copy.write_row(row)
            else:
                copy.write(COPY_SIGNATURE)
                view = memoryview(tuples)
                for i in range(0, len(view), _COPY_CHUNK):
                    copy.write(view[i:i + _COPY_CHUNK])
                copy.write(COPY_TRAILER)

    def copies_natively(self) -> bool:
        """Whether COPY tuples made outside psycopg (text as UTF-8) can be written as they
        are: on a connection of another encoding every row goes through ``write_row``."""
        return self.conn.info.encoding == "utf-8"

    @staticmethod
    @contextmanager
    def _records_copy(cur: Any, gen: str) -> Iterator[Any]:
        """A binary COPY into ``gen``'s records, its column types set: the caller writes
        rows or tuples."""
        with cur.copy(f'copy "{gen}".records ({", ".join(RECORD_COLUMNS)}) '
                      f"from stdin (format binary)") as copy:
            copy.set_types(RECORD_TYPES)
            yield copy

    # -- the verifiable log (projections.tlog) ---------------------------------------------

    def _has_tlog(self, gen: str) -> bool:
        return not self.conn.execute("select to_regclass(%s) is null",
                                     (f'"{gen}".trees',)).fetchone()[0]

    def _nodes(self, gen: str, wanted: Iterable[tuple[str, int, int]]
               ) -> dict[tuple[str, int, int], bytes]:
        wanted = list(dict.fromkeys(wanted))
        if not wanted:
            return {}
        rows = self.conn.execute(
            f'select n.stream, n.level, n.idx, n.hash from "{gen}".tree_nodes n '
            f"join unnest(%s::text[], %s::int[], %s::bigint[]) w(stream, level, idx) "
            f"on n.stream = w.stream and n.level = w.level and n.idx = w.idx",
            ([w[0] for w in wanted], [w[1] for w in wanted], [w[2] for w in wanted])).fetchall()
        return {(r[0], r[1], r[2]): bytes(r[3]) for r in rows}

    def _roots_at(self, gen: str, wants: Iterable[tuple[str, int]]) -> dict[tuple[str, int], bytes]:
        """The tree root of each (stream, size) from the stored nodes, in one query; a size the
        stored tree does not reach is left out."""
        wants = list(dict.fromkeys(wants))
        nodes = self._nodes(gen, [(s, lv, i) for s, n in wants for lv, i in root_nodes(n)])
        out = {}
        for stream, size in wants:
            try:
                out[(stream, size)] = root_from(size, lambda lv, i: nodes[(stream, lv, i)])
            except KeyError:
                continue
        return out

    def _ranges(self, gen: str, streams: list[str]) -> dict[str, CompactRange]:
        sizes = dict(self.conn.execute(
            f'select stream, size from "{gen}".trees where stream = any(%s)',
            (streams,)).fetchall())
        nodes = self._nodes(gen, [(s, lv, i) for s, n in sizes.items()
                                  for lv, i in range_nodes(n)])
        return {s: CompactRange.from_lookup(n, lambda lv, i, s=s: nodes[(s, lv, i)])
                for s, n in sizes.items()}

    def _grow_trees(self, gen: str, decoded: list[Message]) -> list[Finding]:
        """Inside a batch: append its records to the streams' trees (nodes by binary COPY,
        sizes and roots upserted), then check the checkpoints that were waiting for the
        trees to reach their size. Returns the ``checkpoint_mismatch`` findings."""
        records = sorted((m for m in decoded if isinstance(m, Record)),
                         key=lambda m: (m.partition, m.offset))
        if not records:
            return []
        streams = sorted({m.stream for m in records})
        grown = tlog.grow(self._ranges(gen, streams), [m.row for m in records],
                          [getattr(m, "leaf", None) for m in records])
        if not grown.trees:
            return []
        self._write_tree(gen, grown)
        pending = self.conn.execute(
            f"select c.stream, c.tree_size, c.root, c.log_partition, c.log_offset "
            f'from "{gen}".checkpoints c join "{gen}".trees t on t.stream = c.stream '
            f"where c.root_matches is null and c.stream = any(%s) and c.tree_size <= t.size",
            (sorted(grown.trees),)).fetchall()
        return self._check_roots(gen, [tuple(r) for r in pending])

    def _write_tree(self, gen: str, grown: tlog.Grown) -> None:
        """Inside a batch: the nodes ``grown`` completes (binary COPY), and the new size and
        root of each stream that grew."""
        if not grown.trees:
            return
        with self.conn.cursor() as cur:
            with cur.copy(f'copy "{gen}".tree_nodes (stream, level, idx, hash) '
                          f"from stdin (format binary)") as copy:
                copy.set_types(("text", "int2", "int8", "bytea"))
                if self.copies_natively():
                    # ~2 nodes a record: their binary COPY tuples made here in one buffer
                    # rather than a write_row each (the same bytes; see _node_tuples).
                    copy.write(_node_tuples(grown.nodes))
                else:
                    for node in grown.nodes:
                        copy.write_row(node)
            cur.executemany(
                f'insert into "{gen}".trees (stream, size, root) values (%s, %s, %s) '
                f"on conflict (stream) do update set size = excluded.size, root = excluded.root",
                [(s, cr.size, cr.root()) for s, cr in grown.trees.items()])

    def _check_roots(self, gen: str, cps: list[tuple]) -> list[Finding]:
        """Check stored checkpoints ``(stream, tree_size, root, partition, offset)`` against
        the tree; records whether each matched; returns the mismatches as findings."""
        if not cps:
            return []
        roots = self._roots_at(gen, [(c[0], c[1]) for c in cps])
        findings, verdicts = [], []
        for cp in cps:
            root = roots.get((cp[0], cp[1]))
            if root is None:
                continue  # the stored tree lacks nodes (an old generation): stays unchecked
            f = tlog.check_root(cp, root)
            verdicts.append((cp[0], cp[1], f is None))
            if f is not None:
                findings.append(f)
        if verdicts:
            with self.conn.cursor() as cur:
                cur.executemany(f'update "{gen}".checkpoints set root_matches = %s '
                                f"where stream = %s and tree_size = %s",
                                [(ok, s, n) for s, n, ok in verdicts])
        return findings

    def _insert_findings(self, gen: str, findings: list[Finding], topic: str | None = None) -> None:
        """Findings at log positions; with ``topic`` (another topic than the log) their
        position is in the detail and the log position columns stay null, so that they are
        never taken for a position on the log."""
        if not findings:
            return
        with self.conn.cursor() as cur:
            cur.executemany(
                f'insert into "{gen}".findings (stream, seq, kind, detail, '
                f"log_partition, log_offset) values (%s, %s, %s, %s, %s, %s)",
                [(f.stream, f.seq, f.kind, f.detail, f.partition, f.offset) if topic is None
                 else (f.stream, f.seq, f.kind,
                       f"{f.detail} ({topic} partition {f.partition} offset {f.offset})",
                       None, None)
                 for f in findings])

    def _open_side_batch(self, gen: str, topic: str, expected: Mapping[int, int],
                         messages: list[tuple[int, int, list]], *, follow_live: bool
                         ) -> tuple[list[int], list[Finding], dict[int, int], Iterator[Any]]:
        """Inside a batch of a side topic (checkpoints, erasures), steps 1 and 2 of the module
        docstring: the live generation shared (when ``follow_live``), ``topic``'s positions
        locked and checked. Returns the partitions (sorted), the findings, each partition's
        next offset after ``messages`` (``(partition, offset, decoded items)``), and the
        items that are not findings in log order. The findings list fills as those items are
        iterated, so findings the caller appends between them keep the log order."""
        if follow_live:
            row = self.conn.execute(
                f'select generation from "{self.meta}".live for share').fetchone()
            if row is None or row[0] != gen:
                raise GenerationChanged(row[0] if row else None)
        parts = self._lock_positions(gen, topic, expected)
        ordered = sorted(messages, key=lambda m: (m[0], m[1]))
        next_offsets = {partition: offset + 1 for partition, offset, _items in ordered}
        findings: list[Finding] = []

        def items() -> Iterator[Any]:
            for _partition, _offset, decoded in ordered:
                for item in decoded:
                    if isinstance(item, Finding):
                        findings.append(item)
                    else:
                        yield item

        return parts, findings, next_offsets, items()

    def apply_checkpoints(self, gen: str, topic: str, expected: Mapping[int, int],
                          messages: list[tuple[int, int, list]], reached: Mapping[int, int],
                          watermarks: Mapping[int, int], *, follow_live: bool) -> Folded:
        """Write one batch of ``evidence.checkpoints`` in one transaction, as :meth:`apply`
        does the log's (live share lock, positions locked and checked, positions moved with
        the rows). ``messages`` are ``(partition, offset, projections.tlog.decode_checkpoint
        items)``. A checkpoint is checked against the tree at once when the tree has reached
        its size, else when a later batch of records gets it there. Returns the findings and
        next offsets (``rows`` and ``heads`` empty)."""
        conn = self.conn
        with self.transaction():
            parts, findings, next_offsets, items = self._open_side_batch(
                gen, topic, expected, messages, follow_live=follow_live)
            new_cps: list[tuple] = []
            for item in items:
                if isinstance(item, tlog.CheckpointRow):
                    stored = conn.execute(
                        f'insert into "{gen}".checkpoints as c (stream, tree_size, root, '
                        f"note, log_partition, log_offset) values (%s, %s, %s, %s, %s, %s) "
                        f"on conflict (stream, tree_size) do update set stream = c.stream "
                        f"returning root, log_partition, log_offset",
                        (item.stream, item.tree_size, item.root, item.note, item.partition,
                         item.offset)).fetchone()
                    if (stored[1], stored[2]) == (item.partition, item.offset):
                        new_cps.append((item.stream, item.tree_size, item.root,
                                        item.partition, item.offset))
                    elif bytes(stored[0]) != item.root:
                        findings.append(Finding(
                            tlog.CHECKPOINT_CONFLICT, item.stream, item.tree_size,
                            f"two checkpoints of size {item.tree_size} with different "
                            f"roots: {bytes(stored[0]).hex()} (at {stored[1]}/{stored[2]}) "
                            f"and {item.root.hex()}", item.partition, item.offset))
                else:
                    conn.execute(
                        f'insert into "{gen}".cosignatures (stream, tree_size, witness, '
                        f"key_id, timestamp, line, log_partition, log_offset) "
                        f"values (%s, %s, %s, %s, %s, %s, %s, %s) on conflict do nothing",
                        (item.stream, item.tree_size, item.witness, item.key_id,
                         item.timestamp, item.line, item.partition, item.offset))
            if new_cps:
                sizes = dict(conn.execute(
                    f'select stream, size from "{gen}".trees where stream = any(%s)',
                    (sorted({c[0] for c in new_cps}),)).fetchall())
                findings += self._check_roots(gen, [c for c in new_cps
                                                    if c[1] <= sizes.get(c[0], 0)])
            self._insert_findings(gen, findings, topic)
            nxt = self._move_positions(gen, topic, parts, expected, next_offsets, reached,
                                       watermarks)
        return Folded([], {}, findings, nxt)

    def apply_erasures(self, gen: str, topic: str, expected: Mapping[int, int],
                       messages: list[tuple[int, int, list]], reached: Mapping[int, int],
                       watermarks: Mapping[int, int], *, follow_live: bool) -> Folded:
        """Write one batch of ``evidence.erasures`` in one transaction, as
        :meth:`apply_checkpoints` does (live share lock, positions locked, checked and moved
        with the rows). ``messages`` are ``(partition, offset, projections.erasures.
        decode_receipt items)``; a receipt seen again (same request and key id) is kept once."""
        conn = self.conn
        with self.transaction():
            parts, findings, next_offsets, items = self._open_side_batch(
                gen, topic, expected, messages, follow_live=follow_live)
            rows: list[tuple] = []
            for item in items:
                rows += item.rows()
            if rows:
                with conn.cursor() as cur:
                    cur.executemany(
                        f'insert into "{gen}".erasures (request_id, key_id, erased_at, '
                        f"erased_at_us, note, log_partition, log_offset, reason) values "
                        f"(%s, %s, to_timestamp(%s::float8 / 1e6), %s, %s, %s, %s, %s) "
                        f"on conflict do nothing",
                        [(rid, k, at, at, note, p, o, reason)
                         for rid, k, at, note, p, o, reason in rows])
            self._insert_findings(gen, findings, topic)
            nxt = self._move_positions(gen, topic, parts, expected, next_offsets, reached,
                                       watermarks)
        return Folded([], {}, findings, nxt)

    def apply_log(self, gen: str, topic: str, expected: Mapping[int, int],
                  messages: list[tuple[int, int, list]], reached: Mapping[int, int],
                  watermarks: Mapping[int, int], *, follow_live: bool) -> Folded:
        """Write one batch of ``<prefix>.tree`` (the deployment log) in one transaction, as
        :meth:`apply_checkpoints` does (live share lock, positions locked, checked and moved
        with the rows). ``messages`` are ``(partition, offset, projections.logtree.
        decode_tree_message items)``. The entries extend the deployment tree from its stored
        state (leaf ``idx`` = the entry's rank: the stored size, then one up per entry);
        then the deployment checkpoints and cosignatures are stored, and every checkpoint
        the tree has now reached is checked (``root_matches``). A second checkpoint of one
        size with another root is a ``checkpoint_conflict`` finding and is not stored, nor
        are the cosignatures of it."""
        conn = self.conn
        with self.transaction():
            parts, findings, next_offsets, iterated = self._open_side_batch(
                gen, topic, expected, messages, follow_live=follow_live)
            items = list(iterated)  # the decode findings are in ``findings`` from here
            entries = [i for i in items if isinstance(i, logtree.Entry)]
            size: int | None = None
            if entries:
                grown = logtree.grow_log(self._log_range(gen), entries)
                self._write_log(gen, grown)
                size = grown.tree.size
            roots: dict[int, bytes] = {}  # the stored root of each size this batch names
            checked = False
            for item in items:
                if isinstance(item, logtree.LogCheckpointRow):
                    stored = conn.execute(
                        f'insert into "{gen}".log_checkpoints as c (tree_size, root, note, '
                        f"log_offset) values (%s, %s, %s, %s) on conflict (tree_size) do "
                        f"update set tree_size = c.tree_size returning root, log_offset",
                        (item.tree_size, item.root, item.note, item.offset)).fetchone()
                    roots[item.tree_size] = bytes(stored[0])
                    if stored[1] == item.offset:
                        checked = True
                    elif bytes(stored[0]) != item.root:
                        findings.append(Finding(
                            logtree.CHECKPOINT_CONFLICT, None, item.tree_size,
                            f"two deployment checkpoints of size {item.tree_size} with "
                            f"different roots: {bytes(stored[0]).hex()} (at offset "
                            f"{stored[1]}) and {item.root.hex()}", logtree.PARTITION,
                            item.offset))
                elif isinstance(item, logtree.LogCosignatureRow):
                    if roots.get(item.tree_size) != item.root:
                        continue  # of a checkpoint not stored (a conflict, found above)
                    conn.execute(
                        f'insert into "{gen}".log_cosignatures (tree_size, witness, key_id, '
                        f"timestamp, line, log_offset) values (%s, %s, %s, %s, %s, %s) "
                        f"on conflict do nothing",
                        (item.tree_size, item.witness, item.key_id, item.timestamp,
                         item.line, item.offset))
            if entries or checked:
                findings += self._check_log_roots(gen, size)
            self._insert_findings(gen, findings, topic)
            nxt = self._move_positions(gen, topic, parts, expected, next_offsets, reached,
                                       watermarks)
        return Folded([], {}, findings, nxt)

    def _log_size(self, gen: str) -> int:
        return int(self.conn.execute(
            f'select coalesce(max(idx) + 1, 0) from "{gen}".log_entries').fetchone()[0])

    def _log_nodes(self, gen: str, wanted: Iterable[tuple[int, int]]
                   ) -> dict[tuple[int, int], bytes]:
        wanted = list(dict.fromkeys(wanted))
        if not wanted:
            return {}
        rows = self.conn.execute(
            f'select n.level, n.idx, n.hash from "{gen}".log_nodes n '
            f"join unnest(%s::int[], %s::bigint[]) w(level, idx) "
            f"on n.level = w.level and n.idx = w.idx",
            ([w[0] for w in wanted], [w[1] for w in wanted])).fetchall()
        return {(r[0], r[1]): bytes(r[2]) for r in rows}

    def _log_range(self, gen: str) -> CompactRange:
        """The deployment tree as stored: its size and the nodes that make up its range."""
        size = self._log_size(gen)
        nodes = self._log_nodes(gen, range_nodes(size))
        return CompactRange.from_lookup(size, lambda lv, i: nodes[(lv, i)])

    def _log_roots_at(self, gen: str, sizes: Iterable[int]) -> dict[int, bytes]:
        """The deployment tree's root at each of ``sizes`` from the stored nodes, in one
        query; a size the stored tree does not reach is left out."""
        sizes = list(dict.fromkeys(sizes))
        nodes = self._log_nodes(gen, [n for size in sizes for n in root_nodes(size)])
        out = {}
        for size in sizes:
            try:
                out[size] = root_from(size, lambda lv, i: nodes[(lv, i)])
            except KeyError:
                continue
        return out

    def _write_log(self, gen: str, grown: logtree.LogGrown) -> None:
        """Inside a batch: the entries and the nodes they complete (binary COPY each)."""
        with self.conn.cursor() as cur:
            with cur.copy(f'copy "{gen}".log_entries (idx, stream, tree_size, entry, '
                          f"log_offset) from stdin (format binary)") as copy:
                copy.set_types(("int8", "text", "int8", "bytea", "int8"))
                for row in grown.entries:
                    copy.write_row(row)
            with cur.copy(f'copy "{gen}".log_nodes (level, idx, hash) '
                          f"from stdin (format binary)") as copy:
                copy.set_types(("int2", "int8", "bytea"))
                for node in grown.nodes:
                    copy.write_row(node)

    def _check_log_roots(self, gen: str, size: int | None) -> list[Finding]:
        """Check the stored deployment checkpoints the tree (of ``size`` entries; None: as
        stored) has reached and not yet checked; record the verdicts; return the
        mismatches as findings."""
        if size is None:
            size = self._log_size(gen)
        pending = self.conn.execute(
            f'select tree_size, root, log_offset from "{gen}".log_checkpoints '
            f"where root_matches is null and tree_size <= %s order by tree_size",
            (size,)).fetchall()
        if not pending:
            return []
        roots = self._log_roots_at(gen, [r[0] for r in pending])
        findings, verdicts = [], []
        for n, root, offset in pending:
            tree_root = roots.get(n)
            if tree_root is None:
                continue
            f = logtree.check_root(n, bytes(root), offset, tree_root)
            verdicts.append((f is None, n))
            if f is not None:
                findings.append(f)
        if verdicts:
            with self.conn.cursor() as cur:
                cur.executemany(f'update "{gen}".log_checkpoints set root_matches = %s '
                                f"where tree_size = %s", verdicts)
        return findings

    def log_keys(self, gen: str, bound: int) -> dict[str, Any] | None:
        """What a rebuild compares of ``gen``'s deployment log below offset ``bound`` of the
        tree topic: ``entries`` (count and sha256 over each entry row in order), ``root``
        (the stored tree's root at the count), ``checkpoints`` (size -> (root,
        root_matches)) and ``cosignatures`` (a set of (size, witness, key id, timestamp,
        line)); None for a generation without the tables."""
        with self._errors("list the deployment log"):
            if self.conn.execute("select to_regclass(%s) is null",
                                 (f'"{gen}".log_entries',)).fetchone()[0]:
                return None
            count, digest = self.conn.execute(
                f"select count(*), sha256(coalesce(string_agg(int8send(idx) || "
                f"sha256(convert_to(stream, 'UTF8')) || int8send(tree_size) || "
                f"sha256(entry) || int8send(log_offset), ''::bytea order by idx), ''::bytea)) "
                f'from "{gen}".log_entries where log_offset < %s', (bound,)).fetchone()
            return {
                "entries": (int(count), bytes(digest)),
                "root": self._log_roots_at(gen, [int(count)]).get(int(count)),
                "checkpoints": {r[0]: (bytes(r[1]), r[2]) for r in self.conn.execute(
                    f'select tree_size, root, root_matches from "{gen}".log_checkpoints '
                    f"where log_offset < %s", (bound,))},
                "cosignatures": {tuple(r) for r in self.conn.execute(
                    f"select tree_size, witness, key_id, timestamp, line "
                    f'from "{gen}".log_cosignatures where log_offset < %s', (bound,))},
            }

    def erasure_keys(self, gen: str, bounds: Mapping[int, int]
                     ) -> set[tuple[str, bytes | None, int]] | None:
        """The erasures below ``bounds`` (of the erasures topic) as (request_id, key_id,
        erased_at_us); None for a generation without the table."""
        with self._errors("list erasures"):
            if self.conn.execute("select to_regclass(%s) is null",
                                 (f'"{gen}".erasures',)).fetchone()[0]:
                return None
            return {(r[0], bytes(r[1]) if r[1] is not None else None, r[2])
                    for r in self.conn.execute(
                        f'select request_id, key_id, erased_at_us from "{gen}".erasures '
                        f"where log_offset < (%s::bigint[])[log_partition + 1]",
                        (_bounds_array(bounds),))}

    def tree_sizes(self, gen: str) -> dict[str, int] | None:
        """Every stream's projected tree size; None for a generation without trees."""
        with self._errors("tree sizes"):
            if not self._has_tlog(gen):
                return None
            return dict(self.conn.execute(f'select stream, size from "{gen}".trees').fetchall())

    def tree_roots(self, gen: str, sizes: Mapping[str, int]) -> dict[str, bytes]:
        """Per stream, the root of ``gen``'s tree at ``sizes[stream]`` (absent if it does not
        reach it), from ``gen``'s own stored nodes."""
        with self._errors("tree roots"):
            if not self._has_tlog(gen):
                return {}
            roots = self._roots_at(gen, sizes.items())
        return {s: r for (s, _n), r in roots.items()}

    def checkpoint_keys(self, gen: str, bounds: Mapping[int, int]
                        ) -> dict[tuple[str, int], tuple[bytes, bool | None]] | None:
        """The checkpoints below ``bounds`` (of the checkpoints topic):
        (stream, size) -> (root, root_matches); None for a generation without them."""
        with self._errors("list checkpoints"):
            if not self._has_tlog(gen):
                return None
            return {(r[0], r[1]): (bytes(r[2]), r[3]) for r in self.conn.execute(
                f'select stream, tree_size, root, root_matches from "{gen}".checkpoints '
                f"where log_offset < (%s::bigint[])[log_partition + 1]",
                (_bounds_array(bounds),))}

    # -- checks for a rebuild --------------------------------------------------------------

    def stream_summaries(self, gen: str, bounds: Mapping[int, int]) -> dict[str, StreamSummary]:
        """Per stream, over records below ``bounds`` (partition -> next offset): count,
        sha256 of the record_digests in seq order, sha256 of their messages' sha256s."""
        return self.summaries(gen, bounds, bodies=False)[0]

    def summaries(self, gen: str, bounds: Mapping[int, int], bodies: bool,
                  since: Mapping[int, int] | None = None, part: tuple[int, int] | None = None
                  ) -> tuple[dict[str, StreamSummary], dict[str, bytes] | None]:
        """Per stream, over records below ``bounds`` (partition -> next offset) and at or
        above ``since`` (partition -> offset; none: from 0): count, sha256 of the
        record_digests in seq order and sha256 of their messages' sha256s; with ``bodies``
        also sha256 of the served body columns (what a redaction policy masks) in seq order,
        else None. ``part=(k, n)``: only the streams whose name hashes to ``k`` of ``n``, so
        ``n`` connections can share one generation's scan. One scan of the records: a
        rebuild's pre-swap check reads every row's bytes."""
        from .redact import MASKED

        order = "order by seq, log_partition, log_offset"
        cols = " || ".join(
            f"coalesce(sha256({c}), ''::bytea)" if c != "params" else
            "coalesce(sha256(convert_to(params, 'UTF8')), ''::bytea)" for c in MASKED)
        body = f", sha256(string_agg(b, ''::bytea {order}))" if bodies else ""
        if not any(end > 0 for end in bounds.values()):
            return {}, {} if bodies else None  # nothing below the bounds: no scan
        where, args = "log_offset < (%s::bigint[])[log_partition + 1]", [_bounds_array(bounds)]
        if since:
            # A range of the primary key per partition: a tail is read through the index,
            # so its cost is the tail's, not the table's.
            ranges = [(p, since.get(p, 0), end) for p, end in sorted(bounds.items())
                      if since.get(p, 0) < end]
            if not ranges:
                return {}, {} if bodies else None
            where = "(" + " or ".join(
                "(log_partition = %s and log_offset >= %s and log_offset < %s)"
                for _ in ranges) + ")"
            args = [x for r in ranges for x in r]
        if part is not None:
            where += " and mod(hashtext(stream)::bigint + 2147483648, %s) = %s"
            args += [part[1], part[0]]
        # Each row's bytes are hashed in the scan, below the sort (``offset 0`` keeps the
        # subquery a subquery): sorted as they were, the rows' bytes went through the sort
        # and spilled to disk, a third of a 200k-record rebuild's check.
        with self._errors("summarise records"):
            rows = self.conn.execute(
                f"select stream, count(*), sha256(string_agg(record_digest, ''::bytea {order})),"
                f" sha256(string_agg(h, ''::bytea {order})){body} "
                f"from (select stream, seq, log_partition, log_offset, record_digest, "
                f"sha256(record_bytes) as h{f', {cols} as b' if bodies else ''} "
                f'from "{gen}".records where {where} offset 0) as r '
                f"group by stream",
                args).fetchall()
        return ({r[0]: (r[1], r[2], r[3]) for r in rows},
                {r[0]: bytes(r[4]) for r in rows} if bodies else None)

    def body_summaries(self, gen: str, bounds: Mapping[int, int]) -> dict[str, bytes]:
        """Per stream, over records below ``bounds``: sha256 of the served body columns
        (what a redaction policy masks), in seq order; compares how two generations masked."""
        bodies = self.summaries(gen, bounds, bodies=True)[1]
        assert bodies is not None
        return bodies

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
