"""The pages' sessions in PostgreSQL (api.pages.session_table): the store's contract
(tests/unit/session_contract.py) against a real database, in a schema of the test's own;
what is this store's own (only the id's hash stored, every pool over the table sees the same
sessions and login secret, expired rows deleted lazily, a key no longer configured ends its
sessions, the table bounded, a projection rebuild keeping it); and over HTTP, a login
through one API server read through another on the same database, and after a restart."""

from __future__ import annotations

import hashlib
import re
import uuid

import httpx
import psycopg
import pytest

from api.auth import Keyring
from api.db import Database
from api.pages.session_table import LOGIN_SECRET_TABLE, TABLE, PostgresSessionStore
from tests.unit.session_contract import (
    ABSOLUTE, API_KEY, IDLE, KEY, KEYRING, SessionStoreContract,
)

pytestmark = pytest.mark.integration

COOKIE = "evidence_session"


def rows(database_url: str, schema: str) -> list[tuple]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return conn.execute(f'select id_hash, key_digest, csrf, created_at::text, '
                            f'used_at::text from "{schema}".{TABLE}').fetchall()


def shift(database_url: str, schema: str, seconds: float) -> None:
    """``seconds`` pass for every session in ``schema``: their times moved back."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'update "{schema}".{TABLE} set '
                     f"used_at = used_at - make_interval(secs => %s), "
                     f"created_at = created_at - make_interval(secs => %s)",
                     (seconds, seconds))


@pytest.fixture
def schema(make_schema) -> str:
    return make_schema()


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
async def open_store(database_url, schema, anyio_backend):
    """Factory: ``await open_store(keyring=..., **limits)``, a store over a pool of its own
    (as another server process has), closed after the test."""
    dbs: list[Database] = []

    async def open_store(keyring: Keyring = KEYRING, **limits) -> PostgresSessionStore:
        db = Database(database_url, schema, min_size=1, max_size=2)
        await db.open()
        dbs.append(db)
        return PostgresSessionStore(db, keyring, **{"idle": IDLE, "absolute": ABSOLUTE,
                                                    **limits})

    yield open_store
    for db in dbs:
        await db.close()


@pytest.fixture
async def store(open_store):
    return await open_store()


class TestPostgresSessionStore(SessionStoreContract):
    @pytest.fixture
    def elapse(self, database_url, schema):
        async def elapse(seconds: float) -> None:
            shift(database_url, schema, seconds)
        return elapse

    async def test_only_the_ids_hash_is_stored_never_the_id_nor_the_key(self, store,
                                                                          database_url, schema):
        sid = await store.start(API_KEY)
        [row] = rows(database_url, schema)
        assert bytes(row[0]) == hashlib.sha256(sid.encode()).digest()
        assert bytes(row[1]) == API_KEY.digest
        dump = repr(row)
        assert sid not in dump and KEY not in dump and sid.encode() not in bytes(row[0])

    async def test_a_session_started_over_one_pool_is_every_pools(self, open_store):
        a, b = await open_store(), await open_store()
        sid = await a.start(API_KEY)
        seen = await b.get(sid)
        assert seen is not None and seen.key == API_KEY
        assert seen.csrf == (await a.get(sid)).csrf
        assert await a.login_secret() == await b.login_secret()
        await b.end(sid)
        assert await a.get(sid) is None

    async def test_an_expired_session_is_deleted_when_read_and_others_at_a_login(
            self, store, elapse, database_url, schema):
        first, second = await store.start(API_KEY), await store.start(API_KEY)
        await elapse(IDLE)
        assert len(rows(database_url, schema)) == 2         # nothing deletes them unasked
        assert await store.get(first) is None
        assert len(rows(database_url, schema)) == 1
        newest = await store.start(API_KEY)                 # the login sweeps the rest
        assert [bytes(r[0]) for r in rows(database_url, schema)] == [
            hashlib.sha256(newest.encode()).digest()]
        assert await store.get(second) is None

    async def test_a_key_no_longer_configured_ends_its_sessions(self, open_store,
                                                                database_url, schema):
        sid = await (await open_store()).start(API_KEY)
        other = Keyring([("other", "Other9Lm2Pv8Rt5Wy1Bn7Cd4Fg6Hj0Ks2Qe", ("*",))])
        assert await (await open_store(keyring=other)).get(sid) is None
        assert rows(database_url, schema) == []

    async def test_the_table_is_bounded_the_least_recently_used_goes_first(self, open_store,
                                                                           elapse):
        store = await open_store(capacity=3)
        ids = []
        for _ in range(3):
            ids.append(await store.start(API_KEY))
            await elapse(1)                                  # an order of use to go by
        await store.get(ids[0])                              # ids[1] is the least recent
        newest = await store.start(API_KEY)
        assert await store.get(ids[1]) is None
        for i in (ids[0], ids[2], newest):
            assert await store.get(i) is not None

    async def test_idle_longer_than_absolute_is_refused(self, open_store):
        with pytest.raises(ValueError):
            await open_store(idle=100, absolute=10)


@pytest.mark.anyio
async def test_a_projection_rebuild_keeps_the_sessions(make_readmodel):
    rm = make_readmodel(heartbeat=False)
    db = Database(rm.database_url, rm.views, min_size=1, max_size=2)
    await db.open()
    try:
        await _rebuild_keeps(rm, db)
    finally:
        await db.close()


async def _rebuild_keeps(rm, db: Database) -> None:
    from projections.ddl import create_generation, drop_generation, make_live

    store = PostgresSessionStore(db, KEYRING)
    sid = await store.start(API_KEY)
    secret = await store.login_secret()
    with rm.conn.transaction():
        gen = create_generation(rm.conn, meta=rm.meta, prefix=rm.prefix)
        previous = make_live(rm.conn, gen, meta=rm.meta, views=rm.views)
    drop_generation(rm.conn, previous, meta=rm.meta)
    rm.gen = gen
    again = PostgresSessionStore(db, KEYRING)  # as a process started after the rebuild
    assert (await again.get(sid)).key == API_KEY
    assert await again.login_secret() == secret


# -- over HTTP: two API servers on one database ---------------------------------------------


def token(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def page(url: str, path: str, sid: str | None) -> httpx.Response:
    cookie = {"cookie": f"{COOKIE}={sid}"} if sid else {}
    return httpx.get(f"{url}{path}", headers=cookie, timeout=20)


def test_a_login_through_one_server_is_the_session_of_another_and_survives_a_restart(
        make_readmodel):
    from api import Settings
    from tests.fixtures.api_server import serve_api

    rm = make_readmodel()
    stream = f"pages:shared-{uuid.uuid4().hex[:8]}"
    rm.add(stream)
    key = f"shared-{uuid.uuid4().hex}"
    settings = Settings(rm.database_url, Keyring([("shared", key, ["pages:*"])]),
                        views_schema=rm.views, max_lag=10**9)
    with serve_api(settings) as a, serve_api(settings) as b:
        # The login form served by A is posted to B (a browser's next request may reach
        # either process): B takes A's signed token.
        form = token(page(a, "/ui/login", None).text)
        r = httpx.post(f"{b}/ui/login", data={"csrf": form, "key": key, "next": "/ui/"},
                       headers={"origin": b}, timeout=20)
        assert r.status_code == 303, r.text
        sid = r.headers["set-cookie"].split(";")[0].split("=", 1)[1]
        for url in (a, b):
            home = page(url, "/ui/", sid)
            assert home.status_code == 200 and stream in home.text, url
            assert key not in home.text
        csrf = token(page(a, "/ui/", sid).text)
        assert csrf == token(page(b, "/ui/", sid).text)  # one session, one token
    with serve_api(settings) as c:  # both stopped, a new one started: still logged in
        assert page(c, "/ui/", sid).status_code == 200
        # Logout through C ends the session for every server.
        r = httpx.post(f"{c}/ui/logout", data={"csrf": csrf}, timeout=20,
                       headers={"origin": c, "cookie": f"{COOKIE}={sid}"})
        assert r.status_code == 303 and "Max-Age=0" in r.headers["set-cookie"]
        with serve_api(settings) as d:
            for url in (c, d):
                gone = page(url, "/ui/", sid)
                assert gone.status_code == 303 and "/ui/login" in gone.headers["location"]
    with psycopg.connect(rm.database_url, autocommit=True) as conn:
        assert conn.execute(f'select count(*) from "{rm.views}".{TABLE}').fetchone()[0] == 0
        assert conn.execute(
            f'select count(*) from "{rm.views}".{LOGIN_SECRET_TABLE}').fetchone()[0] == 1
