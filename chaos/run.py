"""The chaos run: an isolated stack, load through the real gateway, a fault schedule, checks.

    python -m chaos [--duration S] [--short] [--brokers 1|3] [--processes N] [--rate R] [--keep]

Faults, spread over the run (``--short`` keeps one of each kind that matters most):
writer kill -9, projector kill -9 (the supervisor restarts both), broker kill -9 and restart
(with ``--brokers 3``, on a cluster of three: one broker at a time killed -9, stalled and
restarted, the transaction coordinator's among them, :mod:`chaos.brokers`), PostgreSQL immediate restart (a crash and recovery), a load process's spool disk full for a
while (RLIMIT_FSIZE), kill -9 of a load process (a live one adopts its spool: the load goes on
past the schedule until none of the killed process's spools is left), and one load process
whose clock runs an hour ahead for the whole run.

Once the load has stopped, a Recorder on the spool root adopts and delivers whatever spools are
left (a load process that could not close in time), as the application's next start would:
a capture acknowledged to the application is in a spool until it is delivered, and delivered
by the next Recorder on its root. The report counts them (``recovered_at_end``).

Checks, once the load has stopped: every call the application saw succeed was sealed exactly
once (by content key, each request being unique), every stream's seqs are 1..n and chain
(``evidence_contract.chain``, digests recomputed), the projection holds exactly the log's
records, and ``evidence audit`` exits 0. One summary line; the report goes to
``chaos/results/<UTC time>.json`` and ``latest.md``, the services' and load processes' logs to
``chaos/results/last-logs/``. Exit 0 when everything holds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from devstack.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "chaos" / "results"


def _say(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass
class Run:
    cfg: Any
    env: dict[str, str]
    work: Path
    control: Path
    spool_root: Path
    rate: float
    loads: dict[str, subprocess.Popen] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    killed: list[int] = field(default_factory=list)  # pids of load processes killed -9
    cluster: Any = None  # chaos.brokers.BrokerFaults on a cluster of three

    def broker_logs(self) -> list[tuple[Path, str]]:
        """Each broker's log and the name it is kept under."""
        nodes = self.cfg.kafka_nodes
        if len(nodes) == 1:
            return [(self.cfg.kafka_log, self.cfg.kafka_log.name)]
        return [(n.log, f"kafka-{n.node_id}.log") for n in nodes]

    def fault(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1

    def start_load(self, name: str, skew_s: float = 0.0) -> None:
        env = {**os.environ, **self.env, "CHAOS_SPOOL_ROOT": str(self.spool_root),
               "CHAOS_RATE": str(self.rate), "CHAOS_CLOCK_SKEW_S": str(skew_s),
               "PYTHONUNBUFFERED": "1"}
        log = open(self.work / f"{name}.log", "ab")
        self.loads[name] = subprocess.Popen(
            [sys.executable, "-m", "chaos.load", name, str(self.work / f"{name}.calls"),
             str(self.control)], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def service_pid(self, name: str) -> int | None:
        from devstack.supervise import read_state

        st = read_state(self.cfg.services_dir / f"{name}.state") or {}
        return st.get("pid")

    def kill_service(self, name: str) -> None:
        pid = self.service_pid(name)
        if pid:
            _say(f"kill -9 {name} (pid {pid})")
            os.kill(pid, signal.SIGKILL)
            self.fault(f"{name}_kill")

    def restarts(self, name: str) -> int:
        from devstack.supervise import read_state

        return (read_state(self.cfg.services_dir / f"{name}.state") or {}).get("restarts", 0)

    def stop_loads(self) -> None:
        """Every load process closes its Recorder (SIGTERM), or is killed after 120 s."""
        for p in self.loads.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.loads.values():
            try:
                p.wait(120)
            except subprocess.TimeoutExpired:
                p.kill()

    def calls(self) -> tuple[dict[str, str], dict[str, dict]]:
        """What the load processes wrote: each call returned to the application (content key
        -> stream), and each process's Recorder metrics."""
        submitted: dict[str, str] = {}
        metrics: dict[str, dict] = {}
        for f in self.work.glob("*.calls"):
            for number, line in enumerate(f.read_text().splitlines(), 1):
                fields = line.split()
                if len(fields) != 2:
                    raise ValueError(f"{f}:{number}: not a call (content key, stream): {line!r}")
                submitted[fields[0]] = fields[1]
            m = Path(f"{f}.metrics")
            if m.exists():
                metrics[f.stem] = json.loads(m.read_text())
        return submitted, metrics

    def keep_logs(self, logs: Path) -> None:
        """Copy the services', the broker's and the load processes' logs to ``logs``."""
        shutil.rmtree(logs, ignore_errors=True)
        logs.mkdir(parents=True, exist_ok=True)
        files = [(f, f.name) for f in [*self.cfg.services_dir.glob("*.log"),
                                       *self.work.glob("*.log")]]
        for f, name in [*files, *self.broker_logs()]:
            try:
                shutil.copy(f, logs / name)
            except OSError:
                pass

    def tear_down(self) -> None:
        """Kill what still runs, stop the stack and remove its directory."""
        from devstack import stack

        for p in self.loads.values():
            if p.poll() is None:
                p.kill()
        stack.down(self.cfg, clean=True)
        shutil.rmtree(self.work, ignore_errors=True)


def _kill_broker(run: Run) -> None:
    from devstack import kafka
    from devstack.config import read_pid

    pid = read_pid(run.cfg.kafka_dir / "pid")
    _say(f"kill -9 the broker (pid {pid}); restart in 3 s")
    if pid:
        os.kill(pid, signal.SIGKILL)
    time.sleep(3)
    kafka.start(run.cfg)
    run.fault("broker_kill")


def _restart_postgres(run: Run) -> None:
    from devstack import postgres

    _say("PostgreSQL: immediate restart (crash and recovery)")
    postgres.restart(run.cfg, "immediate")
    run.fault("postgres_restart")


def _disk_full(run: Run, seconds: float) -> None:
    _say(f"spool disk full for {seconds:.0f} s (every load process)")
    (run.control / "disk-full").touch()
    time.sleep(seconds)
    (run.control / "disk-full").unlink()
    run.fault("spool_disk_full")


def _kill_load(run: Run, name: str) -> None:
    proc = run.loads[name]
    _say(f"kill -9 load process {name} (pid {proc.pid}); a new one takes its place")
    proc.kill()
    proc.wait()
    run.killed.append(proc.pid)
    run.start_load(f"{name}b")
    run.fault("load_kill")


def _spools_of(run: Run, pids: list[int]) -> list[str]:
    """The spools under the run's spool root that processes ``pids`` made (the pid is the
    second field of a spool's name)."""
    from evidence_client.spool import spool_dirs

    return [d.name for d in spool_dirs(run.spool_root)
            if any(d.name.split("-")[1:2] == [str(pid)] for pid in pids)]


def _await_adoption(run: Run, timeout: float = 120.0) -> list[str]:
    """Keep the load going until the live load processes have adopted and resent every spool
    of the killed ones (a live Recorder scans for orphans every 2 s); the spools still left
    after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    left = _spools_of(run, run.killed)
    if left:
        _say(f"waiting for a live load process to adopt {', '.join(left)}")
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _spools_of(run, run.killed)
    return left


def _recover_spools(run: Run) -> dict[str, int]:
    """What the application's next start does: a Recorder on the spool root adopts and
    delivers the spools left; its metrics (``adopted``: the captures it delivered)."""
    from evidence_client.spool import spool_dirs

    left = spool_dirs(run.spool_root)
    if not left:
        return {}
    _say(f"{len(left)} spool(s) left after the load: a Recorder on the root adopts them")
    proc = subprocess.run([sys.executable, "-m", "chaos.load", "--recover", str(run.spool_root)],
                          env={**os.environ, **run.env}, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"recovering the spools left failed: {proc.stderr[-3000:]}")
    metrics = json.loads(proc.stdout.splitlines()[-1])
    if metrics["pending"]:
        _say(f"{metrics['pending']} captures are still in the spools (not delivered): "
             f"{proc.stderr[-2000:]}")
    return metrics


def _schedule(run: Run, duration: float, short: bool) -> list[tuple[float, Any]]:
    if run.cluster is not None:
        return _cluster_schedule(run, duration, short)
    kill = run.kill_service
    plan = [
        (0.10, lambda: kill("writer")),
        (0.20, lambda: kill("projector")),
        (0.30, lambda: _disk_full(run, max(3.0, duration * 0.08))),
        (0.45, lambda: _kill_broker(run)),
        (0.60, lambda: _restart_postgres(run)),
        (0.70, lambda: _kill_load(run, "load-0")),
    ]
    if not short:
        plan += [(0.80, lambda: kill("writer")), (0.88, lambda: kill("projector"))]
    return [(at * duration, f) for at, f in plan]


def _cluster_schedule(run: Run, duration: float, short: bool) -> list[tuple[float, Any]]:
    """The faults on a cluster of three: the single broker's kill becomes three broker faults
    (the short run: the kill and the stall), one broker at a time (each waits until every
    partition is back in sync before the schedule goes on)."""
    kill, brokers = run.kill_service, run.cluster
    plan = [
        (0.08, lambda: kill("writer")),
        (0.14, lambda: kill("projector")),
        (0.20, brokers.kill),
        (0.35, lambda: _disk_full(run, max(3.0, duration * 0.08))),
        (0.45, brokers.stall),
        (0.60, lambda: _restart_postgres(run)),
        (0.68, lambda: _kill_load(run, "load-0")),
    ]
    if not short:
        plan += [(0.75, brokers.restart), (0.85, lambda: kill("writer")),
                 (0.92, lambda: kill("projector"))]
    return [(at * duration, f) for at, f in plan]


def _read_log(env: dict[str, str]) -> list[tuple[bytes, dict[str, Any], int, int]]:
    """Every committed record of the log: (body bytes, record, partition, offset)."""
    from audit.kafka_log import read_topic
    from evidence_contract import split_record

    return [(*split_record(value), p, o) for p, o, _k, value in
            read_topic(env["EVIDENCE_KAFKA_BOOTSTRAP"], f"{env['EVIDENCE_TOPIC_PREFIX']}.log")]


def _check(run: Run, submitted: dict[str, str]) -> dict[str, Any]:
    """Wait for the log to hold every submitted capture, then check everything."""
    from evidence_contract.chain import Head, Link, advance

    deadline = time.monotonic() + 180
    while True:
        records = _read_log(run.env)
        sealed_keys = [r[1]["body"]["content_key"].hex() for r in records]
        missing = set(submitted) - set(sealed_keys)
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(2)
    counts: dict[str, int] = {}
    for k in sealed_keys:
        counts[k] = counts.get(k, 0) + 1
    duplicated = sum(n - 1 for k, n in counts.items() if n > 1)
    event_ids = [r[1]["body"]["event_id"] for r in records]
    duplicated_events = len(event_ids) - len(set(event_ids))
    heads: dict[str, Head] = {}
    findings = []
    for body, rec, _p, _o in sorted(records, key=lambda r: (r[2], r[3])):
        stream = rec["body"]["stream"]
        head, f = advance(heads.get(stream) or Head.genesis(stream), Link.of(rec, body))
        heads[stream] = head
        if f is not None:
            findings.append(f.to_dict())
    gaps = sum(1 for f in findings if f["kind"] == "gap")
    projection = _check_projection(run, records)
    audit = subprocess.run([sys.executable, "-m", "cli.main", "audit", "--json", "-"],
                           env={**os.environ, **run.env}, cwd=ROOT, capture_output=True,
                           text=True, timeout=600)
    try:
        audit_report = json.loads(audit.stdout)
    except ValueError:
        audit_report = {"error": audit.stdout[-2000:] + audit.stderr[-2000:]}
    return {
        "submitted": len(submitted), "sealed": len(records),
        "lost": len(missing), "lost_keys": sorted(missing)[:20],
        "duplicated": duplicated, "duplicated_event_ids": duplicated_events,
        "gaps": gaps, "chain_findings": findings[:20],
        "streams": len(heads), "projection": projection,
        "audit_exit": audit.returncode,
        "audit_findings": len(audit_report.get("findings", [])) if "findings" in audit_report
        else None,
        "audit_findings_by_kind": audit_report.get("findings_by_kind"),
    }


def _check_projection(run: Run, records: list) -> dict[str, Any]:
    import psycopg

    want = {(r[1]["body"]["stream"], r[1]["seal"]["seq"]): r[1]["seal"]["record_digest"]
            for r in records}
    deadline = time.monotonic() + 120
    got: dict = {}
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(run.env["EVIDENCE_DATABASE_URL"], connect_timeout=5) as conn:
                got = {(s, q): bytes(d) for s, q, d in conn.execute(
                    "select stream, seq, record_digest from evidence.records")}
        except psycopg.Error:
            got = {}
        if got == want:
            break
        time.sleep(2)
    return {"rows": len(got), "equal_to_log": got == want,
            "missing": len(set(want) - set(got)), "extra": len(set(got) - set(want))}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m chaos", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=180.0, help="seconds of load (180)")
    ap.add_argument("--short", action="store_true", help="45 s, one fault of each main kind")
    ap.add_argument("--brokers", type=int, default=1, choices=(1, 3),
                    help="Kafka brokers of the run's stack (1; 3: a cluster, broker faults "
                         "one at a time)")
    ap.add_argument("--processes", type=int, default=3, help="load processes (3)")
    ap.add_argument("--rate", type=float, default=25.0, help="calls/s per process (25)")
    ap.add_argument("--keep", action="store_true", help="keep the stack and its directory")
    ap.add_argument("--report-dir", type=Path, default=RESULTS)
    return ap


def _isolated_stack(work: Path, brokers: int) -> Any:
    """The configuration of a stack under ``work`` on free ports (``brokers`` Kafka nodes),
    so that it may run beside `make up`; the services' metrics endpoints on free ports too."""
    from devstack.config import StackConfig

    cfg = StackConfig.on_free_ports(work, brokers=brokers)
    _say(f"an isolated stack under {work}" + (f", {brokers} brokers" if brokers > 1 else ""))
    os.environ["EVIDENCE_WRITER_METRICS_PORT"] = str(free_port())
    os.environ["EVIDENCE_PROJECTOR_METRICS_PORT"] = str(free_port())
    return cfg


def _load_under_faults(run: Run, duration: float, processes: int, short: bool) -> list[str]:
    """Start the load processes (the second with its clock an hour ahead), inflict the
    faults on their schedule, then stop the load after ``duration`` seconds, once the killed
    load process's spools have been adopted (a slow fault can push the kill to the end of
    the schedule). Returns the killed processes' spools that no live one adopted."""
    t0 = time.monotonic()
    for i in range(processes):
        run.start_load(f"load-{i}", skew_s=3600.0 if i == 1 else 0.0)
    run.fault("clock_skew")
    for at, fault in _schedule(run, duration, short):
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        fault()
    time.sleep(max(0.0, t0 + duration - time.monotonic()))
    not_adopted = _await_adoption(run)
    _say("load stops; every load process closes its Recorder")
    run.stop_loads()
    return not_adopted


def _passed(result: dict[str, Any]) -> bool:
    return (result["lost"] == 0 and result["duplicated"] == 0 and result["gaps"] == 0
            and not result["killed_spools_not_adopted"]
            and result["duplicated_event_ids"] == 0 and not result["chain_findings"]
            and result["projection"]["equal_to_log"] and result["audit_exit"] == 0)


def _summary(result: dict[str, Any]) -> str:
    """The run's one line."""
    faults = ", ".join(f"{k} {v}" for k, v in sorted(result["faults"].items()))
    # A call in flight when its load process was killed -9 may be sealed (it was spooled or
    # sent) without ever returning to the application: sealed, not submitted, not lost.
    in_flight = result["sealed"] - result["duplicated"] - result["submitted"]
    # (Fewer sealed than submitted is no such thing: those are the lost, counted below.)
    extra = f" ({in_flight} from calls in flight in killed load processes)" if in_flight > 0 else ""
    if result["recovered_at_end"]:
        extra += f"; {result['recovered_at_end']} delivered from spools left at the end"
    if result.get("broker_faults"):
        extra += "; on 3 brokers: " + ", ".join(
            f"{h['fault'].removeprefix('broker_')} {h['node']}"
            + (" (coordinator)" if h["coordinator"] else "") for h in result["broker_faults"])
    if result["killed_spools_not_adopted"]:
        extra += (f"; spools of killed load processes no live one adopted: "
                  f"{result['killed_spools_not_adopted']}")
    return (f"chaos: {result['submitted']} captures submitted, {result['sealed']} sealed{extra}, "
            f"{result['lost']} lost, {result['duplicated']} duplicated, {result['gaps']} gaps "
            f"in {result['streams']} streams; projection {'= log' if result['projection']['equal_to_log'] else '!= log'}; "
            f"audit exit {result['audit_exit']}; faults: {faults}; supervisor restarts "
            f"{result['restarts']}; {'PASS' if result['passed'] else 'FAIL'}")


def _write_report(report_dir: Path, result: dict[str, Any], duration: float) -> None:
    """``<UTC time>.json`` and ``latest.md`` in ``report_dir``."""
    report_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    (report_dir / f"{stamp}.json").write_text(json.dumps(result, indent=2, default=str))
    (report_dir / "latest.md").write_text(
        f"# Last chaos run ({stamp}, {round(duration)} s)\n\n{result['summary']}\n\n```json\n"
        f"{json.dumps(result, indent=2, default=str)}\n```\n")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    duration = 45.0 if args.short and args.duration == 180.0 else args.duration

    from devstack import stack

    work = Path(tempfile.mkdtemp(prefix="evidence-chaos-"))
    cfg = _isolated_stack(work, args.brokers)
    control = work / "control"
    control.mkdir()
    run = Run(cfg, {}, work, control, work / "spool", args.rate)
    if args.brokers > 1:
        from chaos.brokers import BrokerFaults
        from writer.config import DEFAULT_TRANSACTIONAL_ID

        run.cluster = BrokerFaults(cfg, DEFAULT_TRANSACTIONAL_ID, _say, run.fault)
    try:
        run.env = stack.up(cfg)
        not_adopted = _load_under_faults(run, duration, args.processes, args.short)
        recovered = _recover_spools(run)
        submitted, metrics = run.calls()
        _say(f"{len(submitted)} calls returned to the application; checking the log")
        result = _check(run, submitted)
        result.update(faults=run.faults, duration_s=round(duration),
                      restarts={n: run.restarts(n) for n in ("writer", "projector", "api")},
                      load_metrics=metrics, killed_spools_not_adopted=not_adopted,
                      recovered_at_end=recovered.get("adopted", 0), brokers=args.brokers,
                      broker_faults=run.cluster.hit if run.cluster else [],
                      spools_left=sorted(p.name for p in run.spool_root.iterdir())
                      if run.spool_root.exists() else [])
    finally:
        run.keep_logs(args.report_dir / "last-logs")
        if not args.keep:
            run.tear_down()
    result["passed"] = ok = _passed(result)
    result["summary"] = summary = _summary(result)
    print(summary, flush=True)
    _write_report(args.report_dir, result, duration)
    return 0 if ok else 1
