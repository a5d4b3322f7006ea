"""The pages' sessions in PostgreSQL, shared by every API server process.

The API runs several server processes on one socket (``EVIDENCE_API_WORKERS``), and a
browser's next request may reach any of them: a session kept in one process's memory would
be logged out whenever it did. :class:`PostgresSessionStore` keeps the sessions in one table
that every process reaches through the API's own pool (the same statement timeout, the same
translation of database errors into 503s), so a session is every process's and outlives a
restart.

The table is ``<views schema>.page_sessions``, beside the stable views: the API already
reads that schema, a projection rebuild re-points only the views it made there and never
drops the schema, and a test's own views schema gives it its own table. The table holds, per
session:

- ``id_hash``: the SHA-256 of the session id, never the id, so someone who reads the table
  cannot present a session as a browser would;
- ``key_digest``: the SHA-256 of the API key it logged in with (the key itself is never
  kept); each read looks it up in the keyring of the process, so a key removed from the
  configuration ends its sessions at the next restart, and its scope is the current one;
- ``csrf``: the session's token, of no use without the session id;
- ``created_at``, ``used_at``: the database's clock, the same for every process.

Expiry is the database's: a read renews ``used_at`` only while the session is live (not idle
for ``idle`` seconds nor ``absolute`` old) and deletes it once it is not; a login deletes
every expired session, then the least recently used past ``capacity``. The table
``page_login_secret`` holds the one random key the login forms' tokens are signed with
(:class:`api.pages.csrf.LoginTokens`), so a form one process served is taken by another.

Both tables are made on first use, under a transaction-scoped advisory lock, so processes
starting side by side do not race to create them.
"""

from __future__ import annotations

import secrets
from typing import Any

from ..auth import ApiKey, Keyring
from ..db import Database, translate
from .sessions import (
    ABSOLUTE_SECONDS, CAPACITY, IDLE_SECONDS, Session, check_limits, id_hash, new_session_id,
    new_token,
)

__all__ = ["LOGIN_SECRET_TABLE", "PostgresSessionStore", "TABLE", "ddl"]

TABLE = "page_sessions"
"""The sessions' table, in the views schema."""
LOGIN_SECRET_TABLE = "page_login_secret"
"""The login tokens' signing key, one row, in the views schema."""


def ddl(schema: str) -> list[str]:
    """The statements that make the tables in ``schema`` (idempotent)."""
    t, s = f'"{schema}".{TABLE}', f'"{schema}".{LOGIN_SECRET_TABLE}'
    return [
        f"""create table if not exists {t} (
            id_hash     bytea       primary key check (length(id_hash) = 32),
            key_digest  bytea       not null,
            csrf        text        not null,
            created_at  timestamptz not null default now(),
            used_at     timestamptz not null default now())""",
        f"create index if not exists {TABLE}_used_at on {t} (used_at)",
        f"create index if not exists {TABLE}_created_at on {t} (created_at)",
        f"""create table if not exists {s} (
            singleton  boolean primary key default true check (singleton),
            secret     bytea   not null check (length(secret) = 32))""",
    ]


def _queries(schema: str) -> dict[str, str]:
    t = f'"{schema}".{TABLE}'
    # %(idle)s and %(absolute)s: seconds; a row is live while both hold
    live = ("used_at > now() - make_interval(secs => %(idle)s) and "
            "created_at > now() - make_interval(secs => %(absolute)s)")
    expired = ("(used_at <= now() - make_interval(secs => %(idle)s) or "
               "created_at <= now() - make_interval(secs => %(absolute)s))")
    return {
        "start": f"with swept as (delete from {t} where {expired}) "
                 f"insert into {t} (id_hash, key_digest, csrf) "
                 f"values (%(id)s, %(key)s, %(csrf)s)",
        "trim": f"delete from {t} where id_hash in (select id_hash from {t} "
                f"order by used_at desc offset %(capacity)s)",
        # The update and the delete never take the same row: one wants it live, the other
        # expired. An expired session is deleted by the read that finds it so.
        "get": f"with gone as (delete from {t} where id_hash = %(id)s and {expired}) "
               f"update {t} set used_at = now() where id_hash = %(id)s and {live} "
               f"returning key_digest, csrf, extract(epoch from created_at)::float8, "
               f"extract(epoch from used_at)::float8",
        "end": f"delete from {t} where id_hash = %(id)s",
        "secret": f'select secret from "{schema}".{LOGIN_SECRET_TABLE}',
    }


class PostgresSessionStore:
    """:class:`~api.pages.sessions.SessionStore` over the views schema of ``db``; sessions
    name their keys by digest, found again in ``keyring``."""

    def __init__(self, db: Database, keyring: Keyring, *, idle: float = IDLE_SECONDS,
                 absolute: float = ABSOLUTE_SECONDS, capacity: int = CAPACITY) -> None:
        check_limits(idle, absolute)
        self.idle, self.absolute, self.capacity = idle, absolute, capacity
        self.schema = db.views  # a plain identifier, validated by Settings
        self._pool = db._pool  # noqa: SLF001 - the Database's pool, its one way to PostgreSQL
        self._keyring = keyring
        self._q = _queries(self.schema)
        self._secret: bytes | None = None  # set once the tables exist

    async def start(self, key: ApiKey) -> str:
        await self._ready()
        session_id = new_session_id()
        await self._run("session start", "start", id=id_hash(session_id), key=key.digest,
                        csrf=new_token())
        await self._run("session trim", "trim", capacity=self.capacity)
        return session_id

    async def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        await self._ready()
        h = id_hash(session_id)
        row = await self._pool.one("session", self._q["get"], self._params(id=h))
        if row is None:
            return None
        key = self._keyring.by_digest(bytes(row[0]))
        if key is None:  # the key is no longer configured: neither is its session
            await self._run("session end", "end", id=h)
            return None
        return Session(key, row[1], row[2], row[3])

    async def end(self, session_id: str | None) -> None:
        if session_id:
            await self._ready()
            await self._run("session end", "end", id=id_hash(session_id))

    async def login_secret(self) -> bytes:
        await self._ready()
        assert self._secret is not None
        return self._secret

    def _params(self, **extra: Any) -> dict[str, Any]:
        return {"idle": float(self.idle), "absolute": float(self.absolute), **extra}

    async def _run(self, what: str, query: str, **params: Any) -> None:
        with translate(what):
            async with self._pool.connection() as conn:
                await conn.execute(self._q[query], self._params(**params))

    async def _ready(self) -> None:
        """Make the tables (once per process) and read the login secret."""
        if self._secret is not None:
            return
        with translate("session tables"):
            async with self._pool.connection() as conn:
                async with conn.transaction():
                    await conn.execute("select pg_advisory_xact_lock(hashtext(%s))",
                                       (f"{self.schema}.{TABLE}",))
                    cur = await conn.execute("select to_regnamespace(%s) is null",
                                             (self.schema,))
                    if (await cur.fetchone())[0]:
                        # The API may start before the projector made the views schema.
                        await conn.execute(f'create schema if not exists "{self.schema}"')
                    for statement in ddl(self.schema):
                        await conn.execute(statement)
                    await conn.execute(
                        f'insert into "{self.schema}".{LOGIN_SECRET_TABLE} (secret) '
                        f"values (%s) on conflict (singleton) do nothing",
                        (secrets.token_bytes(32),))
                cur = await conn.execute(self._q["secret"])
                self._secret = bytes((await cur.fetchone())[0])
