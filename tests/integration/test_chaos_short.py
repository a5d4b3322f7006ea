"""The short chaos run (`make chaos SHORT=1 BROKERS=3`) in CI, on the stack as it is deployed:
a Kafka cluster of three. 45 s of load through the real gateway from three processes, one
clock skewed by an hour, while the writer, the projector and a load process are killed -9,
the broker coordinating the writer's transactions is killed -9 and restarted, the next
coordinator is stalled (SIGSTOP) past its session with the controller, PostgreSQL is shut
down immediately and a spool's disk fills; then every capture that returned to the
application must be sealed exactly once, seq gapless, the projection equal to the log and
`evidence audit` clean.

A single broker killed -9 under a sealing writer is tested by test_writer_heals, a gateway
capturing while Kafka is down by test_gateway_spool; the full `make chaos` (one broker by
default, BROKERS=3 for the cluster, where it also restarts a third broker cleanly) runs both.

It runs on an isolated stack of its own (free ports, a temporary directory), beside the
suite's stack, and writes its report to a temporary directory, not to chaos/results/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.kafka import one_cluster_at_a_time

# The run waits for the suite's other clusters first (one_cluster_at_a_time).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def test_short_chaos_run_on_three_brokers_loses_duplicates_and_gaps_nothing(tmp_path):
    with one_cluster_at_a_time():
        proc = subprocess.run(
            [sys.executable, "-m", "chaos", "--short", "--brokers", "3",
             "--report-dir", str(tmp_path)],
            cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, capture_output=True,
            text=True, timeout=800)
    reports = sorted(tmp_path.glob("*.json"))
    assert reports, f"no report; exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    result = json.loads(reports[-1].read_text())
    detail = f"{result.get('summary')}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0 and result["passed"], detail
    assert result["submitted"] > 500, detail
    assert (result["lost"], result["duplicated"], result["gaps"]) == (0, 0, 0), detail
    assert result["duplicated_event_ids"] == 0, detail
    assert result["projection"]["equal_to_log"] and result["audit_exit"] == 0, detail
    # every fault of the schedule happened, and the supervisor brought the killed back
    for kind in ("writer_kill", "projector_kill", "broker_kill", "broker_stall",
                 "postgres_restart", "spool_disk_full", "clock_skew", "load_kill"):
        assert result["faults"].get(kind, 0) >= 1, (kind, detail)
    assert result["restarts"]["writer"] >= 1 and result["restarts"]["projector"] >= 1, detail
    # on three brokers, one at a time, the transaction coordinator's first
    assert result["brokers"] == 3, detail
    hits = result["broker_faults"]
    assert [h["fault"] for h in hits] == ["broker_kill", "broker_stall"], detail
    assert all(h["coordinator"] for h in hits), detail
