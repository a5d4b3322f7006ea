"""The services under test, each as its own process, so each has its own peak RSS.

- :func:`start_writer` — ``evidence writer`` on the bench's topics (optionally under py-spy);
- :class:`Service` ``projector`` — ``evidence projector`` into the bench's schemas;
- :class:`Service` ``api`` — ``evidence api`` (its workers, bounds and pool per worker)
  serving :mod:`bench.app`: the real app plus one bench-only route,
  ``GET /_bench/pk/{partition}/{offset}``: one primary-key select on the same views through
  the same pool, the "bare route" replay verify is measured against.

:func:`settle_disk` writes back what earlier sections left dirty before a timed one.

:func:`host_ticks` and :func:`steal_pct` say how much of a timed part the hypervisor gave the
machine's cores to other guests (``steal`` in ``/proc/stat``): on a shared cloud host a run
where it is high is slower throughout, and the report says so beside each figure.
:func:`speed_probe` times a fixed piece of work at the start and the end of a run: a shared
host can also be slower without any steal (a busy sibling thread, a lower clock), and the
absolute figures of two runs (the latency budget is one) only compare at a like speed.

``peak_rss_mib(pid)`` reads ``VmHWM`` from ``/proc``: the kernel's own high-water mark of the
resident set, so no sampling can miss a peak; :func:`children` finds the API's workers
(a multi-worker API's own pid is the supervisor's).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from devstack.ports import free_port

ROOT = Path(__file__).resolve().parents[1]


def dirty_mib() -> float | None:
    """The page cache's dirty and under-writeback data (``/proc/meminfo``), in MiB."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        return round(sum(int(fields[k].split()[0]) for k in ("Dirty", "Writeback")) / 1024, 1)
    except (OSError, KeyError, ValueError):
        return None


def settle_disk(database_url: str | None = None, target_mib: float = 64.0,
                timeout_s: float = 120.0) -> dict[str, Any]:
    """Write back what the sections before left behind, before a section that times itself.

    The sealing section and the eventsourcing recorder write gigabytes; while the kernel
    writes them back, every fsync (the gateway's spool, PostgreSQL's commits) and every
    write that meets the dirty limit waits behind them. Measured here: 1k/s capture-to-
    queryable p99 674 ms with 321 MiB dirty from an earlier load, 124 and 149 ms right after
    a ``sync``. So a section starts from a settled disk: a PostgreSQL ``CHECKPOINT`` (its
    shared buffers to the OS), ``sync``, then a wait until at most ``target_mib`` is dirty
    or under writeback. What the section itself writes is still in its figures. Returns
    the dirty MiB before and after and the seconds it took."""
    t0 = time.monotonic()
    before = dirty_mib()
    checkpoint = None
    if database_url:
        import psycopg

        try:
            with psycopg.connect(database_url, autocommit=True) as conn:
                conn.execute("checkpoint")
            checkpoint = True
        except psycopg.Error as e:  # not a superuser or pg_checkpoint member: sync only
            checkpoint = f"skipped: {e.sqlstate or e}"
    os.sync()
    while (after := dirty_mib()) is not None and after > target_mib \
            and time.monotonic() - t0 < timeout_s:
        time.sleep(0.2)
    return {"dirty_mib_before": before, "dirty_mib_after": dirty_mib(),
            "checkpoint": checkpoint, "seconds": round(time.monotonic() - t0, 1)}


def peak_rss_mib(pid: int) -> float | None:
    """The process's peak resident set (VmHWM) in MiB, or None if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def children(pid: int, marker: bytes = b"") -> list[int]:
    """The child processes of ``pid`` whose command line holds ``marker`` (none if it is
    gone); ``b"spawn_main"`` picks uvicorn's workers, not multiprocessing's resource tracker."""
    try:
        pids = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    out = []
    for c in pids:
        try:
            if marker in Path(f"/proc/{c}/cmdline").read_bytes():
                out.append(c)
        except OSError:
            pass
    return out


def host_ticks() -> tuple[int, int] | None:
    """(steal, all) clock ticks of the machine's cores so far, from ``/proc/stat``'s ``cpu``
    line: ``all`` is user through steal (the guest times are inside user already); None
    where there is no such file."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return ticks[7], sum(ticks)


def steal_pct(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the cores' time between two :func:`host_ticks` readings that the
    hypervisor gave to other guests, in percent (one decimal); None if unknown."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round(100 * (after[0] - before[0]) / (after[1] - before[1]), 1)


PROBE_LOOP = 2_000_000
PROBE_HASH_MIB = 64


def speed_probe() -> dict[str, float]:
    """The machine's speed now, on one core: milliseconds for a fixed pure-Python loop of
    ``PROBE_LOOP`` steps (the interpreter, as the services spend most of their time), and
    SHA-256 MiB/s over ``PROBE_HASH_MIB`` MiB (native code); the better of three of each."""
    import hashlib

    def loop() -> float:
        t = time.perf_counter()
        x = 0
        for i in range(PROBE_LOOP):
            x += i & 7
        return time.perf_counter() - t

    block = bytes(range(256)) * 4096  # 1 MiB

    def digest() -> float:
        h, t = hashlib.sha256(), time.perf_counter()
        for _ in range(PROBE_HASH_MIB):
            h.update(block)
        h.digest()
        return time.perf_counter() - t

    return {"python_loop_ms": round(1e3 * min(loop() for _ in range(3)), 1),
            "sha256_mib_s": round(PROBE_HASH_MIB / min(digest() for _ in range(3)))}


def _stat(path: str) -> tuple[str, list[str]] | None:
    """A ``/proc`` ``stat`` file as (the name in parentheses, the fields after it: ``[11]``
    utime, ``[12]`` stime, ``[13]`` cutime, ``[14]`` cstime, in ticks); None if it is gone."""
    try:
        text = Path(path).read_text()
        name, rest = text[text.index("(") + 1:].rsplit(") ", 1)
    except (OSError, ValueError):
        return None
    return name, rest.split()


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) a process and its descendants have used so far: the live
    ones' and what the reaped ones left in their parents' counts; None if ``pid`` is gone."""
    tick = os.sysconf("SC_CLK_TCK")

    def fields(p: int) -> list[str] | None:
        got = _stat(f"/proc/{p}/stat")
        return got[1] if got is not None else None

    root = fields(pid)
    if root is None:
        return None
    total, todo, first = 0, [pid], True
    while todo:
        p = todo.pop()
        f = root if first else fields(p)
        if f is not None:
            # utime, stime (fields 14, 15); cutime, cstime (16, 17): children reaped
            total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
        first = False
        try:
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            pass
    return total / tick


JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")
"""A JVM's JIT compiler threads as ``/proc`` names them (``C2 CompilerThread0`` and so on, cut
to the kernel's 15 characters)."""


def jit_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) the JIT compiler threads of the JVM ``pid`` have used so
    far; 0.0 for a process that has none (not a JVM), None if ``pid`` is gone.

    A broker's JIT compiles its hot paths through its first minutes of load: measured on the
    dev stack's broker (C2, the JVM's default), its compiler threads took 95, 58 and 30 µs a
    capture of the broker's 158, 112 and 79 over three 5k/s runs on a broker started just
    before them, and 26 then 11 of 83 and 59 in another's fourth and fifth
    (docs/performance.md). So the bench reports it beside the broker's CPU: what a broker
    minutes old spends on compiling is not what each capture costs one that has run for
    hours."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    total = 0
    for t in tasks:
        got = _stat(f"/proc/{pid}/task/{t}/stat")  # None: a thread that ended meanwhile
        if got is not None and got[0].startswith(JIT_THREADS):
            total += int(got[1][11]) + int(got[1][12])
    return total / tick


def autovacuum_runs(database_url: str) -> int | None:
    """How many times autovacuum has vacuumed or analysed a table of the database so far
    (``pg_stat_all_tables``); None when the database cannot be reached. The difference over a
    timed window says whether PostgreSQL's CPU in it includes autovacuum's work."""
    import psycopg

    try:
        with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute("select coalesce(sum(autovacuum_count + autoanalyze_count), 0) "
                               "from pg_stat_all_tables").fetchone()
    except psycopg.Error:
        return None
    return int(row[0]) if row else None


def vacuum_schemas(database_url: str, like: str) -> dict[str, Any]:
    """``VACUUM (ANALYZE)`` every table of the schemas whose names match ``like``: the work
    PostgreSQL's autovacuum would do to a bulk load's fresh rows within the minute after it (a
    vacuum and an analyse of each table), done before a timed section rather than in it.
    Returns the tables and the seconds it took."""
    import psycopg

    t0 = time.monotonic()
    with psycopg.connect(database_url, autocommit=True) as conn:
        tables = conn.execute(
            "select format('%%I.%%I', n.nspname, c.relname) from pg_class c "
            "join pg_namespace n on n.oid = c.relnamespace "
            "where n.nspname like %s and c.relkind = 'r' order by 1", (like,)).fetchall()
        for (name,) in tables:
            conn.execute(f"vacuum (analyze) {name}")
    return {"tables": len(tables), "seconds": round(time.monotonic() - t0, 1)}


def stack_state(bootstrap: str, database_url: str, log_dir: Path | None = None) -> dict[str, Any]:
    """What the stack holds before a run: its topics (less Kafka's internal ones) and their
    partitions (and their bytes in ``log_dir``, the broker's data directory, when it is on
    this machine), PostgreSQL's schemas other than its own and the database's
    size. The dev stack is shared with experiments and other runs, and its figures move with
    what it carries: on 2026-12-05, beside the leftovers of 17 ad-hoc pipeline runs (238 topics
    of 50k captures each and their schemas), the broker's request threads used 32–59 µs of
    system time a capture at 5k/s and PostgreSQL 61–100 µs, against 16–22 and 31–46 with them
    deleted; 1,440 empty partitions alone changed neither (docs/performance.md). A value that
    could not be read is None: this is a report's detail, never a reason for a run to fail."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    out: dict[str, Any] = {"topics": None, "partitions": None, "topic_mib": None,
                           "schemas": None, "database_mib": None}
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        md = admin.list_topics(timeout=10)
        topics = {n: t for n, t in md.topics.items() if not n.startswith("__")}
        out["topics"] = len(topics)
        out["partitions"] = sum(len(t.partitions) for t in topics.values())
    except KafkaException:
        pass
    if log_dir is not None and log_dir.is_dir():
        try:
            total = 0
            for part in log_dir.iterdir():  # one directory a partition: <topic>-<n>
                if part.is_dir() and not part.name.startswith("__"):
                    # blocks, not sizes: a segment's index files are preallocated, sparse
                    total += sum(f.stat().st_blocks * 512 for f in part.iterdir() if f.is_file())
            out["topic_mib"] = round(total / 2**20, 1)
        except OSError:  # a partition deleted while it was read
            pass
    import psycopg

    try:
        with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as conn:
            out["schemas"] = conn.execute(
                "select count(*) from pg_namespace where nspname not like 'pg\\_%' "
                "and nspname not in ('information_schema', 'public')").fetchone()[0]
            out["database_mib"] = round(conn.execute(
                "select pg_database_size(current_database())").fetchone()[0] / 2**20, 1)
    except psycopg.Error:
        pass
    return out


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


def start_api(database_url: str, views_schema: str, key: str,
              workers: int | None = None) -> tuple[Service, str]:
    """``evidence api --factory bench.app:bench_app``; ``workers`` None: the server's default
    (one per core)."""
    port = free_port()
    env = child_env(EVIDENCE_DATABASE_URL=database_url, EVIDENCE_API_KEY=key,
                    EVIDENCE_API_KEY_STREAMS="*", EVIDENCE_PG_VIEWS_SCHEMA=views_schema)
    cmd = [sys.executable, "-m", "cli.main", "api", "--factory", "bench.app:bench_app",
           "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    svc = Service("api", cmd, env)
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
