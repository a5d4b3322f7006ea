"""The one PostgreSQL connection the role stores share, and what every role's batch does:
with :mod:`projections.ddl` (which takes this connection), the only module of the
projections that imports psycopg.

:class:`Connection` opens the connection (autocommit; every change in an explicit
:meth:`~Connection.transaction`, a savepoint when nested) and translates psycopg's errors
into :class:`StoreError` in :meth:`~Connection.errors`, the one place that does so (keeping
the SQLSTATE, and whether a new connection may succeed: ``transient``). The role stores
(:mod:`projections.generations`, :mod:`projections.liveness`, :mod:`projections.records`,
:mod:`projections.trees`, :mod:`projections.sidefeeds`, :mod:`projections.logstore`) each
hold the same :class:`Connection`, as the recorders of ``eventsourcing`` share one datastore,
so a batch of one role and a swap of another can run in one transaction.

The steps every batch takes whatever its topic (the numbers of :mod:`projections.store`'s
docstring): :meth:`Connection.share_live` (1), :func:`lock_positions` (2),
:func:`insert_findings` and :func:`move_positions` (3).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Iterator, Mapping

import psycopg
from psycopg import errors as pg_errors
from psycopg.types.string import BytesBinaryDumper

from evidence_contract.chain import Finding

from .config import ProjectorConfig
from .errors import GenerationChanged, PositionsMoved, StoreError

__all__ = ["CONNECT_TIMEOUT_S", "LOCK_NOT_AVAILABLE", "Connection", "PgConnection",
           "bounds_array", "connect", "errors", "insert_findings", "is_transient",
           "lock_positions", "move_positions", "next_positions"]

CONNECT_TIMEOUT_S = 5  # a server that does not answer fails the connect, then it is retried

# SQLSTATE classes of failures of the connection or the server rather than of the statement:
# 08 connection exception, 40 transaction rollback (serialisation, deadlock), 53 insufficient
# resources, 57 operator intervention (admin shutdown, crash shutdown, cannot connect now),
# 58 system error; and 55P03 lock not available.
_TRANSIENT_CLASSES = frozenset({"08", "40", "53", "57", "58"})
LOCK_NOT_AVAILABLE = pg_errors.LockNotAvailable.sqlstate  # 55P03: a lock_timeout ran out
PgConnection = psycopg.Connection  # what Connection.conn is, for the role stores' signatures


def is_transient(e: psycopg.Error) -> bool:
    """Whether ``e`` may not happen again on a new connection (see ``_TRANSIENT_CLASSES``)."""
    if isinstance(e, (psycopg.OperationalError, psycopg.InterfaceError)) and e.sqlstate is None:
        return True  # no answer from the server: refused, reset, closed, timed out
    state = e.sqlstate or ""
    return state[:2] in _TRANSIENT_CLASSES or state == LOCK_NOT_AVAILABLE


@contextmanager
def errors(what: str) -> Iterator[None]:
    """psycopg errors inside become :class:`StoreError` (``from e``, SQLSTATE kept)."""
    try:
        yield
    except psycopg.Error as e:
        raise StoreError(f"PostgreSQL: {what}: {e}", sqlstate=e.sqlstate,
                         transient=is_transient(e)) from e


def connect(cfg: ProjectorConfig) -> psycopg.Connection:
    """A new autocommit connection as ``cfg`` says (its ``application_name``: how an
    operator, or a test, finds the projector's backends in ``pg_stat_activity``)."""
    return psycopg.connect(cfg.database_url, autocommit=True,
                           application_name=cfg.application_name,
                           connect_timeout=CONNECT_TIMEOUT_S)


class Connection:
    """The connection the role stores share; opened by :meth:`open`, never in ``__init__``."""

    def __init__(self, cfg: ProjectorConfig) -> None:
        self.cfg = cfg
        self.meta = cfg.meta_schema
        self._conn: psycopg.Connection | None = None

    def open(self) -> "Connection":
        with errors("connect"):
            self._conn = conn = connect(self.cfg)
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

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None:
            raise StoreError("store is not open")
        return self._conn

    errors = staticmethod(errors)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction (a savepoint when nested); errors translated."""
        with errors("transaction"), self.conn.transaction():
            yield

    def has_table(self, gen: str, table: str) -> bool:
        """Whether ``gen`` has ``table`` (generations older than a table lack it)."""
        return not self.conn.execute("select to_regclass(%s) is null",
                                     (f'"{gen}".{table}',)).fetchone()[0]

    def live(self, lock: str = "share") -> str | None:
        """Inside a transaction: the live generation's name, its row locked ``for share``
        (a swap waits) or ``for update`` (a swap)."""
        row = self.conn.execute(
            f'select generation from "{self.meta}".live for {lock}').fetchone()
        return row[0] if row else None

    def share_live(self, gen: str) -> None:
        """Step 1 of a batch into the live generation: its row shared, so a swap waits for
        this batch; ``GenerationChanged`` unless ``gen`` is the live one."""
        live = self.live()
        if live != gen:
            raise GenerationChanged(live)

    def advisory_lock(self, name: str) -> None:
        """Inside a transaction: serialise on ``name`` (of this meta schema's) until commit."""
        self.conn.execute("select pg_advisory_xact_lock(hashtext(%s))", (name,))

    def copies_natively(self) -> bool:
        """Whether COPY tuples made outside psycopg (text as UTF-8) can be written as they
        are: on a connection of another encoding every row goes through ``write_row``."""
        return self.conn.info.encoding == "utf-8"


def next_positions(parts: Iterable[int], expected: Mapping[int, int],
                   next_offsets: Mapping[int, int], reached: Mapping[int, int]) -> dict[int, int]:
    """Where each of ``parts`` stands after a batch: past its last message and its consumer
    position (``reached``), never behind where it stood (``expected``)."""
    return {p: max(expected[p], next_offsets.get(p, 0), reached.get(p, 0)) for p in parts}


def lock_positions(conn: psycopg.Connection, gen: str, topic: str,
                   expected: Mapping[int, int]) -> list[int]:
    """Step 2 of a batch: lock ``topic``'s position rows; raise ``PositionsMoved`` unless they
    are at ``expected``. Returns the partitions, sorted."""
    parts = sorted(expected)
    with conn.pipeline():  # one round trip for both
        conn.execute(
            f'insert into "{gen}".positions (topic, partition, next_offset) '
            f"select %s, p, 0 from unnest(%s::int[]) p on conflict do nothing",
            (topic, parts))
        cur = conn.execute(
            f'select partition, next_offset from "{gen}".positions '
            f"where topic = %s and partition = any(%s) order by partition for update",
            (topic, parts))
    stored = dict(cur.fetchall())
    if any(stored.get(p, 0) != expected[p] for p in parts):
        raise PositionsMoved(stored)
    return parts


def move_positions(conn: psycopg.Connection, gen: str, topic: str, parts: list[int],
                   expected: Mapping[int, int], next_offsets: Mapping[int, int],
                   reached: Mapping[int, int], watermarks: Mapping[int, int]
                   ) -> dict[int, int]:
    """Last write of a batch: where each partition now stands; returns that."""
    nxt = next_positions(parts, expected, next_offsets, reached)
    conn.execute(
        f'update "{gen}".positions p set next_offset = v.n, updated_at = now(), '
        f"high_watermark = greatest(coalesce(v.h, p.high_watermark), v.n) "
        f"from unnest(%s::int[], %s::bigint[], %s::bigint[]) v(p, n, h) "
        f"where p.topic = %s and p.partition = v.p",
        (parts, [nxt[p] for p in parts], [watermarks.get(p) for p in parts], topic))
    return nxt


def insert_findings(conn: psycopg.Connection, gen: str, findings: list[Finding],
                    topic: str | None = None) -> None:
    """Findings at log positions; with ``topic`` (another topic than the log) their position
    is in the detail and the log position columns stay null, so that they are never taken
    for a position on the log."""
    if not findings:
        return
    with conn.cursor() as cur:
        cur.executemany(
            f'insert into "{gen}".findings (stream, seq, kind, detail, '
            f"log_partition, log_offset) values (%s, %s, %s, %s, %s, %s)",
            [(f.stream, f.seq, f.kind, f.detail, f.partition, f.offset) if topic is None
             else (f.stream, f.seq, f.kind,
                   f"{f.detail} ({topic} partition {f.partition} offset {f.offset})",
                   None, None)
             for f in findings])


def bounds_array(bounds: Mapping[int, int]) -> list[int]:
    """``bounds`` (partition -> offset) as a PostgreSQL array: arrays are 1-based, so element
    p + 1 is partition p's bound."""
    return [bounds.get(p, 0) for p in range(max(bounds, default=-1) + 1)]
