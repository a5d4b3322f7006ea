"""The project's own long-running services, started by ``make up`` once they exist.

A service exists when its module can be imported; until the writer, projector or API land,
``make up`` simply has fewer things to start. Each runs as ``python -m cli.main <name>`` with
the stack's environment, its pid in ``.stack/services/<name>.pid`` and its output in
``.stack/services/<name>.log``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import urllib.request
from dataclasses import dataclass

from devstack.config import StackConfig, pid_alive, read_pid
from devstack.procs import log, start_detached, stop_pid_file, wait_until


@dataclass(frozen=True)
class Service:
    name: str
    module: str          # importable when the service exists
    health_path: str | None = None  # HTTP path on the API port, for services that serve one

    def exists(self) -> bool:
        try:
            return importlib.util.find_spec(self.module) is not None
        except ModuleNotFoundError:
            return False


# Start order matters only for a tidy log: each service waits for its inputs on its own.
SERVICES = (
    Service("writer", "writer.service"),
    Service("projector", "projections.service"),
    Service("api", "api.app", health_path="/healthz"),
)


def start_all(cfg: StackConfig, env: dict[str, str]) -> list[tuple[str, str]]:
    started = []
    cfg.services_dir.mkdir(parents=True, exist_ok=True)
    for svc in SERVICES:
        if not svc.exists():
            continue
        pid_file = cfg.services_dir / f"{svc.name}.pid"
        log_file = cfg.services_dir / f"{svc.name}.log"
        pid = read_pid(pid_file)
        if pid is not None and pid_alive(pid):
            started.append((svc.name, f"running (pid {pid}, log {log_file})"))
            continue
        pid = start_detached([sys.executable, "-m", "cli.main", svc.name], log_file, pid_file,
                             env={**os.environ, **env}, cwd=cfg.root)
        if svc.health_path:
            url = cfg.api_url + svc.health_path
            wait_until(f"service {svc.name}", lambda: _http_ok(url), 60, log_file, pid)
        else:
            # No port to probe: give it a moment to fail loudly on bad config.
            wait_until(f"service {svc.name}", lambda: _alive_for(pid, 2.0), 30, log_file, pid)
        started.append((svc.name, f"started (pid {pid}, log {log_file})"))
    return started


_first_seen: dict[int, float] = {}


def _alive_for(pid: int, seconds: float) -> bool:
    t0 = _first_seen.setdefault(pid, time.monotonic())
    return pid_alive(pid) and time.monotonic() - t0 >= seconds


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as r:
        return r.status == 200


def stop_all(cfg: StackConfig) -> None:
    for svc in reversed(SERVICES):
        stop_pid_file(f"service {svc.name}", cfg.services_dir / f"{svc.name}.pid")


def describe(cfg: StackConfig) -> list[tuple[str, str]]:
    rows = []
    for svc in SERVICES:
        pid = read_pid(cfg.services_dir / f"{svc.name}.pid")
        if not svc.exists():
            continue
        state = f"running (pid {pid})" if pid and pid_alive(pid) else "stopped"
        rows.append((svc.name, state))
    return rows
