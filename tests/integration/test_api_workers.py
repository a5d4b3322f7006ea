"""``evidence api --workers 2`` as a real process tree over a real read model: the workers
share one socket and each applies the same bounds (head deadline, body limit), logs JSON,
and the server exits 0 on SIGTERM with its workers, or 3 when its port is taken.

No timing is asserted beyond generous deadlines for things that must happen at all.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from devstack.ports import free_port
from tests.fixtures.readmodel import ReadModel

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
KEY = "workers-0123456789abcdef0123456789abcdef"


def _start(env, port, log):
    return subprocess.Popen([sys.executable, "-m", "cli.main", "api", "--workers", "2",
                             "--port", str(port)], env=env, cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT)


def _workers(pid: int) -> list[int]:
    kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(k) for k in kids if b"spawn_main" in Path(f"/proc/{k}/cmdline").read_bytes()]


@pytest.fixture(scope="module")
def server(database_url, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("api") / "api.log"
    with ReadModel(database_url) as rm, open(log_path, "w+b") as log:
        rec = rm.add("acme:chat", output="Hello!")
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("EVIDENCE_")},
               "EVIDENCE_DATABASE_URL": database_url, "EVIDENCE_API_KEY": KEY,
               "EVIDENCE_API_KEY_STREAMS": "*", "EVIDENCE_PG_VIEWS_SCHEMA": rm.views,
               "EVIDENCE_API_HEADER_TIMEOUT": "1", "EVIDENCE_API_MAX_VERIFY_BYTES": "4096",
               "EVIDENCE_API_POOL_MAX": "3"}
        port = free_port()
        proc = _start(env, port, log)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        while len(_workers(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        try:
            yield {"proc": proc, "base": base, "port": port, "env": env, "rec": rec,
                   "log": log_path}
        finally:
            # SIGTERM, as an operator stops it, so the server stops its workers: a SIGKILL
            # of the server alone left them running, orphaned (this module's tests split
            # over two xdist workers, so that one never ran the SIGTERM test below).
            if proc.poll() is None:
                workers = _workers(proc.pid)
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
                for pid in workers:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)


def test_two_workers_serve_the_app_on_one_port(server):
    assert len(_workers(server["proc"].pid)) == 2
    auth = {"Authorization": f"Bearer {KEY}"}
    for _ in range(20):  # fresh connections: whichever worker accepts answers the same
        r = httpx.post(server["base"] + "/replay/verify", headers=auth,
                       json={"stream": "acme:chat", "seq": 1, "replayed_output": "Hello!"})
        assert r.status_code == 200 and r.json()["match"] is True
    assert httpx.get(server["base"] + "/metrics").status_code == 200


def _verify_200s(text: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith("evidence_api_requests_total{") and 'route="/replay/verify"' in line \
                and 'status="200"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_scrape_counts_the_requests_of_every_worker(server):
    """Multiprocess metrics: whichever worker answers /metrics, it counts the requests all
    workers served (fresh connections spread them over both)."""
    auth = {"Authorization": f"Bearer {KEY}"}
    before = _verify_200s(httpx.get(server["base"] + "/metrics").text)
    for _ in range(30):
        r = httpx.post(server["base"] + "/replay/verify", headers=auth,
                       json={"stream": "acme:chat", "seq": 1, "replayed_output": "Hello!"})
        assert r.status_code == 200
    scrapes = {_verify_200s(httpx.get(server["base"] + "/metrics").text) for _ in range(10)}
    assert scrapes == {before + 30}, scrapes
    text = httpx.get(server["base"] + "/metrics").text
    assert "evidence_api_projection_lag" in text and "evidence_api_request_duration_seconds_bucket" in text


def test_each_worker_keeps_the_body_limit(server):
    auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    for _ in range(6):
        r = httpx.post(server["base"] + "/replay/verify", headers=auth, content=b"x" * 5000)
        assert r.status_code == 413 and r.json()["error"] == "too_large"


def test_each_worker_closes_a_connection_whose_head_does_not_arrive(server):
    for _ in range(4):
        with socket.create_connection(("127.0.0.1", server["port"]), timeout=15) as s:
            s.sendall(b"GET /healthz HT")
            assert s.recv(100) == b""  # closed by the server, not answered


def test_workers_log_json_lines(server):
    lines = [json.loads(line) for line in server["log"].read_text().splitlines()
             if line.startswith("{")]
    starts = [line for line in lines if line["event"].startswith("Started server process")]
    assert len(starts) >= 2, "each worker's lines are JSON"
    assert any(line["event"] == "serving" and line["workers"] == 2 for line in lines)


def test_a_taken_port_exits_3_and_sigterm_stops_every_worker(server, tmp_path):
    with open(tmp_path / "second.log", "w+b") as log:
        second = _start(server["env"], server["port"], log)
        assert second.wait(60) == 3

    proc = server["proc"]
    workers = _workers(proc.pid)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    for pid in workers:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
