import pytest

pytestmark = pytest.mark.integration


def test_each_test_gets_its_own_schema(pg_conn, pg_schema):
    assert pg_conn.execute("select current_schema()").fetchone()[0] == pg_schema
    pg_conn.execute("create table t (id bigint primary key, body bytea not null)")
    pg_conn.execute("insert into t values (1, %s)", (b"\x00\xff",))
    assert pg_conn.execute("select body from t").fetchone()[0] == b"\x00\xff"


def test_server_is_postgres_15_or_newer(pg_conn):
    assert pg_conn.info.server_version >= 150000
