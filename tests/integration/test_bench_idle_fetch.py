"""``python -m bench.idle_fetch`` against the suite's broker: idle consumers with the writer's
intake settings at two fetch waits, the broker's CPU counted from /proc, the topic deleted."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AdminClient

from tests.fixtures.log import wait_until

pytestmark = pytest.mark.integration


def test_the_idle_fetch_bench_counts_the_brokers_cpu_per_wait_and_cleans_up(
        kafka_bootstrap, capsys):
    from bench.idle_fetch import main
    from bench.run import stack_pids

    pid = stack_pids().get("kafka")
    assert pid is not None, "the suite's broker runs here (devstack)"
    topics_before = set(AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(
        timeout=10).topics)

    assert main(["--waits", "10,200", "--consumers", "2", "--seconds", "1", "--json",
                 "--bootstrap", kafka_bootstrap, "--broker-pid", str(pid)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["fetch_wait_ms"] for r in rows] == [10, 200]
    for r in rows:
        assert r["consumers"] == 2 and r["core_share_per_consumer"] >= 0
        assert r["broker_cpu_s_idle"] >= 0 and r["broker_cpu_s_with_consumers"] >= 0
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    wait_until("the bench's topic deleted", lambda: not {
        t for t in admin.list_topics(timeout=10).topics if t.startswith("bench-idle-")
    } - topics_before, timeout=60)


def test_usage_errors_exit_2(capsys):
    from bench.idle_fetch import main

    for args in (["--waits", "x"], ["--consumers", "0"], ["--seconds", "0"]):
        with pytest.raises(SystemExit) as e:
            main(args)
        assert e.value.code == 2, args
