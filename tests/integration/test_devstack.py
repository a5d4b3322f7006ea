"""The devstack lifecycle on its own ports and directory: up, up again, crash, up (data
kept), down (by recorded pid), down --clean."""

from __future__ import annotations

import gc
import os
import signal
import time
import uuid

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from devstack import StackConfig, down, read_env, status, up
from devstack.config import pid_alive, read_pid
from devstack.ports import free_port
from devstack.procs import port_open

pytestmark = pytest.mark.integration


def _read_all(bootstrap: str, topic: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(6)])
    out, deadline = [], time.monotonic() + 15
    while time.monotonic() < deadline and not out:
        msg = c.poll(0.5)
        if msg is not None and not msg.error():
            out.append(msg.value())
    c.close()
    return out


def test_lifecycle_keeps_data_across_a_crash_and_cleans_up(tmp_path):
    cfg = StackConfig(root=tmp_path, kafka_port=free_port(), controller_port=free_port(),
                      postgres_port=free_port(), api_port=free_port())
    try:
        env = up(cfg, with_services=False)
        assert {"EVIDENCE_KAFKA_BOOTSTRAP", "EVIDENCE_DATABASE_URL", "EVIDENCE_API_URL",
                "EVIDENCE_API_KEY"} <= set(read_env(cfg))
        assert env["EVIDENCE_KAFKA_BOOTSTRAP"] == f"127.0.0.1:{cfg.kafka_port}"

        p = Producer({"bootstrap.servers": cfg.bootstrap, "enable.idempotence": True})
        p.produce("evidence.log", key=b"s", value=b"kept across a crash")
        assert p.flush(30) == 0
        # Gone before the crash: a client left reconnecting to the dead broker's port (an
        # ephemeral-range port here) can connect to itself and hold the port.
        del p
        gc.collect()
        with psycopg.connect(cfg.database_url, autocommit=True) as conn:
            conn.execute("create table kept (v text)")
            conn.execute("insert into kept values ('row')")

        kafka_pid = read_pid(cfg.kafka_dir / "pid")
        again = up(cfg, with_services=False)
        assert again["EVIDENCE_API_KEY"] == env["EVIDENCE_API_KEY"]
        assert read_pid(cfg.kafka_dir / "pid") == kafka_pid, "a second up must not restart Kafka"

        # A crash: both servers die without a chance to clean up.
        os.kill(kafka_pid, signal.SIGKILL)
        pg_pid = read_pid(cfg.postgres_dir / "data" / "postmaster.pid")
        os.kill(pg_pid, signal.SIGKILL)
        while pid_alive(kafka_pid) or pid_alive(pg_pid):
            time.sleep(0.1)

        up(cfg, with_services=False)
        assert read_pid(cfg.kafka_dir / "pid") != kafka_pid
        assert _read_all(cfg.bootstrap, "evidence.log") == [b"kept across a crash"]
        with psycopg.connect(cfg.database_url) as conn:
            assert conn.execute("select v from kept").fetchall() == [("row",)]
        assert dict(status(cfg))["kafka"].startswith("running")

        new_kafka_pid = read_pid(cfg.kafka_dir / "pid")
        down(cfg)
        assert not pid_alive(new_kafka_pid)
        assert not port_open(cfg.kafka_port) and not port_open(cfg.postgres_port)
        assert (cfg.kafka_dir / "data").exists(), "down without clean keeps the data"
    finally:
        down(cfg, clean=True)
    assert not cfg.stack.exists()
