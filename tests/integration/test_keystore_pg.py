"""The PostgreSQL key store against the real database: the contract suite, plus the rows."""

from __future__ import annotations

import pytest

from evidence_contract.sealing import LocalKek
from server.keystore import PgKeyStore
from tests.fixtures.keystore import KeyStoreContract

pytestmark = pytest.mark.integration

KEK = LocalKek(bytes(range(32)))


class TestPgKeyStore(KeyStoreContract):
    @pytest.fixture
    def store(self, database_url, pg_schema):
        return PgKeyStore(database_url, KEK, schema=pg_schema).create()

    @pytest.fixture
    def reopen(self, database_url, pg_schema):
        return lambda: PgKeyStore(database_url, KEK, schema=pg_schema)

    @pytest.fixture
    def make(self, store, database_url, pg_schema):
        return lambda **kw: PgKeyStore(database_url, KEK, schema=pg_schema, **kw)


def test_destroy_deletes_the_wrapped_key_row_and_keeps_a_tombstone(database_url, pg_schema,
                                                                   pg_conn):
    store = PgKeyStore(database_url, KEK, schema=pg_schema).create()
    k = store.data_key("user-42")
    assert pg_conn.execute("select count(*) from data_keys").fetchone() == (1,)
    (wrapped,) = pg_conn.execute("select wrapped from data_keys").fetchone()
    assert k.material not in bytes(wrapped)
    pg_conn.commit()
    store.destroy("user-42", request_id="req-9")
    assert pg_conn.execute("select count(*) from data_keys").fetchone() == (0,)
    row = pg_conn.execute("select subject, request_id, erased_at is not null "
                          "from key_subjects").fetchone()
    assert row == ("user-42", "req-9", True)


def test_create_is_idempotent(database_url, pg_schema):
    store = PgKeyStore(database_url, KEK, schema=pg_schema)
    store.create().create()
    assert store.subjects() == []
    with pytest.raises(ValueError):
        PgKeyStore(database_url, KEK, schema='x"; drop table y; --')


_PHASE_1_DDL = """
create table key_subjects (key_id text primary key, subject text not null,
    created_at timestamptz not null default now(), erased_at timestamptz, request_id text);
create unique index key_subjects_one_live on key_subjects (subject) where erased_at is null;
create table data_keys (key_id text primary key references key_subjects (key_id),
    wrapped bytea not null, kek_id text not null);
"""


def test_a_phase_1_schema_is_migrated_and_its_keys_are_epoch_all(database_url, pg_schema,
                                                                 pg_conn):
    from evidence_contract.sealing import new_data_key, new_key_id

    pg_conn.execute(_PHASE_1_DDL)
    key_id, material = new_key_id(), new_data_key()
    pg_conn.execute("insert into key_subjects (key_id, subject) values (%s, 'user-42')",
                    (key_id,))
    pg_conn.execute("insert into data_keys values (%s, %s, %s)",
                    (key_id, KEK.wrap(key_id, material), KEK.kek_id))
    pg_conn.commit()
    store = PgKeyStore(database_url, KEK, schema=pg_schema).create()
    legacy = store.key(key_id)
    assert (legacy.material, legacy.epoch, legacy.expires_at) == (material, "all", None)
    new = store.data_key("user-42", stream="acme:chat")  # a second live key: per epoch now
    assert new.key_id != key_id and new.epoch != "all"
    assert [s.key_id for s in store.destroy("user-42", before_epoch=2**62)] == [new.key_id]
    assert [s.key_id for s in store.destroy("user-42")] == [key_id]
