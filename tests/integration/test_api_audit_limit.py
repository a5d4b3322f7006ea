"""One key's audits are bounded per key, over real HTTP and a real PostgreSQL read model.

The test holds an ACCESS EXCLUSIVE lock on the generation's ``records`` table, so every audit
that reaches the database waits there holding a pooled connection, as a long audit would.
Twenty concurrent audits from tenant A's key: two are in progress (the default
``EVIDENCE_API_MAX_AUDITS_PER_KEY``), the rest are 429 ``too_many_requests`` with Retry-After
at once, never 503; tenant B's read is answered meanwhile, and B's own audit gets a slot of its
own. Once the lock goes, the audits in progress finish clean and A may audit again.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor, wait

import httpx
import psycopg
import pytest

from api import Keyring, Settings
from tests.fixtures.log import wait_until

pytestmark = pytest.mark.integration

A_KEY = f"tenant-a-{uuid.uuid4().hex}"
B_KEY = f"tenant-b-{uuid.uuid4().hex}"
AUDITS = 20


def _waiting_on(database_url: str, table: str) -> int:
    """How many API connections wait for a lock on ``table``."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        return conn.execute(
            "select count(distinct l.pid) from pg_locks l join pg_stat_activity a using (pid) "
            "where l.relation = %s::regclass and not l.granted "
            "and a.application_name = 'evidence-api'", (table,)).fetchone()[0]


def test_one_keys_audits_get_429_while_another_keys_reads_go_on(readmodel, make_api_server,
                                                                 database_url):
    tag = uuid.uuid4().hex[:8]
    a, b = f"lim-a-{tag}:chat", f"lim-b-{tag}:chat"
    for _ in range(3):
        readmodel.add(a)
        readmodel.add(b)
    # A small pool, and statements that may wait for the lock as long as the test needs.
    url = make_api_server(Settings(
        database_url, Keyring([("tenant-a", A_KEY, [a]), ("tenant-b", B_KEY, [b])]),
        views_schema=readmodel.views, max_lag=10**9, pool_min=1, pool_max=5,
        statement_timeout_ms=120_000))
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {A_KEY}"},
                      timeout=120) as ta, \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {B_KEY}"},
                         timeout=120) as tb, \
            ThreadPoolExecutor(AUDITS + 1) as pool, \
            psycopg.connect(database_url) as locker:
        assert ta.get(f"/streams/{a}/audit").json()["clean"] is True  # before: unbounded use
        records = f'"{readmodel.gen}".records'
        assert _waiting_on(database_url, records) == 0
        locker.execute(f"lock table {records} in access exclusive mode")
        try:
            audits = [pool.submit(ta.get, f"/streams/{a}/audit") for _ in range(AUDITS)]
            wait_until(f"{AUDITS - 2} audits answered",
                       lambda: sum(f.done() for f in audits) >= AUDITS - 2, 60, 0.05)
            wait_until("two audits waiting in PostgreSQL",
                       lambda: _waiting_on(database_url, records) >= 2, 60, 0.05)
            refused = [f.result() for f in audits if f.done()]
            assert len(refused) == AUDITS - 2
            for r in refused:
                assert r.status_code == 429, r.text
                assert int(r.headers["retry-after"]) >= 1
                body = r.json()
                assert body["error"] == "too_many_requests" and body["limit"] == 2, body
                assert body["setting"] == "EVIDENCE_API_MAX_AUDITS_PER_KEY"
                assert "2 audits in progress" in body["message"], body

            # Tenant B reads while A's audits hold their connections.
            r = tb.get(f"/streams/{b}")
            assert r.status_code == 200 and r.json()["head_seq"] == 3, r.text
            # B's own audit is not A's to refuse: it gets a slot (and waits on the lock too).
            b_audit = pool.submit(tb.get, f"/streams/{b}/audit")
            wait_until("B's audit waiting in PostgreSQL",
                       lambda: _waiting_on(database_url, records) >= 3, 60, 0.05)
            assert not b_audit.done()
            # A is still at its limit.
            assert ta.get(f"/streams/{a}/audit").status_code == 429
        finally:
            locker.rollback()  # the lock goes; the audits in progress go on
        done, _ = wait([*audits, b_audit], timeout=120)
        assert len(done) == AUDITS + 1
        finished = [f.result() for f in audits if f.result().status_code != 429]
        assert [r.status_code for r in finished] == [200, 200]
        assert all(r.json()["clean"] is True for r in finished)
        assert b_audit.result().status_code == 200 and b_audit.result().json()["clean"]
        # The slots are given back: A may audit again.
        assert ta.get(f"/streams/{a}/audit").status_code == 200
        assert not [f for f in audits if f.result().status_code == 503]
