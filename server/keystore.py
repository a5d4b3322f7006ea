"""A key store in PostgreSQL: per-subject data keys on the server side.

Implements ``evidence_contract.keys.KeyStore`` over four tables in ``schema``:

    data_keys(key_id pk, wrapped bytea, kek_id)          the wrapped key material only
    key_subjects(key_id pk, subject, epoch, created_at, erased_at, request_id)
                                                          who, which epoch, when; the tombstone
    key_streams(key_id, stream)                           the streams a key sealed content of
    legal_holds(id, subject, reason, request_id, held_at, released_at, release_request_id)
                                                          every hold ever placed

At most one live key per subject and epoch (a partial unique index), so concurrent
``data_key`` calls for a new subject agree on one key (``on conflict`` re-reads the winner).
Rows made before epochs existed get epoch ``all`` (the column's default) and stay readable.
``destroy`` and ``hold`` take one transaction-scoped advisory lock per subject, so a hold
placed while a shred runs is either seen by it or waits for it. Destroying a
subject deletes its ``data_keys`` rows and stamps ``erased_at`` on its ``key_subjects`` rows
in one transaction, then ``VACUUM data_keys`` so the deleted tuples are pruned from the heap
rather than left for autovacuum. Limits: WAL segments, replicas and base backups keep the
wrapped bytes until they are recycled; they stay wrapped by the KEK, so rotating the KEK
(re-wrap every live key, destroy the old KEK) bounds how long such copies matter.

Connections are made per call from ``conninfo`` (a store is used rarely: once per subject
and process by a cached client, once per erasure); nothing connects in ``__init__``.

:class:`server.settings.KeyStoreSettings` reads from the environment which key store a server
process uses; :func:`open_key_store` opens it (``file:<dir>``:
``evidence_client.keystore.FileKeyStore``, the devstack's and the tests', so there is one
implementation of its format; ``postgres``: :class:`PgKeyStore`), and :func:`from_env` does
both in one call. The epochs of new keys: docs/erasure.md, Retention.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

import psycopg
from psycopg import sql

from evidence_contract import now_micros, valid_stream_id
from evidence_contract.envelope import valid_key_id
from evidence_contract.keys import (
    DAY,
    ERASED,
    LIVE,
    DataKey,
    Hold,
    KeyErased,
    KeyStore,
    KeyStoreError,
    KeyWrapper,
    LegalHold,
    SubjectState,
    UnknownKey,
    ended_by,
    epoch_bound,
    epoch_of,
    parse_granularity,
    unwrapping,
    valid_subject,
)
from server.settings import KeyStoreSettings, SettingsError

__all__ = ["PgKeyStore", "from_env", "open_key_store"]

_SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")

_DDL = """
create table if not exists {s}.key_subjects (
    key_id      text primary key,
    subject     text not null,
    created_at  timestamptz not null default now(),
    erased_at   timestamptz,
    request_id  text
);
create table if not exists {s}.data_keys (
    key_id   text primary key references {s}.key_subjects (key_id),
    wrapped  bytea not null,
    kek_id   text not null
);
alter table {s}.key_subjects add column if not exists epoch text not null default 'all';
drop index if exists {s}.key_subjects_one_live;
create unique index if not exists key_subjects_one_live_per_epoch
    on {s}.key_subjects (subject, epoch) where erased_at is null;
create table if not exists {s}.key_streams (
    key_id  text not null references {s}.key_subjects (key_id),
    stream  text not null,
    primary key (key_id, stream)
);
create table if not exists {s}.legal_holds (
    id                  bigserial primary key,
    subject             text not null,
    reason              text not null,
    request_id          text,
    held_at             timestamptz not null default now(),
    released_at         timestamptz,
    release_request_id  text
);
create unique index if not exists legal_holds_one_active
    on {s}.legal_holds (subject) where released_at is null;
"""


def _us(t: datetime | None) -> int | None:
    if t is None:
        return None
    return int((t - datetime(1970, 1, 1, tzinfo=timezone.utc)).total_seconds() * 1_000_000)


class PgKeyStore:
    """Per-subject data keys in PostgreSQL schema ``schema``, wrapped by ``wrapper``."""

    def __init__(self, conninfo: str, wrapper: KeyWrapper, schema: str = "evidence_keys", *,
                 epoch: str = DAY, clock: Callable[[], int] = now_micros) -> None:
        if not _SCHEMA_RE.fullmatch(schema):
            raise ValueError(f"schema {schema!r} is not a plain lowercase identifier")
        self.conninfo = conninfo
        self.wrapper = wrapper
        self.schema = schema
        self.granularity = parse_granularity(epoch)
        self.clock = clock  # UTC µs; names the current epoch (tests pass a fake one)

    def __repr__(self) -> str:
        return f"PgKeyStore(schema={self.schema!r}, {self.wrapper!r})"

    def _connect(self, autocommit: bool = False) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.conninfo, autocommit=autocommit)
        except psycopg.Error as e:
            raise KeyStoreError(f"key store database: {e}") from e

    def _q(self, text: str) -> sql.Composed:
        return sql.SQL(text).format(s=sql.Identifier(self.schema))

    def create(self) -> "PgKeyStore":
        """Create the schema and tables if they are missing (idempotent)."""
        with self._connect() as conn:
            conn.execute(sql.SQL("create schema if not exists {}").format(
                sql.Identifier(self.schema)))
            conn.execute(self._q(_DDL))
        return self

    def _key_from(self, row: tuple[Any, ...]) -> DataKey:
        key_id, subject, created_at, erased_at, request_id, wrapped, epoch = row
        if erased_at is not None or wrapped is None:
            raise KeyErased(key_id, subject, _us(erased_at) or 0, request_id)
        with unwrapping(key_id):
            material = self.wrapper.unwrap(key_id, bytes(wrapped))
        return DataKey(key_id, subject, material, _us(created_at) or 0, epoch)

    _SELECT = ("select s.key_id, s.subject, s.created_at, s.erased_at, s.request_id, d.wrapped, "
               "s.epoch from {s}.key_subjects s left join {s}.data_keys d using (key_id) ")
    _LIVE = "where s.subject = %s and s.epoch = %s and s.erased_at is null"

    def _lock_subject(self, conn: psycopg.Connection[Any], subject: str) -> None:
        # Serialises destroy and hold of one subject (released at commit or rollback).
        conn.execute("select pg_advisory_xact_lock(hashtextextended(%s, 0))",
                     (f"{self.schema}/{subject}",))

    def data_key(self, subject: str, stream: str | None = None) -> DataKey:
        """The subject's key of the current epoch; made (and stored wrapped) on first use.
        ``stream``, when given, is recorded on the key (retention maps streams to classes)."""
        from evidence_contract.sealing import new_data_key, new_key_id

        if not valid_subject(subject):
            raise ValueError(f"subject {subject!r} is not a subject id")
        if stream is not None and not valid_stream_id(stream):
            raise ValueError(f"stream {stream!r} is not a stream id")
        epoch = epoch_of(self.clock(), self.granularity)
        try:
            with self._connect() as conn:
                row = conn.execute(self._q(self._SELECT + self._LIVE),
                                   (subject, epoch)).fetchone()
                if row is None:
                    key_id, material = new_key_id(), new_data_key()
                    wrapped = self.wrapper.wrap(key_id, material)
                    made = conn.execute(self._q(
                        "insert into {s}.key_subjects (key_id, subject, epoch) "
                        "values (%s, %s, %s) on conflict (subject, epoch) "
                        "where erased_at is null do nothing returning key_id"),
                        (key_id, subject, epoch)).fetchone()
                    if made is None:  # another process made it first: take theirs
                        conn.rollback()
                    else:
                        conn.execute(self._q("insert into {s}.data_keys (key_id, wrapped, kek_id) "
                                             "values (%s, %s, %s)"),
                                     (key_id, wrapped, self.wrapper.kek_id))
                        conn.commit()
                    row = conn.execute(self._q(self._SELECT + self._LIVE),
                                       (subject, epoch)).fetchone()
                    if row is None:  # made and erased in between: nothing to hand out
                        raise KeyStoreError(f"subject {subject!r} was erased while its key "
                                            "was being made; try again")
                if stream is not None:
                    conn.execute(self._q("insert into {s}.key_streams (key_id, stream) "
                                         "values (%s, %s) on conflict do nothing"),
                                 (row[0], stream))
                conn.commit()
                return self._key_from(row)
        except psycopg.Error as e:
            raise KeyStoreError(f"key store database: {e}") from e

    def key(self, key_id: str) -> DataKey:
        """Any key by id: ``KeyErased`` (with when) once destroyed, ``UnknownKey`` if never."""
        if not valid_key_id(key_id):
            raise UnknownKey(f"{key_id!r} is not a key id")
        try:
            with self._connect() as conn:
                row = conn.execute(self._q(self._SELECT + "where s.key_id = %s"),
                                   (key_id,)).fetchone()
        except psycopg.Error as e:
            raise KeyStoreError(f"key store database: {e}") from e
        if row is None:
            raise UnknownKey(f"no key {key_id} in schema {self.schema}")
        return self._key_from(row)

    def destroy(self, subject: str, request_id: str | None = None,
                before_epoch: int | str | None = None) -> list[SubjectState]:
        """Shred every live key of ``subject`` (with ``before_epoch``, only those whose
        epoch ended by then: µs, or an epoch label meaning its start): rows deleted,
        tombstones stamped, table vacuumed. Returns what was erased (empty if nothing was
        live). ``LegalHold`` if the subject is held: nothing is shredded."""
        bound = None if before_epoch is None else epoch_bound(before_epoch)
        try:
            with self._connect() as conn:
                self._lock_subject(conn, subject)
                held = self._active_hold(conn, subject)
                if held is not None:
                    raise LegalHold(held)
                live = conn.execute(self._q(
                    "select key_id, epoch from {s}.key_subjects "
                    "where subject = %s and erased_at is null"), (subject,)).fetchall()
                ids = [k for k, epoch in live if bound is None or ended_by(epoch, bound)]
                rows = conn.execute(self._q(
                    "update {s}.key_subjects set erased_at = now(), request_id = %s "
                    "where key_id = any(%s) "
                    "returning key_id, created_at, erased_at, epoch, array("
                    "select stream from {s}.key_streams t where t.key_id = key_subjects.key_id "
                    "order by stream)"), (request_id, ids)).fetchall()
                conn.execute(self._q("delete from {s}.data_keys where key_id = any(%s)"),
                             (ids,))
                conn.commit()
            if rows:
                # VACUUM cannot run in a transaction block: its own autocommit connection.
                with self._connect(autocommit=True) as conn:
                    conn.execute(self._q("vacuum {s}.data_keys"))
        except psycopg.Error as e:
            raise KeyStoreError(f"key store database: {e}") from e
        return sorted((SubjectState(subject, key_id, ERASED, _us(created) or 0, _us(erased),
                                    request_id, epoch, tuple(streams))
                       for key_id, created, erased, epoch, streams in rows),
                      key=lambda s: (s.created_at, s.key_id))

    def subjects(self) -> list[SubjectState]:
        """Every key, live and erased, by subject then creation time."""
        try:
            with self._connect() as conn:
                rows = conn.execute(self._q(
                    "select subject, key_id, created_at, erased_at, request_id, epoch, array("
                    "select stream from {s}.key_streams t where t.key_id = s.key_id "
                    "order by stream) from {s}.key_subjects s "
                    "order by subject, created_at, key_id")).fetchall()
        except psycopg.Error as e:
            raise KeyStoreError(f"key store database: {e}") from e
        return [SubjectState(subject, key_id, ERASED if erased is not None else LIVE,
                             _us(created) or 0, _us(erased), request_id, epoch, tuple(streams))
                for subject, key_id, created, erased, request_id, epoch, streams in rows]

    # -- legal holds -----------------------------------------------------------------------
    def _active_hold(self, conn: psycopg.Connection[Any], subject: str) -> Hold | None:
        row = conn.execute(self._q(
            "select subject, reason, held_at, request_id from {s}.legal_holds "
            "where subject = %s and released_at is null"), (subject,)).fetchone()
        return None if row is None else Hold(row[0], row[1], _us(row[2]) or 0, row[3])

    def hold(self, subject: str, reason: str, request_id: str | None = None) -> Hold:
        """Put ``subject`` under a legal hold (``destroy`` refuses it until released).
        Holding a held subject keeps the first hold and returns it."""
        if not valid_subject(subject):
            raise ValueError(f"subject {subject!r} is not a subject id")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError("a legal hold needs a reason")
        try:
            with self._connect() as conn:
                self._lock_subject(conn, subject)
                current = self._active_hold(conn, subject)
                if current is None:
                    conn.execute(self._q("insert into {s}.legal_holds (subject, reason, "
                                         "request_id) values (%s, %s, %s)"),
                                 (subject, reason, request_id))
                    current = self._active_hold(conn, subject)
                conn.commit()
        except psycopg.Error as e:
            raise KeyStoreError(f"key store database: {e}") from e
        assert current is not None
        return current

    def release(self, subject: str, request_id: str | None = None) -> Hold | None:
        """Lift the subject's legal hold; returns the hold lifted (``None`` if none)."""
        try:
            with self._connect() as conn:
                self._lock_subject(conn, subject)
                current = self._active_hold(conn, subject)
                if current is not None:
                    conn.execute(self._q("update {s}.legal_holds set released_at = now(), "
                                         "release_request_id = %s "
                                         "where subject = %s and released_at is null"),
                                 (request_id, subject))
                conn.commit()
        except psycopg.Error as e:
            raise KeyStoreError(f"key store database: {e}") from e
        return current

    def holds(self) -> list[Hold]:
        """The subjects under a legal hold now, by subject."""
        try:
            with self._connect() as conn:
                rows = conn.execute(self._q(
                    "select subject, reason, held_at, request_id from {s}.legal_holds "
                    "where released_at is null order by subject")).fetchall()
        except psycopg.Error as e:
            raise KeyStoreError(f"key store database: {e}") from e
        return [Hold(r[0], r[1], _us(r[2]) or 0, r[3]) for r in rows]


def open_key_store(settings: KeyStoreSettings, *,
                   clock: Callable[[], int] = now_micros) -> KeyStore:
    """The key store ``settings`` name, its KEK loaded (a PostgreSQL store's tables created);
    ``KeyStoreError`` for a KEK that cannot be loaded or a schema that cannot be one."""
    from evidence_client.errors import ConfigError
    from evidence_client.keystore import FileKeyStore, load_kek

    try:
        wrapper = load_kek(settings.kek_env())
    except ConfigError as e:
        raise KeyStoreError(str(e)) from e
    if settings.directory:
        return FileKeyStore(settings.directory, wrapper, epoch=settings.epoch, clock=clock)
    try:
        store = PgKeyStore(str(settings.database_url), wrapper, settings.schema,
                           epoch=settings.epoch, clock=clock)
    except ValueError as e:
        raise KeyStoreError(f"EVIDENCE_KEY_STORE_SCHEMA: {e}") from e
    return store.create()


def from_env(env: Mapping[str, str] | None = None, *,
             clock: Callable[[], int] = now_micros) -> KeyStore:
    """The key store the environment names (:meth:`server.settings.KeyStoreSettings.from_env`,
    ``os.environ`` when ``env`` is None), opened; ``KeyStoreError`` for a missing or
    malformed setting, a KEK that cannot be loaded."""
    try:
        settings = KeyStoreSettings.from_env(env)
    except SettingsError as e:
        raise KeyStoreError(str(e)) from e
    return open_key_store(settings, clock=clock)
