"""The sealing peer's baseline (``bench.peer.eventsourcing_rate``) leaves nothing behind once
timed: its fresh rows would be autovacuum's work in the sections timed after it."""

import uuid

import pytest

pytestmark = pytest.mark.integration


def test_the_peers_tables_are_dropped_as_soon_as_it_is_timed(database_url):
    import psycopg

    from bench.peer import eventsourcing_rate

    schema = f"peer_{uuid.uuid4().hex[:8]}"
    messages = [(f"s-{i % 3}".encode(), b"capture %d" % i) for i in range(30)]
    got = eventsourcing_rate(database_url, schema, messages, batch=10)
    assert got["records"] == 30 and got["records_per_s"] > 0
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert conn.execute("select count(*) from pg_namespace where nspname = %s",
                            (schema,)).fetchone()[0] == 0
