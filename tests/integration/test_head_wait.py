"""Waiting for a head to move (``GET /streams/{s}?after_seq=&wait_ms=``) over real PostgreSQL,
and the live projector's notices over real Kafka (``projections.notify``, ``api.watch``).

No test here times anything. A wait that the notice should end is made unable to end any
other way (the re-read interval and the wait far longer than the test's own timeout), so
the notice path either works or the request fails the test; the re-read path is shown with
no notice at all.
"""

from __future__ import annotations

import concurrent.futures
import os

import httpx
import psycopg
import pytest
from psycopg import sql

import api.watch
from api import Keyring, Settings
from projections.notify import heads_channel, streams_of
from projections.store import Store
from tests.fixtures.api_server import serve_api
from tests.fixtures.log import running_projector, wait_until
from tests.fixtures.readmodel import ReadModel

pytestmark = pytest.mark.integration

KEY = "wait-key-0123456789abcdef0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}


def _settings(rm: ReadModel, max_wait_ms: int = 30_000) -> Settings:
    return Settings(rm.database_url, Keyring([("wait", KEY, ["*"])]), views_schema=rm.views,
                    max_lag=10**9, max_wait_ms=max_wait_ms)


def _notify(url: str, views: str, text: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("select pg_notify(%s, %s)", (heads_channel(views), text))


def _listening(url: str, views: str) -> bool:
    """Whether some backend LISTENs on the read model's channel (the API's head watch)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("select count(*) from pg_stat_activity where query ilike %s",
                            (f"%listen%{heads_channel(views)}%",)).fetchone()[0] > 0


@pytest.fixture
def no_recheck(monkeypatch):
    # Only a notice can end a wait early: the periodic re-read comes after the test's timeout.
    monkeypatch.setattr(api.watch, "RECHECK_S", 3600.0)


def test_a_wait_ends_on_the_notice_with_the_new_head(database_url, no_recheck):
    with ReadModel(database_url) as rm, serve_api(_settings(rm)) as url, \
            httpx.Client(base_url=url, headers=AUTH, timeout=60) as client, \
            concurrent.futures.ThreadPoolExecutor(2) as pool:
        rm.add("s")
        rm.add("other")
        wait_until("the API listening", lambda: _listening(database_url, rm.views))
        waiting = pool.submit(client.get, "/streams/s",
                              params={"after_seq": 1, "wait_ms": 30_000})
        other = pool.submit(client.get, "/streams/other",
                            params={"after_seq": 1, "wait_ms": 30_000})
        rm.add("s")  # seq 2, committed before the notice, as the projector does
        _notify(database_url, rm.views, "s")
        r = waiting.result(timeout=20)
        assert r.status_code == 200 and r.json()["head_seq"] == 2
        # A notice naming another stream did not end the other wait; a "*" one does, and
        # the head it answers is the one there is (the wait was over, nothing moved).
        assert not other.done()
        rm.add("other")
        _notify(database_url, rm.views, "*")
        r = other.result(timeout=20)
        assert r.status_code == 200 and r.json()["head_seq"] == 2


def test_without_notices_a_wait_still_sees_the_head_move(database_url, monkeypatch):
    # Nothing notifies here: the waiter's periodic re-read alone finds the new head.
    monkeypatch.setattr(api.watch, "RECHECK_S", 0.05)
    with ReadModel(database_url) as rm, serve_api(_settings(rm)) as url, \
            httpx.Client(base_url=url, headers=AUTH, timeout=60) as client, \
            concurrent.futures.ThreadPoolExecutor(1) as pool:
        rm.add("s")
        waiting = pool.submit(client.get, "/streams/s",
                              params={"after_seq": 1, "wait_ms": 30_000})
        rm.add("s")
        r = waiting.result(timeout=20)
        assert r.json()["head_seq"] == 2


def test_a_wait_answers_at_once_when_there_is_nothing_to_wait_for(database_url, no_recheck):
    with ReadModel(database_url) as rm, serve_api(_settings(rm, max_wait_ms=0)) as off_url, \
            serve_api(_settings(rm)) as url:
        rm.add("s")
        rm.add("s")
        with httpx.Client(base_url=url, headers=AUTH, timeout=20) as client:
            # the head is already past after_seq
            assert client.get("/streams/s", params={"after_seq": 1, "wait_ms": 30_000}
                              ).json()["head_seq"] == 2
            # a stream with no records: 404 at once, as without a wait
            r = client.get("/streams/none", params={"after_seq": 0, "wait_ms": 30_000})
            assert r.status_code == 404 and r.json()["error"] == "not_found"
            # after_seq without wait_ms, wait_ms without after_seq: plain reads
            assert client.get("/streams/s", params={"after_seq": 5}).json()["head_seq"] == 2
            assert client.get("/streams/s", params={"wait_ms": 30_000}).json()["head_seq"] == 2
            for bad, field in (({"after_seq": -1, "wait_ms": 10}, "after_seq"),
                               ({"after_seq": 1, "wait_ms": 30_001}, "wait_ms"),
                               ({"after_seq": 1, "wait_ms": "soon"}, "wait_ms")):
                r = client.get("/streams/s", params=bad)
                assert r.status_code == 422 and field in r.json()["message"], r.text
        # EVIDENCE_API_MAX_WAIT_MS=0: the server never waits, whatever is asked
        with httpx.Client(base_url=off_url, headers=AUTH, timeout=20) as client:
            assert client.get("/streams/s", params={"after_seq": 2, "wait_ms": 30_000}
                              ).json()["head_seq"] == 2


def test_a_wait_is_bounded_by_the_servers_limit(database_url, no_recheck):
    with ReadModel(database_url) as rm, serve_api(_settings(rm, max_wait_ms=300)) as url, \
            httpx.Client(base_url=url, headers=AUTH, timeout=20) as client:
        rm.add("s")
        r = client.get("/streams/s", params={"after_seq": 1, "wait_ms": 30_000})
        assert r.status_code == 200 and r.json()["head_seq"] == 1


def test_the_store_notice_names_the_streams(projection_config):
    cfg = projection_config
    with psycopg.connect(cfg.database_url, autocommit=True) as conn, Store(cfg) as store:
        conn.execute(sql.SQL("listen {}").format(sql.Identifier(heads_channel(cfg.views_schema))))
        store.notify_heads(["b", "a"])
        store.notify_heads(f"s{i:05d}" for i in range(2000))  # too long to name: every stream
        got = [n.payload for n in conn.notifies(timeout=10, stop_after=2)]
    assert got[0] == "a b" and streams_of(got[0]) == {"a", "b"}
    assert streams_of(got[1]) is None


def test_the_live_projector_notices_each_batch_after_it_commits(projection_config, topics,
                                                                produce_chain):
    cfg = projection_config
    channel = heads_channel(cfg.views_schema)
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("listen {}").format(sql.Identifier(channel)))
        produce_chain(topics, streams={"a": 5, "b": 3}, response=os.urandom(100))
        named: set[str] = set()
        with running_projector(cfg):
            for notice in conn.notifies(timeout=60):
                names = streams_of(notice.payload)
                assert names is not None
                named |= names
                # a notice comes after its batch committed: its heads are readable then
                with psycopg.connect(cfg.database_url, autocommit=True) as reader:
                    heads = dict(reader.execute(
                        f'select stream, seq from "{cfg.views_schema}".heads').fetchall())
                assert names <= set(heads)
                # a batch's heads are readable a moment before its notice is sent (it goes
                # after the commit): once all are in, read on until each one's notice came
                if heads == {"a": 5, "b": 3} and named >= {"a", "b"}:
                    break
    assert named == {"a", "b"}
