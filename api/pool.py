"""The API's connection pool: its life (:meth:`Pool.open`, :meth:`Pool.close`), the check of a
connection as it is handed out, and the one place where database errors become 503s.

Each request runs one indexed query on a pooled autocommit connection: no transaction to open
or close, and psycopg prepares a statement after its fifth use on a connection, so the hot
path is a single round trip.

The pool checks a connection as it hands it out (:func:`check_connection`): after a
PostgreSQL restart or a terminated backend, the pooled connections are dead, and without the
check each would fail one request (503) before the pool replaced it. The check cannot see a
connection whose server is still closing it; a request that meets one runs once more on
another connection (:meth:`Pool.run`).

:func:`translate` is the one place where psycopg and pool errors become
:class:`~api.errors.Unavailable` (503 with Retry-After).
"""

from __future__ import annotations

import contextlib
from typing import Any, Awaitable, Callable, Iterator, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from server.logs import event_logger

from .errors import Unavailable

__all__ = ["APPLICATION_NAME", "Pool", "check_connection", "translate"]

log = event_logger("evidence.api")

T = TypeVar("T")

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


class Pool:
    """Autocommit connections to ``url``, each with a statement timeout; none is made before
    :meth:`open`."""

    def __init__(self, url: str, *, min_size: int, max_size: int, timeout: float,
                 statement_timeout_ms: int) -> None:
        self.timeout = timeout
        self._args = dict(
            conninfo=url, min_size=min_size, max_size=max_size, open=False, timeout=timeout,
            name="evidence-api", check=check_connection,
            kwargs={"autocommit": True, "connect_timeout": max(1, int(timeout)),
                    "application_name": APPLICATION_NAME,
                    "options": f"-c statement_timeout={statement_timeout_ms}"})
        self._pool: AsyncConnectionPool | None = None

    async def open(self) -> None:
        # wait=False: the API starts (and /healthz answers) while PostgreSQL is still coming
        # up; /readyz and every query say 503 until it answers.
        # The pool is made here, inside the running loop, never at import or construction.
        self._pool = AsyncConnectionPool(**self._args)
        await self._pool.open(wait=False)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def connection(self, timeout: float | None = None):
        """A connection for an ``async with``; 503 before :meth:`open` or after :meth:`close`."""
        if self._pool is None:
            raise Unavailable("the API is starting or stopping; retry shortly")
        return self._pool.connection(timeout=timeout)

    async def run(self, what: str, work: Callable[[psycopg.AsyncConnection], Awaitable[T]],
                  timeout: float | None = None) -> T:
        """``await work(conn)`` on a pooled connection, database errors as 503s (``what``
        names the work in the log line).

        ``work`` must be safe to run twice (reads, and writes that are idempotent): when the
        connection turns out to be dead on its first statement, every idle connection of the
        pool is checked with a round trip (``AsyncConnectionPool.check``: the dead ones are
        replaced), and ``work`` runs once more. The check on checkout
        (:func:`check_connection`) finds most dead connections, but not one whose server is
        still closing it as it is handed out: the server's FATAL arrives a moment after the
        backend has left ``pg_stat_activity``. Whatever killed one connection (a restart,
        ``pg_terminate_backend``) has usually killed the others too, so retrying on the next
        idle one alone still failed in a full run."""
        with translate(what):
            for attempt in (1, 2):
                conn: psycopg.AsyncConnection | None = None
                try:
                    async with self.connection(timeout) as conn:
                        return await work(conn)
                except psycopg.OperationalError as e:
                    if attempt == 2 or conn is None or not conn.broken:
                        raise
                    log("info", "db_connection_replaced", what=what, sqlstate=e.sqlstate,
                        error=str(e))
                    if self._pool is not None:
                        await self._pool.check()
        raise AssertionError("unreachable")  # pragma: no cover

    async def one(self, what: str, sql: str, params: tuple[Any, ...],
                  timeout: float | None = None) -> tuple[Any, ...] | None:
        """The first row of ``sql``, or None; ``what`` names the query in a 503's log line."""
        async def work(conn: psycopg.AsyncConnection) -> tuple[Any, ...] | None:
            return await (await conn.execute(sql, params)).fetchone()
        return await self.run(what, work, timeout)

    async def all(self, what: str, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """Every row of ``sql``."""
        async def work(conn: psycopg.AsyncConnection) -> list[tuple[Any, ...]]:
            return await (await conn.execute(sql, params)).fetchall()
        return await self.run(what, work)
