"""A real multi-worker server: ``uvicorn --workers 3`` serving an app (written here) whose
handler calls the fake provider through the openai SDK with one module-level
``evidence_client.Recorder`` per worker, all on one shared spool root (the documented
multi-worker set-up: same root, a spool per process) with ``orphan_scan_s=1``.

Kafka is unreachable for the workers during the first half of the traffic (their bootstrap
is a local port that refuses connections until the test starts forwarding it to the real
broker), so captures go to the spools. Mid-traffic one worker is killed with SIGKILL while its
spool holds captures: a survivor must adopt that spool (take its lock), resend it once Kafka
is reachable, and delete it. In the second half, with Kafka reachable, a second worker is
killed mid-traffic (captures on the direct path). uvicorn replaces both.

Then: every request answered 200 has its capture sealed by the real writer on
``<prefix>.log`` exactly once (by the content_key of the bytes the provider received), no
event_id is sealed twice, every worker had exactly one live spool of its own, and after a
graceful stop the spool root is empty.
"""

from __future__ import annotations

import hashlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import httpx
import pytest

from devstack.ports import free_port
import evidence_contract as schemas
from evidence_client.spool import scan, spool_dirs
from tests.fixtures.writer import ROOT, intake_consumed, read_all

pytestmark = pytest.mark.integration

MARKER = re.compile(rb"mw-\d{4}-[0-9a-f]{32}")
WORKERS = 3
REQUESTS = 300  # half with Kafka unreachable, half with it reachable
CLIENT_THREADS = 8

APP = textwrap.dedent("""
    import os
    from contextlib import asynccontextmanager

    import evidence_client
    import openai
    from fastapi import FastAPI

    # Default settings except the shared spool root and a quick orphan scan.
    recorder = evidence_client.Recorder(
        bootstrap_servers=os.environ["APP_KAFKA"], stream=os.environ["APP_STREAM"],
        topic_prefix=os.environ["APP_PREFIX"], spool_dir=os.environ["APP_SPOOL_ROOT"],
        orphan_scan_s=1)
    client = openai.OpenAI(base_url=os.environ["APP_PROVIDER"] + "/v1", api_key="x",
                           max_retries=0, http_client=recorder.http_client())


    @asynccontextmanager
    async def lifespan(app):
        recorder.start()  # the spool exists (and orphans are adopted) before the first call
        yield
        recorder.close()


    app = FastAPI(lifespan=lifespan)


    @app.get("/whoami")
    def whoami():
        return {"pid": os.getpid(), "own_spool": str(recorder.own_spool),
                "metrics": recorder.metrics.snapshot()}


    def in_memory():
        # Diagnostics only (private state, read without its lock): captures handed to the
        # Recorder and not yet in the spool or acknowledged by Kafka.
        try:
            sender = recorder._sender
            return (sender.queue.qsize() + sender.tracker.inflight
                    + len(sender.tracker.unspooled))
        except AttributeError:
            return None


    @app.post("/chat")
    def chat(body: dict):
        out = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": body["marker"]}])
        return {"pid": os.getpid(), "text": out.choices[0].message.content,
                "in_memory": in_memory()}
""")


def wait_for(what: str, predicate, timeout: float, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class LateProxy:
    """A TCP forwarder to ``target`` whose port refuses connections until :meth:`open`
    (the socket is bound, not listening). Kafka clients bootstrap through it, then talk to
    the broker's advertised address, so opening it makes Kafka reachable."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self._closed = False

    def open(self) -> None:
        self.sock.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.target, timeout=5)
            except OSError:
                conn.close()
                continue
            up.settimeout(None)
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self.sock.close()


def worker_pids(master: int) -> set[int]:
    """The uvicorn workers: children of the master started by multiprocessing's spawn_main
    (the master's other child is multiprocessing's resource tracker)."""
    out = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == master and b"spawn_main" in cmd:
            out.add(int(d.name))
    return out


def lock_holders() -> dict[int, int]:
    """inode -> pid of the holder, for every FLOCK in /proc/locks."""
    out = {}
    for line in Path("/proc/locks").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK":
            pid, dev_ino = int(parts[4]), parts[5]
            out[int(dev_ino.rsplit(":", 1)[1])] = pid
    return out


def spool_pid(d: Path) -> int:
    return int(d.name.split("-")[1])


def test_multiworker_server_kill9_every_200_sealed_once(
        tmp_path, kafka_bootstrap, make_topics, run_writer, fake_provider):
    t_start = time.monotonic()
    topics = make_topics(partitions=1)
    writer = run_writer(topics)
    root = tmp_path / "spool-root"
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "app.py").write_text(APP)
    stream = f"mw:{uuid.uuid4().hex[:8]}"
    proxy = LateProxy(kafka_bootstrap)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVIDENCE_")}
    env.update(APP_KAFKA=proxy.address, APP_STREAM=stream, APP_PREFIX=topics.names.prefix,
               APP_SPOOL_ROOT=str(root), APP_PROVIDER=fake_provider.url, PYTHONUNBUFFERED="1")
    server_log = open(tmp_path / "uvicorn.log", "w+b")
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "app:app", "--app-dir", str(tmp_path / "app"),
         "--host", "127.0.0.1", "--port", str(port), "--workers", str(WORKERS),
         "--log-level", "warning", "--no-access-log"],
        cwd=ROOT, env=env, stdout=server_log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def server_output() -> str:
        return (tmp_path / "uvicorn.log").read_text("utf-8", "replace")[-6000:]

    stop_monitor = threading.Event()
    samples: list[dict[int, list[str]]] = []
    try:
        # -- start: three workers, each with one live (locked) spool of its own ------------
        def live_spools() -> dict[int, list[str]]:
            workers = worker_pids(server.pid)
            holders = lock_holders()
            live: dict[int, list[str]] = defaultdict(list)
            for d in spool_dirs(root):
                try:
                    ino = os.stat(d / "LOCK").st_ino
                except FileNotFoundError:
                    continue
                if spool_pid(d) in workers and holders.get(ino) == spool_pid(d):
                    live[spool_pid(d)].append(d.name)
            return dict(live)

        def ready():
            assert server.poll() is None, f"uvicorn exited:\n{server_output()}"
            live = live_spools()
            return live if len(live) == WORKERS and len(worker_pids(server.pid)) == WORKERS \
                else None

        wait_for("3 workers with a live spool each", ready, 30, 0.1)

        def monitor() -> None:
            while not stop_monitor.is_set():
                samples.append(live_spools())
                time.sleep(0.05)

        threading.Thread(target=monitor, daemon=True).start()

        # -- traffic -----------------------------------------------------------------------
        markers = [f"mw-{i:04d}-{uuid.uuid4().hex}" for i in range(REQUESTS)]
        todo: queue.Queue[str | None] = queue.Queue()
        results: dict[str, tuple[int | None, int | None, str]] = {}  # marker -> status, pid, err
        in_memory: dict[str, int | None] = {}  # marker -> captures in the worker's memory at 200
        phase_of = {m: "A (spool)" if i < REQUESTS // 2 else "B (direct)"
                    for i, m in enumerate(markers)}
        results_lock = threading.Lock()
        release_b = threading.Event()
        bad: list[tuple[str, str]] = []

        def client_thread() -> None:
            with httpx.Client(base_url=base, timeout=15,
                              limits=httpx.Limits(max_keepalive_connections=0)) as c:
                while (marker := todo.get()) is not None:
                    if int(marker[3:7]) >= REQUESTS // 2:
                        release_b.wait()
                    try:
                        r = c.post("/chat", json={"marker": marker})
                        pid = r.json().get("pid") if r.status_code == 200 else None
                        if r.status_code == 200:
                            assert r.json()["text"].startswith(f"echo: {marker}")
                            in_memory[marker] = r.json()["in_memory"]
                        res = (r.status_code, pid, "" if r.status_code == 200 else r.text[:200])
                    except httpx.HTTPError as e:
                        res = (None, None, repr(e))
                    except Exception as e:  # noqa: BLE001 - a wrong answer fails the test
                        bad.append((marker, repr(e)))
                        res = (None, None, repr(e))
                    with results_lock:
                        results[marker] = res

        for m in markers:
            todo.put(m)
        threads = [threading.Thread(target=client_thread) for _ in range(CLIENT_THREADS)]
        for t in threads:
            t.start()

        def done_count() -> int:
            with results_lock:
                return len(results)

        # Phase A (Kafka unreachable): kill the worker whose spool holds the most captures.
        wait_for("a quarter of the requests", lambda: done_count() >= REQUESTS // 4, 30)
        by_worker = {spool_pid(d): d for d in spool_dirs(root)
                     if spool_pid(d) in worker_pids(server.pid)}
        victim_a, dir_a = max(by_worker.items(), key=lambda kv: len(scan(kv[1])))
        os.kill(victim_a, signal.SIGKILL)
        wait_for("the killed worker to be gone",
                 lambda: victim_a not in worker_pids(server.pid), 10)
        in_dead_spool = scan(dir_a)
        dead_keys = {schemas.decode(e.value)[1]["content_key"] for e in in_dead_spool}
        print(f"phase A: killed worker {victim_a} with {len(in_dead_spool)} captures in its "
              f"spool {dir_a.name} (after {done_count()} answers)")
        assert in_dead_spool, "the killed worker's spool was empty: the kill proves nothing"

        # A live process adopts it (takes its lock) while Kafka is still unreachable.
        def adopter():
            holder = lock_holders().get(os.stat(dir_a / "LOCK").st_ino)
            return holder if holder in worker_pids(server.pid) else None

        adopted_by = wait_for("a survivor to adopt the dead worker's spool", adopter, 15)
        print(f"phase A: spool {dir_a.name} adopted by worker {adopted_by}")
        wait_for("phase A to finish", lambda: done_count() >= REQUESTS // 2, 30)
        spooled_a = len(scan(root))
        print(f"phase A: {spooled_a} captures in the spools while Kafka is unreachable")

        # Phase B: Kafka reachable. Once every spool (the adopted one too) is resent and the
        # workers are back on the direct path, the second half of the traffic starts and
        # another worker is killed in the middle of it.
        proxy.open()
        t_open = time.monotonic()
        wait_for(f"spool {dir_a.name} to be resent and removed", lambda: not dir_a.exists(),
                 30, 0.05)
        wait_for("every spool to be empty", lambda: len(scan(root)) == 0, 30, 0.05)
        print(f"phase B: Kafka reachable; all spools resent in {time.monotonic() - t_open:.1f}s")
        release_b.set()
        wait_for("three quarters of the requests", lambda: done_count() >= 3 * REQUESTS // 4, 30)
        with results_lock:
            served = Counter(pid for _s, pid, _e in results.values() if pid)
        candidates = worker_pids(server.pid)
        victim_b = max(candidates, key=lambda p: served.get(p, 0))
        os.kill(victim_b, signal.SIGKILL)
        dirs_b = [d for d in spool_dirs(root) if spool_pid(d) == victim_b]
        print(f"phase B: killed worker {victim_b} (after {done_count()} answers)")

        for _ in threads:
            todo.put(None)
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert not bad, bad

        # -- every answered request is sealed exactly once ---------------------------------
        ok = [m for m, (s, _p, _e) in results.items() if s == 200]
        failed = {m: r for m, r in results.items() if r[0] != 200}
        by_marker: dict[str, list[bytes]] = defaultdict(list)
        for s in list(fake_provider.seen):
            found = MARKER.search(s.request_body)
            if found:
                by_marker[found.group().decode()].append(s.request_body)
        assert all(len(by_marker[m]) == 1 for m in ok), "a 200 without exactly one provider call"
        key_of = {m: schemas.content_key(bodies[0]) for m, bodies in by_marker.items()}
        assert all(key_of[m] == hashlib.sha256(b"\x00" + by_marker[m][0]).digest() for m in ok)

        def sealed() -> list:
            return [schemas.split_record(msg.value())[1] for msg in
                    read_all(kafka_bootstrap, topics.names.log)]

        def all_ok_sealed():
            writer.assert_alive()
            have = {r["body"]["content_key"] for r in sealed()}
            return True if all(key_of[m] in have for m in ok) else None

        # Every capture is spooled before it is sent and leaves the spool once Kafka has it:
        # with the spools empty and the writer past the end of intake, nothing more comes.
        def settled() -> bool:
            writer.assert_alive()
            return not scan(root) and intake_consumed(
                kafka_bootstrap, writer.group_id, topics.names.intake)

        wait_for("every answered request sealed, or nothing left to seal",
                 lambda: all_ok_sealed() or settled(), 60, 0.5)
        for d in dirs_b:
            wait_for(f"spool {d.name} to be removed", lambda d=d: not d.exists(), 20, 0.1)
        wait_for("the spools empty and intake sealed (late duplicates too)", settled, 60, 0.2)
        records = sealed()

        key_counts = Counter(r["body"]["content_key"] for r in records)
        eid_counts = Counter(r["body"]["event_id"] for r in records)
        dup_keys = sum(n - 1 for n in key_counts.values() if n > 1)
        dup_eids = sum(n - 1 for n in eid_counts.values() if n > 1)
        sealed_ok = sum(1 for m in ok if key_counts[key_of[m]] == 1)
        missing = [(m, results[m][1], phase_of[m], in_memory.get(m))
                   for m in ok if key_counts[key_of[m]] == 0]
        extra = [m for m in failed if m in key_of and key_counts[key_of[m]]]
        seqs = sorted(r["seal"]["seq"] for r in records)
        intake_ids = Counter(schemas.decode(msg.value())[1]["event_id"]
                             for msg in read_all(kafka_bootstrap, topics.names.intake))
        intake_dups = sum(n - 1 for n in intake_ids.values() if n > 1)

        # Metrics of the current three workers (two of them replacements).
        metrics: dict[int, dict] = {}

        def all_metrics():
            with httpx.Client(base_url=base, timeout=5,
                              limits=httpx.Limits(max_keepalive_connections=0)) as c:
                w = c.get("/whoami").json()
            metrics[w["pid"]] = w["metrics"]
            return len(set(metrics) & worker_pids(server.pid)) == WORKERS

        wait_for("/whoami from all three workers", all_metrics, 20, 0.01)
        totals = Counter()
        for pid in worker_pids(server.pid):
            totals.update(metrics[pid])

        print(f"submitted {len(ok)}, sealed {sealed_ok}, duplicates {dup_eids} "
              f"(event_id; content_key duplicates {dup_keys}; intake duplicates absorbed "
              f"{intake_dups})")
        print(f"HTTP failures {len(failed)} (requests the killed workers were serving): "
              f"{sorted(set(r[2][:60] for r in failed.values()))}; of them sealed anyway: "
              f"{len(extra)}; log records {len(records)}; captures in the dead spool "
              f"{len(in_dead_spool)} ({len(dead_keys & {key_of[m] for m in ok})} of them "
              f"answered 200)")
        adopter_says = (f"reports {metrics[adopted_by]}" if adopted_by in metrics
                        else "was killed in phase B")
        print(f"current workers' metrics (summed): {dict(totals)}; the adopter {adopted_by} "
              f"{adopter_says}")
        print(f"captures still only in the worker's memory when it answered 200 (count: "
              f"answers): {dict(sorted(Counter(in_memory.values()).items(), key=str))}")
        print(f"max live spools at once: {max(len(s) for s in samples)}; "
              f"served per worker: {dict(served)}")
        if missing:
            print(f"NOT SEALED: {len(missing)} of {len(ok)} answered requests (marker, worker "
                  f"pid, phase, captures only in that worker's memory when it answered): "
                  f"{missing}; killed {victim_a} in phase A (spool), {victim_b} in phase B "
                  f"(direct)")

        assert writer.alive()
        assert seqs == list(range(1, len(records) + 1)), "log seqs are not 1..n"
        assert dup_eids == 0 and dup_keys == 0
        assert all(key_counts[k] == 1 for k in dead_keys), "the adopted spool is not all sealed"
        assert set(key_counts) <= set(key_of.values()), "a sealed capture nobody sent"
        assert totals["failed"] == 0 and totals["errors"] == 0 and totals["undeliverable"] == 0
        if adopted_by in metrics:  # the adopter may be the worker killed in phase B
            assert metrics[adopted_by]["adopted"] >= len(in_dead_spool), metrics[adopted_by]
        assert read_all(kafka_bootstrap, topics.names.rejected) == []
        # One live spool per worker, and three at once during the traffic.
        assert samples and all(len(v) == 1 for s in samples for v in s.values()), samples[:5]
        assert any(len(s) == WORKERS for s in samples)
        assert len(ok) >= REQUESTS - 4 * CLIENT_THREADS, failed

        # -- a graceful stop leaves an empty spool root ------------------------------------
        stop_monitor.set()
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        left = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
        assert left == [], left
        print(f"took {time.monotonic() - t_start:.1f}s")

        # Last, the strict one: every request answered 200 is sealed, exactly once.
        assert not missing, (
            f"{len(missing)} of {len(ok)} answered requests are not sealed (marker, worker pid, "
            f"phase, captures in that worker's memory when it answered): {missing[:20]}")
        assert sealed_ok == len(ok), "an answered request is sealed more than once"
    finally:
        stop_monitor.set()
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(10)
        for pid in worker_pids(server.pid):
            os.kill(pid, signal.SIGKILL)
        proxy.close()
        server_log.close()
        print("uvicorn output (tail):\n" + server_output()[-3000:])
