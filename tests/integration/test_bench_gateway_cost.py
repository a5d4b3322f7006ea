"""``python -m bench.gateway_cost`` against the suite's broker, on topics of its own: one
gateway process a setting and rate, its CPU and its spool fsyncs counted."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def test_the_gateway_cost_bench_reports_each_setting_beside_the_old_one(
        kafka_bootstrap, topics, capsys):
    from bench.gateway_cost import SETTINGS, main

    assert main(["--rates", "100", "--seconds", "1", "--rounds", "1", "--json",
                 "--bootstrap", kafka_bootstrap, "--prefix", topics.names.prefix]) == 0
    result = json.loads(capsys.readouterr().out)
    rows = result["rows"]
    assert [(r["rate"], r["setting"]) for r in rows] == [(100.0, s) for s in SETTINGS]
    for r in rows:
        assert r["cpu_us"] > 0 and r["kernel_us"] >= 0 and r["captures_per_fsync"] >= 1
        # The compiled writer is always built here (make): only `pure encode` goes without.
        assert r["encode"] == ("pure" if r["setting"] == "pure encode" else "compiled"), r
    assert [r["vs_before"] for r in rows][0] == 1.0


def test_usage_errors_exit_2():
    from bench.gateway_cost import main

    for args in (["--rates", "x"], ["--rates", "0"], ["--seconds", "0"], ["--rounds", "0"],
                 ["--stall-broker", "2"], ["--stall-broker", "-1"]):
        with pytest.raises(SystemExit) as e:
            main(args)
        assert e.value.code == 2, args


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_a_stall_freezes_the_process_and_always_lets_it_go():
    """``--stall-broker``'s freezer, on a process of its own (never the suite's broker)."""
    import subprocess
    import threading

    from bench.gateway_cost import _stall
    from tests.fixtures.log import wait_until

    victim = subprocess.Popen(["sleep", "120"])
    done = threading.Event()
    t = threading.Thread(target=_stall, args=(victim.pid, 1.9, done), daemon=True)
    try:
        t.start()
        wait_until("the process frozen", lambda: _state(victim.pid) == "T", interval=0.01)
        done.set()  # mid-freeze: it must be let go
        t.join(30)
        assert not t.is_alive() and _state(victim.pid) != "T"
    finally:
        done.set()
        victim.kill()
        victim.wait()
