"""The local stack's supervisor: a service that exits is restarted with backoff; exit 3 means
"do not restart me" (a fenced writer); SIGTERM stops both, without a restart."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import pathlib, sys, time
runs = pathlib.Path(sys.argv[1])
n = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(n))
if n <= int(sys.argv[2]):
    sys.exit(int(sys.argv[3]))
time.sleep(60)
"""


def supervise(tmp_path: Path, fail_runs: int, code: int) -> tuple[subprocess.Popen, Path, Path]:
    state, runs = tmp_path / "svc.state", tmp_path / "runs"
    p = subprocess.Popen([sys.executable, "-m", "devstack.supervise", "svc", str(state), "--",
                          sys.executable, "-c", CHILD, str(runs), str(fail_runs), str(code)],
                         cwd=ROOT)
    return p, state, runs


def wait_for(pred, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def state(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def test_a_crashing_service_is_restarted_with_backoff_and_sigterm_stops_it(tmp_path):
    p, st, runs = supervise(tmp_path, fail_runs=2, code=1)
    try:
        wait_for(lambda: state(st).get("restarts") == 2 and state(st).get("state") == "running"
                 and runs.exists() and runs.read_text() == "3")
        s = state(st)
        assert s["last_exit"] == 1 and s["pid"] and s["supervisor_pid"] == p.pid
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0
        assert state(st)["state"] == "stopped" and runs.read_text() == "3"
    finally:
        p.kill()


def test_exit_3_is_not_restarted(tmp_path):
    p, st, runs = supervise(tmp_path, fail_runs=1, code=3)
    try:
        assert p.wait(10) == 3
        assert state(st)["state"].startswith("exited 3") and runs.read_text() == "1"
    finally:
        p.kill()
