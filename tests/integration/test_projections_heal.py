"""The projector rides out what breaks around it: its PostgreSQL connections terminated (as a
restart of the server does to them), Kafka not there when it starts. It reconnects with backoff,
seeks to the positions stored in PostgreSQL and goes on, each record exactly once. Its heartbeat
tells readiness (the API's /readyz, ``evidence projections status``) when it is gone.

The PostgreSQL of the tests is shared: only this projector's own backends are terminated (each
test gives its projector an application_name of its own)."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest

from api import Keyring, Settings
from devstack import StackConfig
from devstack import kafka as devkafka
from devstack.ports import free_port
from tests.fixtures.log import chain, heads_of, produce, projected, start_projector, wait_until
from topics import TopicNames, TopicSettings, ensure_topics

pytestmark = pytest.mark.integration


def terminate_backends(cfg) -> int:
    """pg_terminate_backend of every backend of this projector (by its application_name)."""
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        return len(conn.execute(
            "select pg_terminate_backend(pid) from pg_stat_activity "
            "where application_name = %s and pid <> pg_backend_pid()",
            (cfg.application_name,)).fetchall())


def backends(cfg) -> int:
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        return conn.execute("select count(*) from pg_stat_activity where application_name = %s",
                            (cfg.application_name,)).fetchone()[0]


def events(log_path: Path, name: str) -> list[str]:
    return [line for line in log_path.read_text().splitlines() if f'"event":"{name}"' in line]


def assert_each_record_once(cfg, recs) -> None:
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        v = f'"{cfg.views_schema}"'
        total, distinct = conn.execute(
            f"select count(*), count(distinct (log_partition, log_offset)) from {v}.records"
        ).fetchone()
        assert (total, distinct) == (len(recs), len(recs))
        assert {(r.partition, r.offset) for r in recs} == set(conn.execute(
            f"select log_partition, log_offset from {v}.records").fetchall())
        assert conn.execute(f"select count(*) from {v}.findings").fetchone()[0] == 0
        assert conn.execute(f"select sum(record_count) from {v}.heads").fetchone()[0] == len(recs)


def test_the_projector_rides_out_its_backends_terminated_and_projects_each_record_once(
        make_topics, make_projection_config, produce_chain, kafka_bootstrap, tmp_path):
    topics = make_topics(partitions=3)
    cfg = make_projection_config(topics, application_name=f"projector-{uuid.uuid4().hex[:8]}")
    streams = {f"s{i}": 300 for i in range(10)}
    recs = produce_chain(topics, streams=streams, response=os.urandom(256))
    log_path = tmp_path / "projector.log"
    p = start_projector(cfg, log_path, batch=200)
    try:
        wait_until("some records projected", lambda: projected(cfg) > 0 or p.poll() is not None,
                   timeout=40)
        for _ in range(3):  # in the middle of the catch-up, and again while it goes on
            wait_until("the projector connected", lambda: backends(cfg) > 0
                       or p.poll() is not None, timeout=30)
            seen = len(events(log_path, "reconnecting"))
            assert terminate_backends(cfg) >= 1
            wait_until("the termination noticed", lambda: len(events(log_path, "reconnecting"))
                       > seen or p.poll() is not None, timeout=30)
            assert p.poll() is None, log_path.read_text()[-3000:]
        wait_until("the first records", lambda: projected(cfg) == len(recs)
                   or p.poll() is not None, timeout=60)
        more = produce(kafka_bootstrap, topics,
                       chain({s: 50 for s in streams}, start=heads_of(recs)))
        wait_until("the projector connected", lambda: backends(cfg) > 0, timeout=30)
        terminate_backends(cfg)
        wait_until("every record", lambda: projected(cfg) == len(recs) + len(more)
                   or p.poll() is not None, timeout=60)
        # The last termination may reach a projector already idle (the 500 records projected
        # before it): it notices at its next write, the heartbeat's within seconds.
        wait_until("each termination noticed", lambda: len(events(log_path, "reconnecting")) >= 4
                   or p.poll() is not None, timeout=30)
        assert p.poll() is None, log_path.read_text()[-3000:]
        p.send_signal(signal.SIGTERM)
        assert p.wait(20) == 0, log_path.read_text()[-3000:]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    assert_each_record_once(cfg, recs + more)
    assert len(events(log_path, "reconnecting")) >= 4
    assert not events(log_path, "fatal")


def test_the_projector_waits_for_kafka_that_is_not_there_at_start(make_projection_config,
                                                                    tmp_path):
    kcfg = StackConfig(root=tmp_path / "kafka", kafka_port=free_port(),
                       controller_port=free_port())
    topics = TopicSettings(names=TopicNames(f"w{uuid.uuid4().hex[:10]}"), partitions=3)
    cfg = make_projection_config(topics)
    from dataclasses import replace

    cfg = replace(cfg, bootstrap=kcfg.bootstrap)
    log_path = tmp_path / "projector.log"
    p = start_projector(cfg, log_path, batch=200)
    try:
        # Kafka is not there: it waits instead of exiting (was: exit 1, "list topics: ...
        # Broker transport failure").
        wait_until("a second retry", lambda: len(events(log_path, "reconnecting")) >= 2
                   or p.poll() is not None, timeout=40)
        assert p.poll() is None, log_path.read_text()[-3000:]
        devkafka.start(kcfg)
        ensure_topics(kcfg.bootstrap, topics)
        recs = produce(kcfg.bootstrap, topics, chain({"a": 40, "b": 30}))
        wait_until("every record", lambda: projected(cfg) == len(recs) or p.poll() is not None,
                   timeout=90)
        assert p.poll() is None, log_path.read_text()[-3000:]
        p.send_signal(signal.SIGTERM)
        assert p.wait(20) == 0
        assert_each_record_once(cfg, recs)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        devkafka.stop(kcfg)


def test_a_dead_projector_makes_readyz_and_status_say_not_ready_within_seconds(
        make_topics, make_projection_config, produce_chain, make_api_server, tmp_path):
    from cli.main import main

    topics = make_topics(partitions=2)
    cfg = make_projection_config(topics)
    recs = produce_chain(topics, streams={"a": 20})
    key = "ready-key-0123456789abcdef0123456789abcdef"
    base = make_api_server(Settings(cfg.database_url, Keyring([("k", key, ["*"])]),
                                    views_schema=cfg.views_schema, max_lag=10))
    log_path = tmp_path / "projector.log"
    p = start_projector(cfg, log_path, batch=200)
    flags = ["--database-url", cfg.database_url, "--bootstrap", cfg.bootstrap,
             "--topic-prefix", topics.names.prefix, "--meta-schema", cfg.meta_schema,
             "--views-schema", cfg.views_schema, "--generation-prefix", cfg.generation_prefix]
    try:
        wait_until("records projected", lambda: projected(cfg) == len(recs), timeout=40)
        wait_until("ready", lambda: httpx.get(base + "/readyz").status_code == 200, timeout=20)
        assert main(["projections", "status", *flags]) == 0
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        # Its positions still read "lag 0"; its heartbeat stops, and readiness says so.
        wait_until("not ready", lambda: httpx.get(base + "/readyz").status_code == 503,
                   timeout=30)
        r = httpx.get(base + "/readyz")
        assert "heartbeat" in r.json()["message"] and r.headers["retry-after"]
        assert main(["projections", "status", *flags]) == 1
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
