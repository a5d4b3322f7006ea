"""The services under test, each as its own process, so each has its own peak RSS.

- :func:`start_writer` — ``evidence writer`` on the bench's topics (optionally under py-spy);
- :class:`Service` ``projector`` — ``evidence projector`` into the bench's schemas;
- :class:`Service` ``api`` — the real app under uvicorn plus one bench-only route,
  ``GET /_bench/pk/{partition}/{offset}``: one primary-key select on the same views through
  the same pool, the "bare route" replay verify is measured against.

``peak_rss_mib(pid)`` reads ``VmHWM`` from ``/proc``: the kernel's own high-water mark of the
resident set, so no sampling can miss a peak.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

API_CODE = r"""
import os, uvicorn
from api import Settings, create_app
app = create_app(Settings.from_env())
db = app.state.db

@app.get("/_bench/pk/{partition}/{offset}")
async def bare(partition: int, offset: int):
    sql = (f'select log_offset from "{db.views}".records '
           'where log_partition = %s and log_offset = %s')
    async with db._connection() as conn:
        row = await (await conn.execute(sql, (partition, offset))).fetchone()
    return {"offset": row[0] if row else None}

uvicorn.run(app, host="127.0.0.1", port=int(os.environ["BENCH_PORT"]), log_level="warning",
            access_log=False, server_header=False)
"""


def peak_rss_mib(pid: int) -> float | None:
    """The process's peak resident set (VmHWM) in MiB, or None if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """A child process with its output in a temp file; ``stop()`` sends SIGTERM, then kills."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        self.name = name
        self._log = tempfile.NamedTemporaryFile("w+b", prefix=f"bench-{name}-", suffix=".log",
                                                delete=False)
        self.log_path = Path(self._log.name)
        self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=self._log,
                                     stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def assert_alive(self) -> None:
        if not self.alive():
            tail = self.log_path.read_text("utf-8", "replace")[-3000:]
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")

    def stop(self, timeout: float = 30.0) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        self.log_path.unlink(missing_ok=True)


def child_env(**extra: str) -> dict[str, str]:
    """``os.environ`` without the stack's EVIDENCE_* values, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVIDENCE_")}
    env.update({"PYTHONUNBUFFERED": "1", **extra})
    return env


def start_projector(cfg: Any) -> Service:
    env = child_env(**{**cfg.env(), "EVIDENCE_PROJECTOR_METRICS_PORT": "0"})
    return Service("projector", [sys.executable, "-m", "cli.main", "projector"], env)


def start_api(database_url: str, views_schema: str, key: str) -> tuple[Service, str]:
    port = free_port()
    env = child_env(EVIDENCE_DATABASE_URL=database_url, EVIDENCE_API_KEY=key,
                    EVIDENCE_API_KEY_STREAMS="*", EVIDENCE_PG_VIEWS_SCHEMA=views_schema,
                    EVIDENCE_API_POOL_MAX="20", BENCH_PORT=str(port))
    svc = Service("api", [sys.executable, "-c", API_CODE], env)
    base = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.monotonic() + 60
    while True:
        svc.assert_alive()
        try:
            if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                return svc, base
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the API did not come up within 60 s")
        time.sleep(0.1)
