"""The project's own long-running services, started by ``make up`` once they exist.

A service exists when its module can be imported; until the writer, projector or API land,
``make up`` simply has fewer things to start. Each runs as ``python -m cli.main <name>`` with
the stack's environment under a supervisor (``devstack.supervise``: restarted with backoff
when it exits, unless it exits 3, "do not restart me"), the supervisor's pid in
``.stack/services/<name>.pid``, its state in ``<name>.state`` and both their output in
``.stack/services/<name>.log``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import urllib.request
from dataclasses import dataclass

from pathlib import Path

from devstack.config import StackConfig, StackError, pid_alive, read_pid
from devstack.procs import log, start_detached, stop_pid_file, tail, wait_until
from devstack.supervise import read_state


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
        state_file = cfg.services_dir / f"{svc.name}.state"
        state_file.unlink(missing_ok=True)
        pid = start_detached([sys.executable, "-m", "devstack.supervise", svc.name,
                              str(state_file), "--", sys.executable, "-m", "cli.main", svc.name],
                             log_file, pid_file, cwd=cfg.root,
                             env={**os.environ, **env, "EVIDENCE_API_PORT": str(cfg.api_port)})
        if svc.health_path:
            url = cfg.api_url + svc.health_path
            wait_until(f"service {svc.name}",
                       lambda: _first_run_ok(state_file, log_file) and _http_ok(url), 60,
                       log_file, pid)
        else:
            # No port to probe: give it a moment to fail loudly on bad config.
            wait_until(f"service {svc.name}", lambda: _first_run_ok(state_file, log_file, 2.0),
                       30, log_file, pid)
        started.append((svc.name, f"started (supervisor pid {pid}, log {log_file})"))
    return started


def _first_run_ok(state_file: Path, log_file: Path, seconds: float = 0.0) -> bool:
    """The service's first run has lasted ``seconds``; a restart already is a start-up
    failure (bad config, say), reported with the log's tail rather than retried forever."""
    state = read_state(state_file)
    if state is None:
        return False
    if state["restarts"] or state["pid"] is None:
        raise StackError(f"{state['name']} exited {state['last_exit']} during start-up; see "
                         f"{log_file}. Last lines:\n{tail(log_file)}")
    return time.time() - state["started_at"] >= seconds


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
        if not (pid and pid_alive(pid)):
            rows.append((svc.name, "stopped"))
            continue
        st = read_state(cfg.services_dir / f"{svc.name}.state") or {}
        last = f", last exit {st['last_exit']}" if st.get("last_exit") is not None else ""
        rows.append((svc.name, f"{st.get('state', 'running')} (pid {st.get('pid')}, supervisor "
                               f"{pid}, restarts {st.get('restarts', 0)}{last})"))
    return rows
