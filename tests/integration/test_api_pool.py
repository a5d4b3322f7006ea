"""The API's pool against a real PostgreSQL: a connection that dies under a request is replaced
and the request answered, and an error that is not a dead connection is not run twice.

The check on checkout is turned off here, so every dead connection reaches ``work``: this is
the window the check cannot close (the server still closing the connection as it is handed
out), made certain instead of left to timing."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from api.errors import Unavailable
from api.pool import Pool
from tests.fixtures.log import wait_until


def _pool(database_url: str) -> Pool:
    pool = Pool(database_url, min_size=1, max_size=1, timeout=10.0, statement_timeout_ms=200)
    pool._args["check"] = None  # let a dead connection through, as the race does
    return pool


def _terminate(database_url: str, pid: int) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert conn.execute("select pg_terminate_backend(%s)", (pid,)).fetchone()[0]
        wait_until("the terminated backend to exit", lambda: not conn.execute(
            "select 1 from pg_stat_activity where pid = %s", (pid,)).fetchone())


def _on_a_closed_connection(database_url: str, read) -> tuple[int, int, int]:
    """``read(conn)`` (the backend pid) through ``Pool.run`` on a pool whose only connection
    the server has closed: (the closed backend's pid, the pid read, the calls of ``read``)."""
    async def scenario() -> tuple[int, int, int]:
        pool = _pool(database_url)
        await pool.open()
        try:
            first = (await pool.one("pid", "select pg_backend_pid()", ()))[0]
            await asyncio.to_thread(_terminate, database_url, first)
            calls = 0

            async def work(conn: psycopg.AsyncConnection) -> int:
                nonlocal calls
                calls += 1
                return await read(conn)
            second = await pool.run("pid", work)
            return first, second, calls
        finally:
            await pool.close()

    return asyncio.run(scenario())


def test_a_request_on_a_connection_the_server_closed_runs_again_on_a_new_one(database_url):
    async def read(conn: psycopg.AsyncConnection) -> int:
        return (await (await conn.execute("select pg_backend_pid()")).fetchone())[0]

    first, second, calls = _on_a_closed_connection(database_url, read)
    assert second != first
    assert calls == 2


def test_pipelined_reads_on_a_connection_the_server_closed_run_again_on_a_new_one(database_url):
    """As ``Database.stream`` reads a stream's head and findings: several statements in one
    pipeline, whose failure on a dead connection comes at the pipeline's sync."""
    async def read(conn: psycopg.AsyncConnection) -> int:
        async with conn.pipeline():
            a = await conn.execute("select pg_backend_pid()")
            b = await conn.execute("select 1")
        assert (await b.fetchone())[0] == 1
        return (await a.fetchone())[0]

    first, second, calls = _on_a_closed_connection(database_url, read)
    assert second != first
    assert calls == 2


def test_an_error_on_a_live_connection_is_a_503_and_runs_once(database_url):
    async def scenario() -> tuple[int, str | None]:
        pool = _pool(database_url)
        await pool.open()
        calls = 0

        async def work(conn: psycopg.AsyncConnection) -> None:
            nonlocal calls
            calls += 1
            await conn.execute("select pg_sleep(5)")  # past the 200 ms statement timeout
        try:
            with pytest.raises(Unavailable) as caught:
                await pool.run("sleep", work)
            assert (await pool.one("after", "select 1", ())) == (1,)  # the pool still serves
            return calls, getattr(caught.value.__cause__, "sqlstate", None)
        finally:
            await pool.close()

    calls, sqlstate = asyncio.run(scenario())
    assert (calls, sqlstate) == (1, "57014")


def test_when_every_pooled_connection_was_terminated_the_request_still_succeeds(database_url):
    """pg_terminate_backend of all of them, as a restart does: the first dead one found makes
    the pool check the others, so the one retry meets a live connection."""
    import uuid

    name = f"pool-test-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[int, int, int]:
        pool = Pool(database_url, min_size=3, max_size=3, timeout=10.0,
                    statement_timeout_ms=2000)
        pool._args["check"] = None
        pool._args["kwargs"]["application_name"] = name
        await pool.open()
        try:
            await pool._pool.wait(timeout=10)

            def terminate_all() -> int:
                with psycopg.connect(database_url, autocommit=True) as conn:
                    pids = [r[0] for r in conn.execute(
                        "select pid from pg_stat_activity where application_name = %s",
                        (name,)).fetchall()]
                    for pid in pids:
                        conn.execute("select pg_terminate_backend(%s)", (pid,))
                    wait_until("the terminated backends to exit", lambda: not conn.execute(
                        "select 1 from pg_stat_activity where pid = any(%s)", (pids,)).fetchone())
                return len(pids)
            killed = await asyncio.to_thread(terminate_all)
            calls = 0

            async def work(conn: psycopg.AsyncConnection) -> int:
                nonlocal calls
                calls += 1
                return (await (await conn.execute("select 1")).fetchone())[0]
            return killed, await pool.run("one", work), calls
        finally:
            await pool.close()

    killed, answer, calls = asyncio.run(scenario())
    assert (killed, answer, calls) == (3, 1, 2)
