"""The project's own long-running services, started by ``make up`` once they exist.

A service exists when its module can be imported; until the writer, projector or API land,
``make up`` simply has fewer things to start. Each runs as ``python -m cli.main <name>`` with
the stack's environment under a supervisor (``devstack.supervise``: restarted with backoff
when it exits, unless it exits 3, "do not restart me"), the supervisor's pid in
``.stack/services/<name>.pid``, its state in ``<name>.state`` and both their output in
``.stack/services/<name>.log``. A service with ``needs`` runs only when that variable is set
(in the process's environment or ``.stack/env``): the retention shredder needs
``EVIDENCE_RETENTION_FILE``.

Scale-out (``make up WRITERS=2 PROJECTORS=2``: ``EVIDENCE_WRITERS``, ``EVIDENCE_PROJECTORS``;
1 each by default): a scalable service runs as instances ``writer``, ``writer-2``, ...
(:func:`instances`), each under its own supervisor, with its own pid, state and log files.
Instance N > 1 of the writer has transactional id (and so group instance id)
``evidence-writer-N`` in the writers' one consumer group, and every instance N > 1 its
metrics port 10 × (N − 1) above the service's default (writer-2 9474, projector-2 9475);
the first instance is exactly what a stack of one runs. An ``up`` with a smaller count stops
the instances above it; one without the variable leaves the running ones be.
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
    args: tuple[str, ...] = ()      # after ``cli.main <name>``
    needs: str | None = None        # an environment variable that must be set to run it
    scale: str | None = None        # the variable with its instance count (default 1)
    instance_env: tuple[tuple[str, str, int], ...] = ()
    """Per instance N > 1: (variable, value with ``{n}``, or "" for a port, port default)."""

    def exists(self) -> bool:
        try:
            return importlib.util.find_spec(self.module) is not None
        except ModuleNotFoundError:
            return False


# Start order matters only for a tidy log: each service waits for its inputs on its own.
SERVICES = (
    Service("writer", "writer.service", scale="EVIDENCE_WRITERS", instance_env=(
        ("EVIDENCE_WRITER_TRANSACTIONAL_ID", "evidence-writer-{n}", 0),
        ("EVIDENCE_WRITER_METRICS_PORT", "", 9464))),
    Service("projector", "projections.service", scale="EVIDENCE_PROJECTORS", instance_env=(
        ("EVIDENCE_PROJECTOR_METRICS_PORT", "", 9465),)),
    Service("api", "api.app", health_path="/healthz"),
    Service("witness", "witness.service", args=("run",)),
    Service("publisher", "publisher.service"),
    Service("retention", "server.retention", args=("run",), needs="EVIDENCE_RETENTION_FILE"),
)


MAX_INSTANCES = 16


def count(svc: Service, env: dict[str, str]) -> int | None:
    """How many instances of ``svc`` to run: its ``scale`` variable; None when it is not set
    (``make test`` and ``make bench`` run ``up`` too: they keep what runs as it is)."""
    if svc.scale is None:
        return 1
    raw = env.get(svc.scale, "")
    if raw == "":
        return None
    try:
        n = int(raw)
    except ValueError:
        raise StackError(f"{svc.scale}={raw!r} is not a number of instances") from None
    if not 1 <= n <= MAX_INSTANCES:
        raise StackError(f"{svc.scale}={n}: between 1 and {MAX_INSTANCES}")
    return n


def instances(svc: Service, n: int) -> list[tuple[str, dict[str, str]]]:
    """``svc``'s first ``n`` instances as (name, the environment only that instance has)."""
    out: list[tuple[str, dict[str, str]]] = [(svc.name, {})]
    for i in range(2, n + 1):
        out.append((f"{svc.name}-{i}", {
            var: value.format(n=i) if value else str(port + 10 * (i - 1))
            for var, value, port in svc.instance_env}))
    return out


def _running_instances(cfg: StackConfig, svc: Service) -> list[str]:
    """The names of ``svc``'s instances that have a pid file (any count), first first."""
    extra = sorted((p.stem for p in cfg.services_dir.glob(f"{svc.name}-*.pid")
                    if p.stem.removeprefix(f"{svc.name}-").isdigit()),
                   key=lambda name: int(name.rsplit("-", 1)[1]))
    return [svc.name, *extra]


def start_all(cfg: StackConfig, env: dict[str, str]) -> list[tuple[str, str]]:
    started = []
    cfg.services_dir.mkdir(parents=True, exist_ok=True)
    for svc in SERVICES:
        if not svc.exists() or (svc.needs and not {**os.environ, **env}.get(svc.needs)):
            continue
        n = count(svc, {**os.environ, **env})
        wanted = instances(svc, n or 1)
        names = {name for name, _ in wanted}
        for name in _running_instances(cfg, svc):
            if name not in names and n is not None:  # scaled down
                stop_pid_file(f"service {name}", cfg.services_dir / f"{name}.pid")
        for name, own_env in wanted:
            started.append(_start(cfg, svc, name, {**env, **own_env}))
    return started


def _start(cfg: StackConfig, svc: Service, name: str, env: dict[str, str]) -> tuple[str, str]:
    pid_file = cfg.services_dir / f"{name}.pid"
    log_file = cfg.services_dir / f"{name}.log"
    pid = read_pid(pid_file)
    if pid is not None and pid_alive(pid):
        return (name, f"running (pid {pid}, log {log_file})")
    state_file = cfg.services_dir / f"{name}.state"
    state_file.unlink(missing_ok=True)
    pid = start_detached([sys.executable, "-m", "devstack.supervise", name,
                          str(state_file), "--", sys.executable, "-m", "cli.main", svc.name,
                          *svc.args],
                         log_file, pid_file, cwd=cfg.root,
                         env={**os.environ, **env, "EVIDENCE_API_PORT": str(cfg.api_port)})
    if svc.health_path:
        url = cfg.api_url + svc.health_path
        wait_until(f"service {svc.name}",
                   lambda: _first_run_ok(state_file, log_file) and _http_ok(url), 60,
                   log_file, pid)
    else:
        # No port to probe: give it a moment to fail loudly on bad config.
        wait_until(f"service {name}", lambda: _first_run_ok(state_file, log_file, 2.0),
                   30, log_file, pid)
    return (name, f"started (supervisor pid {pid}, log {log_file})")


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
        for name in reversed(_running_instances(cfg, svc)):
            stop_pid_file(f"service {name}", cfg.services_dir / f"{name}.pid")


def _supervisor(cfg: StackConfig, name: str) -> int | None:
    """The pid of service instance ``name``'s supervisor while it is alive, else None."""
    pid = read_pid(cfg.services_dir / f"{name}.pid")
    return pid if pid and pid_alive(pid) else None


def running(cfg: StackConfig) -> list[str]:
    """The names of the stack's services whose supervisor is alive, in start order."""
    return [name for svc in SERVICES for name in _running_instances(cfg, svc)
            if _supervisor(cfg, name)]


def describe(cfg: StackConfig) -> list[tuple[str, str]]:
    rows = []
    for svc in SERVICES:
        if not svc.exists():
            continue
        for name in _running_instances(cfg, svc):
            pid = _supervisor(cfg, name)
            if pid is None:
                if name == svc.name:
                    rows.append((name, "stopped"))
                continue
            st = read_state(cfg.services_dir / f"{name}.state") or {}
            last = f", last exit {st['last_exit']}" if st.get("last_exit") is not None else ""
            rows.append((name, f"{st.get('state', 'running')} (pid {st.get('pid')}, "
                               f"supervisor {pid}, restarts {st.get('restarts', 0)}{last})"))
    return rows
