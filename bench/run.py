"""``python -m bench [--quick]``: the five measurements of issue 6, each against a same-run
baseline, then ``bench/results/<date>.{json,md,png}``.

1. Sealing. N captures (1 KiB responses, 16 streams) are pre-loaded into a fresh intake; the
   writer (a subprocess) is started on a settled disk and timed from "partitions assigned"
   until its committed intake offsets reach the end. Baselines: (a) the same (key, value)
   bytes produced by a plain idempotent producer with the writer's producer settings to
   fresh scratch topics of as many partitions: an untimed warm-up run, then runs before and
   after the writer, each from a settled disk and a connected producer, the median used
   (``bench.seal_rate.plain_producer_run``; one run of 200k took 1-3 s, so its start-up and
   whatever the host did that second decided a single run); (b) ``eventsourcing``'s
   PostgreSQL recorder appending the same bytes as events (``bench.peer``).
2. Capture-to-queryable latency through the Recorder at fixed offered rates
   (``bench.latency``), with the writer still running, a projector and the API as processes.
3. Rebuild from offset 0 over the records of 1 and 2 (blue/green, with the projector live),
   once the pipeline has drained the latency runs' backlog (the projection has stopped
   growing), then a binary COPY of the same rows into an unindexed table, twice (the
   faster is used, as for the producer baseline).

Each timed part of 2 and 3 (every rate, the rebuild, the COPY) starts from a settled disk
(``bench.services.settle_disk``: a PostgreSQL checkpoint, ``sync``, dirty pages written back),
so none pays for what the sections before it wrote; the report says how much was dirty.
4. ``POST /replay/verify`` at concurrency 4, 16, 64 and 256 from this process (the raw
   keep-alive client of ``bench.loadgen``, not httpx: httpx's pool was the bottleneck) against
   ``evidence api`` with its default workers, interleaved with a bare primary-key route in
   the same server; each level's ratio is verify over bare at that level.
5. Peak RSS (VmHWM) of the writer, projector and API processes.
6. Scale-out (``bench.scale_out``): the captures of 1 sealed by 1 writer and by 2 writers
   (one group) on topics of their own, each timed from a settled group over an intake
   pre-loaded while the writers were paused; the ratio is 2 writers over 1.
7. Verified vs unverified replay (``bench.replay_verified``, before 5 reads the peak RSS):
   a few hundred calls recorded through the Recorder, replayed once a checkpoint covers them
   by a verifying Replayer (the default: bundle, proofs, signed checkpoint) and by one with
   ``verify=False``, in alternating rounds; the ratio is verified reads/s over unverified.
8. What capture adds to a model call (``bench.call_overhead``, run first, on a quiet machine):
   the openai SDK through a Recorder's client and through a bare client, alternating blocks.
9. Three brokers beside one (``bench.cluster``): the captures of 1 sealed by one writer on
   this broker, on a cluster of three started for the section (replication factor 3,
   ``min.insync.replicas`` 2) and on this broker again; the ratio is three over the faster
   one; then the takeover after a writer's kill -9 on the cluster (6 has it on one broker).

Every run makes its own topics and schemas (prefix ``bench<hex>``) and drops them after.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shlex
import signal
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"

# "max": the writer's own sealing rate, measured in section 1 of the same run.
FULL = {"captures": 200_000, "rates": "100,1000,5000,10000,max", "latency_seconds": 10.0,
        "concurrency": "4,16,64,256", "verify_seconds": 5.0, "replay_calls": 300,
        "replay_rounds": 6, "overhead_calls": 400}
QUICK = {"captures": 20_000, "rates": "100,1000,max", "latency_seconds": 4.0,
         "concurrency": "4,64", "verify_seconds": 2.0, "replay_calls": 50, "replay_rounds": 2,
         "overhead_calls": 60}


def _say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kib = int(next(l for l in Path("/proc/meminfo").read_text().splitlines()
                           if l.startswith("MemTotal")).split()[1])
    except (OSError, StopIteration, ValueError):
        mem_kib = 0
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_kib / 2**20, 1),
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "dev_services": dev_services()}


def dev_services() -> list[str]:
    """The dev stack's own services running beside the bench (``make up`` starts them; the
    bench starts writers, projectors and APIs of its own). Idle, they still take some of the
    cores the bench measures: their consumers' fetches (an idle writer's cost the broker
    2.4-3.8% of a core, docs/performance.md), the API's and the witness's loops."""
    from devstack import StackConfig
    from devstack.services import running

    try:
        return running(StackConfig.from_env())
    except OSError:
        return []


# -- 1. sealing ---------------------------------------------------------------------------------

def make_messages(n: int, streams: int, response_bytes: int) -> list[tuple[bytes, bytes]]:
    """(key, CaptureEvent bytes) for n captures; capture i is stream i % streams, so its seq
    is i // streams + 1 and its output text is ``answer {i}`` (verify needs both)."""
    from evidence_contract import canonical_body_bytes, encode, fingerprint, output_digest
    from evidence_contract.codec import MARKER
    from tests.fixtures.writer import make_capture

    header = MARKER + fingerprint("CaptureEvent")
    out = []
    half = response_bytes // 2
    for i in range(n):
        e = make_capture(f"bench:s-{i % streams}", response=os.urandom(half).hex().encode(),
                         output_digest=output_digest(f"answer {i}"))
        if i == 0:  # the bench's own events are known good; check the fast encoding once
            assert header + canonical_body_bytes(e) == encode("CaptureEvent", e)
        out.append((e["stream"].encode(), header + canonical_body_bytes(e)))
    return out


def produce_all(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]],
                **config: Any) -> float:
    """Produce every message with an idempotent producer; return the seconds to all acked."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "batch.size": 1_000_000, "partitioner": "murmur2_random",
                  **config})
    t0 = time.perf_counter()
    produce = p.produce
    for key, value in messages:
        while True:
            try:
                produce(topic, value, key)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(300) != 0:
        raise RuntimeError(f"producing to {topic} did not finish")
    return time.perf_counter() - t0


def seal(args: argparse.Namespace, settings: Any, messages: list[tuple[bytes, bytes]],
         scratch: list[str]) -> tuple[dict[str, Any], Any]:
    from bench.peer import eventsourcing_rate
    from bench.seal_rate import (PLAIN_RUNS, intake_end, median_rate, plain_producer_run,
                                 plain_producer_runs, start_writer, time_until_sealed)
    from bench.services import host_ticks, settle_disk, steal_pct

    n = len(messages)
    _say(f"preloading {n} captures into {settings.names.intake}")
    produce_all(args.bootstrap, settings.names.intake, messages)
    ends = intake_end(args.bootstrap, settings)
    assert sum(tp.offset for tp in ends) == n, "intake does not hold every capture"

    # (a) from a settled disk, one untimed warm-up run first (see bench.seal_rate)
    _say("baseline (a): plain idempotent producer, same bytes, the writer's producer settings")
    plain_producer_run(args.bootstrap, scratch[0], messages, args.database_url)
    before = scratch[1:1 + PLAIN_RUNS[0]]
    plain = plain_producer_runs(args.bootstrap, before, messages, "before the writer",
                                args.database_url)

    peer = None
    if not args.no_peer:
        _say("baseline (b): eventsourcing PostgreSQL recorder")
        peer = eventsourcing_rate(args.database_url, f"{args.tag}_es", messages, args.es_batch)

    _say("the writer")
    settled = settle_disk(args.database_url)
    opts = {"transactional_id": f"{args.tag}-writer", "group_id": f"{args.tag}-writer"}
    writer = start_writer(args.bootstrap, settings, opts, args.profile)
    h0 = host_ticks()  # from the writer's start: it seals from its assignment on
    t0, t1 = time_until_sealed(args.bootstrap, writer, opts["group_id"], ends, timeout=1800)
    w = {"seconds": round(t1 - t0, 2), "records_per_s": round(n / (t1 - t0)),
         "steal_pct": steal_pct(h0, host_ticks()), "dirty_mib_settled": settled["dirty_mib_before"]}

    _say("baseline (a) again, after the writer")
    plain += plain_producer_runs(args.bootstrap, scratch[1 + PLAIN_RUNS[0]:], messages,
                                 "after the writer", args.database_url)
    return {"writer": w, "plain_producer": plain,
            "plain_producer_median": median_rate(plain), "eventsourcing": peer}, writer


# -- 2.–4. ------------------------------------------------------------------------------------

def stack_pids() -> dict[str, int]:
    """The dev stack's broker and PostgreSQL server, when they run here (``make up``)."""
    from devstack import StackConfig
    from devstack.config import pid_alive, read_pid

    cfg = StackConfig.from_env()
    out = {}
    kafka = read_pid(cfg.kafka_dir / "pid")
    if kafka is not None and pid_alive(kafka):
        out["kafka"] = kafka
    try:
        pg = int((cfg.postgres_dir / "data" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pg = None
    if pg is not None and pid_alive(pg):
        out["postgres"] = pg
    return out


def _watch_projected(url: str, views: str, svc: Any, done: Any, timeout: float,
                     fail: str) -> tuple[float, int]:
    """Poll the projection's record count until ``done(count, seconds_unchanged)``; returns
    the seconds it took and the count. Raises ``fail`` (formatted with ``timeout`` and
    ``got``) past ``timeout``."""
    import psycopg

    t0 = time.monotonic()
    last, since = -1, t0
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            svc.assert_alive()
            try:
                got = conn.execute(f'select count(*) from "{views}".records').fetchone()[0]
            except psycopg.Error:  # the views of a generation being swapped in
                got = 0
            now = time.monotonic()
            if got != last:
                last, since = got, now
            if done(got, now - since):
                return now - t0, got
            if now - t0 > timeout:
                raise RuntimeError(fail.format(timeout=timeout, got=got))
            time.sleep(0.2)


def wait_projected(url: str, views: str, n: int, svc: Any, timeout: float = 1800) -> float:
    """Seconds until the projection holds ``n`` records."""
    return _watch_projected(url, views, svc, lambda got, _quiet: got >= n, timeout,
                            "projected {got} of %d records in {timeout} s" % n)[0]


def wait_settled(url: str, views: str, svc: Any, quiet_s: float = 3.0,
                 timeout: float = 600) -> tuple[float, int]:
    """Wait until the projection has stopped growing for ``quiet_s`` (the writer and the
    projector have drained what the latency runs left queued); returns the seconds it took
    and the records projected."""
    return _watch_projected(url, views, svc, lambda _got, quiet: quiet >= quiet_s, timeout,
                            "the projection still grows after {timeout} s ({got})")


def rebuild_vs_copy(args: argparse.Namespace, cfg: Any) -> dict[str, Any]:
    from bench.rebuild_rate import _copy_baseline
    from bench.services import host_ticks, settle_disk, steal_pct
    from projections.rebuild import rebuild
    from projections.rows import record_row
    from tests.fixtures.writer import read_all

    _say("rebuild from offset 0")
    # With the collector settings `evidence projections rebuild` runs with (server.runtime).
    import gc

    from server.runtime import tune_gc

    before = gc.get_threshold()
    tune_gc()
    settled = {"rebuild": settle_disk(args.database_url)}
    steal: dict[str, float | None] = {}
    h0 = host_ticks()
    try:
        r = rebuild(cfg)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
    steal["rebuild"] = steal_pct(h0, host_ticks())
    _say("reading the log for the COPY baseline")
    msgs = read_all(args.bootstrap, cfg.log_topic, timeout=600)
    rows = [record_row(m.value(), m.partition(), m.offset()) for m in msgs]
    del msgs
    _say(f"binary COPY of {len(rows)} rows")
    # Twice, the faster kept, as the producer baseline is: a slow moment of this shared
    # machine must not flatter the ratio (one run's COPY took 34.4 s, the next one's 18.5 s).
    runs = []
    for name in ("copy", "copy_again"):
        settled[name] = settle_disk(args.database_url)
        h0 = host_ticks()
        runs.append(_copy_baseline(args.database_url, f"{args.tag}_{name}", rows))
        steal[name] = steal_pct(h0, host_ticks())
    copy_s = min(runs)
    return {"records": r.records, "seconds": round(r.seconds, 2), "steps": r.phases,
            "records_per_s": round(r.records / r.seconds), "copy_rows": len(rows),
            "copy_seconds": round(copy_s, 2), "copy_rows_per_s": round(len(rows) / copy_s),
            "copy_runs_seconds": [round(x, 2) for x in runs],
            "settled": settled, "steal_pct": steal}


def verify_vs_bare(args: argparse.Namespace, base: str, key: str, n: int,
                   offsets: list[tuple[int, int]]) -> list[dict[str, Any]]:
    from bench.api_verify import measure

    rng = random.Random(7)
    verify, bare = [], []
    for _ in range(2000):
        i = rng.randrange(n)
        text = f"answer {i}" if i % 2 else "something else"  # half match: the same work
        verify.append(("POST", "/replay/verify", {"stream": f"bench:s-{i % args.streams}",
                                                  "seq": i // args.streams + 1,
                                                  "replayed_output": text}))
        p, o = rng.choice(offsets)
        bare.append(("GET", f"/_bench/pk/{p}/{o}", None))
    out = []
    for c in args.concurrency_levels:
        _say(f"verify vs bare at concurrency {c}")
        out.append(measure(base, key, {"verify": verify, "bare": bare}, c, args.verify_seconds,
                           min(1.0, args.verify_seconds)))
    return out


# -- the run ------------------------------------------------------------------------------------

def _targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    s = r["sealing"]
    w = s["writer"]["records_per_s"]
    plain = s["plain_producer_median"]
    t = [{"name": "sealing / plain producer", "value": f"{w:,} rec/s",
          "baseline": f"{plain:,} rec/s (median of {len(s['plain_producer'])} runs)",
          "ratio_value": w / plain, "target_value": 0.5}]
    if s.get("eventsourcing"):
        es = s["eventsourcing"]["records_per_s"]
        t.append({"name": "sealing / eventsourcing", "value": f"{w:,} rec/s",
                  "baseline": f"{es:,.0f} rec/s", "ratio_value": w / es, "target_value": 5.0})
    b = r["rebuild"]
    t.append({"name": "rebuild / binary COPY", "value": f"{b['records_per_s']:,} rec/s",
              "baseline": f"{b['copy_rows_per_s']:,} rows/s",
              "ratio_value": b["records_per_s"] / b["copy_rows_per_s"], "target_value": 0.8})
    best_v = max(r["verify"], key=lambda v: v["verify"]["rps"])
    best_b = max(r["verify"], key=lambda v: v["bare"]["rps"])
    t.append({"name": "verify / bare route (peak req/s)",
              "value": f"{best_v['verify']['rps']:,.0f} req/s (c={best_v['concurrency']})",
              "baseline": f"{best_b['bare']['rps']:,.0f} req/s (c={best_b['concurrency']})",
              "ratio_value": best_v["verify"]["rps"] / best_b["bare"]["rps"], "target_value": 0.7})
    last = max(r["verify"], key=lambda v: v["concurrency"])
    if last is not best_v:
        t.append({"name": f"verify at c={last['concurrency']} / verify peak (holds)",
                  "value": f"{last['verify']['rps']:,.0f} req/s",
                  "baseline": f"{best_v['verify']['rps']:,.0f} req/s (c={best_v['concurrency']})",
                  "ratio_value": last["verify"]["rps"] / best_v["verify"]["rps"],
                  "target_value": 0.8})
    for x in r["latency"]:  # the budget holds at every rate offered, the writer's own too
        if x["p99_ms"] != x["p99_ms"]:  # NaN: nothing became visible
            continue
        rate = (f"the writer's max ({x['rate_offered']:,.0f}/s)" if x.get("writer_max")
                else f"{x['rate_offered']:,.0f}/s")
        t.append({"name": f"p99 capture-to-queryable at {rate}",
                  "value": f"{x['p99_ms']} ms (achieved {x['rate_achieved']:,.0f}/s)",
                  "baseline": "250 ms budget", "ratio_value": 250 / x["p99_ms"],
                  "target_value": 1.0, "ratio_label": "budget / p99"})
    t += _cost_targets(r)
    if r.get("scale_out"):
        one, two = r["scale_out"]["runs"]
        t.append({"name": "sealing, 2 writers / 1 writer",
                  "value": f"{two['records_per_s']:,} rec/s", "baseline": f"{one['records_per_s']:,} rec/s",
                  "ratio_value": two["records_per_s"] / one["records_per_s"], "target_value": 1.5})
    for x in t:
        x["met"] = x["ratio_value"] >= x["target_value"]
        x["ratio"] = f"{x['ratio_value']:.2f}×"
        x.setdefault("target", f"≥ {x['target_value']}×" if "ratio_label" not in x
                     else "p99 < 250 ms")
    return t


PIPELINE = ("writer", "projector", "api", "kafka", "postgres")
"""The processes whose CPU a capture costs the pipeline (the gateways and the poller are the
load, not the pipeline)."""


def _cost_targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 28's costs: CPU a capture at 5k/s (pipeline ≤ 90 µs, gateway ≤ 70 µs) and what a
    lone call waits for capture with the default durability (≤ 1 ms added at p99)."""
    t: list[dict[str, Any]] = []
    at5k = [x for x in r["latency"] if x["rate_offered"] == 5000 and x.get("cpu_us_per_capture")]
    if at5k:
        cpu = at5k[0]["cpu_us_per_capture"]
        pipeline = sum(cpu.get(k, 0.0) for k in PIPELINE)
        jit = (at5k[0].get("jit_us_per_capture") or {}).get("kafka")
        # Met or not on the whole figure; the broker's JIT (a JVM minutes old still compiling)
        # is shown beside it, not taken off it.
        less = f" ({pipeline - jit:.0f} less the broker's JIT, {jit:.0f})" if jit else ""
        t.append({"name": "CPU a capture at 5k/s, pipeline", "value": f"{pipeline:.0f} µs{less}",
                  "baseline": "90 µs target", "ratio_value": 90 / pipeline,
                  "target_value": 1.0, "ratio_label": "target / value", "target": "≤ 90 µs"})
        t.append({"name": "CPU a capture at 5k/s, gateway", "value": f"{cpu['gateways']:.0f} µs",
                  "baseline": "70 µs target", "ratio_value": 70 / cpu["gateways"],
                  "target_value": 1.0, "ratio_label": "target / value", "target": "≤ 70 µs"})
    for mode in (r.get("call_overhead") or {}).get("modes", []):
        lone = [x for x in mode["rows"] if x["concurrency"] == 1 and not x["stream"]]
        for x in lone:
            added = max(x["last"]["added_p99_ms"], 0.001)
            t.append({"name": f"added to a lone {x['sync']} call at p99, {mode['name']}",
                      "value": f"+{x['last']['added_p99_ms']} ms",
                      "baseline": f"bare p99 {x['last']['bare']['p99']} ms",
                      "ratio_value": 1.0 / added, "target_value": 1.0,
                      "ratio_label": "1 ms / added", "target": "≤ 1 ms"})
    return t


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    a = ap.add_argument
    a("--quick", action="store_true", help="smaller and shorter: the `make bench QUICK=1` run")
    a("--captures", type=int, help=f"captures to seal (default {FULL['captures']:,}; quick {QUICK['captures']:,})")
    a("--streams", type=int, default=16)
    a("--partitions", type=int, default=6)
    a("--response-bytes", type=int, default=1024)
    a("--rates", help="offered capture rates per second, comma-separated; \"max\": the "
                      "writer's own sealing rate from section 1")
    a("--latency-seconds", type=float, help="seconds of load per rate")
    a("--concurrency", help="verify concurrency levels, comma-separated")
    a("--verify-seconds", type=float, help="seconds per verify/bare round")
    a("--replay-calls", type=int,
      help="calls recorded and replayed, verified and unverified (section 7)")
    a("--replay-rounds", type=int, help="rounds of section 7, each reading every call with "
                                        "both readers")
    a("--overhead-calls", type=int, help="calls a side and row of section 8 (call overhead)")
    a("--overhead-concurrency", default="1,16,64",
      help="concurrent callers of section 8, comma-separated")
    a("--api-workers", type=int, default=None,
      help="API worker processes (default: one per core, api.config.default_workers())")
    a("--es-batch", type=int, default=1000,
      help="events per eventsourcing insert_events call (5000 deadlocks its psycopg pipeline here)")
    a("--no-peer", action="store_true", help="skip the eventsourcing baseline")
    a("--no-scale-out", action="store_true", help="skip the 1- vs 2-writer measurement")
    a("--no-cluster", action="store_true", help="skip the 3-broker vs 1-broker measurement")
    a("--profile", type=Path, help="record the writer with py-spy (speedscope JSON) to this path")
    a("--bootstrap", help="Kafka (default: EVIDENCE_KAFKA_BOOTSTRAP, else .stack/env)")
    a("--database-url", help="PostgreSQL (default: EVIDENCE_DATABASE_URL, else .stack/env)")
    a("--out", type=Path, default=RESULTS, help="directory for the results files")
    a("--stem", help="file name stem (default: UTC date and time)")
    args = ap.parse_args(argv)
    for k, v in (QUICK if args.quick else FULL).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.rate_list = [x if x == "max" else float(x) for x in str(args.rates).split(",") if x]
    args.concurrency_levels = [int(x) for x in str(args.concurrency).split(",") if x]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from confluent_kafka.admin import AdminClient, NewTopic

    from bench.services import host_ticks, speed_probe, steal_pct
    from devstack import StackConfig, read_env
    from projections import ProjectorConfig
    from topics import TopicNames, TopicSettings, ensure_topics

    env = {**read_env(StackConfig.from_env()), **os.environ}
    args.bootstrap = args.bootstrap or env.get("EVIDENCE_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    args.database_url = args.database_url or env.get(
        "EVIDENCE_DATABASE_URL", "postgresql://evidence:evidence@127.0.0.1:5432/evidence")
    args.tag = f"bench{uuid.uuid4().hex[:8]}"
    started = datetime.now(timezone.utc)
    stem = args.stem or started.strftime("%Y-%m-%d-%H%M") + ("-quick" if args.quick else "")
    wall0, host0 = time.monotonic(), host_ticks()
    settings = TopicSettings(names=TopicNames(args.tag), partitions=args.partitions)
    from bench.seal_rate import PLAIN_RUNS

    scratch = [f"{args.tag}.scratch-{i}" for i in range(1 + sum(PLAIN_RUNS))]
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    result: dict[str, Any] = {
        "started": started.strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
        "speed": {"start": speed_probe()},
        "command": "make bench" + (" QUICK=1" if args.quick else "") +
                   (f"  # python -m bench {shlex.join(argv or sys.argv[1:])}" if (argv or sys.argv[1:]) else ""),
        "config": {"quick": args.quick, "captures": args.captures, "streams": args.streams,
                   "partitions": args.partitions, "response_bytes": args.response_bytes,
                   "rates": args.rate_list, "latency_seconds": args.latency_seconds,
                   "concurrency": args.concurrency_levels, "verify_seconds": args.verify_seconds,
                   "eventsourcing_batch": args.es_batch, "replay_calls": args.replay_calls,
                   "replay_rounds": args.replay_rounds, "prefix": args.tag},
    }
    from bench.services import stack_state

    stack_cfg = StackConfig.from_env()
    # The broker's data on this machine's disk only when the bench runs on the dev stack's.
    on_dev = f"127.0.0.1:{stack_cfg.kafka_port}" in args.bootstrap.split(",")
    result["stack_before"] = stack_state(args.bootstrap, args.database_url,
                                         stack_cfg.kafka_dir / "data" if on_dev else None)
    _say(f"run {args.tag}: {result['machine']['cpu']}, {result['machine']['cores']} cores; "
         f"{args.captures} captures; the stack holds {result['stack_before']['topics']} topics, "
         f"{result['stack_before']['schemas']} schemas")
    if result["machine"]["dev_services"]:
        _say("warning: the dev stack's services run beside the bench and take its cores ("
             + ", ".join(result["machine"]["dev_services"]) + "); `make bench` brings the "
             "stack up without them: stop them first (`make down`) for figures to compare")
    writer = projector = api = None
    rss: dict[str, float | None] = {}
    try:
        ensure_topics(args.bootstrap, settings)
        for f in admin.create_topics([NewTopic(t, args.partitions, 1) for t in scratch]).values():
            f.result()
        from bench.call_overhead import measure as call_overhead

        # 8., first: on a quiet machine, before the writer and the pipeline run. What the
        # broker did meanwhile is noted beside it: a broker minutes old compiles through it.
        from bench.services import cpu_seconds, jit_seconds

        broker = stack_pids().get("kafka")
        b0 = (cpu_seconds(broker), jit_seconds(broker)) if broker else (None, None)
        t0 = time.monotonic()
        result["call_overhead"] = call_overhead(
            args.bootstrap, f"{args.tag}-overhead", calls=args.overhead_calls, say=_say,
            levels=tuple(int(c) for c in args.overhead_concurrency.split(",") if c),
            database_url=args.database_url)
        b1 = (cpu_seconds(broker), jit_seconds(broker)) if broker else (None, None)
        if None not in b0 and None not in b1:
            span = time.monotonic() - t0
            result["call_overhead"]["broker"] = {
                "seconds": round(span, 1), "cores": round((b1[0] - b0[0]) / span, 3),
                "jit_cores": round((b1[1] - b0[1]) / span, 3)}
        _say("generating captures")
        messages = make_messages(args.captures, args.streams, args.response_bytes)
        result["sealing"], writer = seal(args, settings, messages, scratch)
        if not args.no_scale_out:
            from bench.scale_out import measure as scale_out

            result["scale_out"] = scale_out(args.bootstrap, messages, args.partitions,
                                            args.tag, say=_say)
        if not args.no_cluster:
            from bench.cluster import measure as cluster

            result["cluster"] = cluster(args.bootstrap, messages, args.partitions, args.tag,
                                        say=_say)
        del messages

        cfg = ProjectorConfig(database_url=args.database_url, bootstrap=args.bootstrap,
                              topics=settings, meta_schema=f"{args.tag}_meta",
                              views_schema=f"{args.tag}_views", generation_prefix=f"{args.tag}_g",
                              metrics_port=0).checked()
        from bench.services import start_api, start_projector

        _say("projector and API; the projector catches up with the sealed log")
        projector = start_projector(cfg)
        catch_up = wait_projected(args.database_url, cfg.views_schema, args.captures, projector)
        result["projector_catch_up"] = {"records": args.captures, "seconds": round(catch_up, 2),
                                        "records_per_s": round(args.captures / catch_up)}
        # The catch-up's rows are a bulk load: autovacuum would vacuum and analyse them within
        # the minute after, in the windows below (a full run counted 17 tables in its 5k/s
        # window). A deployment's generation grows at a rate instead; so that work is done
        # here, before the windows, and reported.
        from bench.services import vacuum_schemas

        result["projector_catch_up"]["vacuumed"] = vacuum_schemas(
            args.database_url, f"{args.tag}\\_g%")
        key = f"bench-{uuid.uuid4().hex}"
        from api.config import default_workers

        args.api_workers = args.api_workers or default_workers()
        api, base = start_api(args.database_url, cfg.views_schema, key, args.api_workers)

        from bench.latency import measure
        from bench.services import settle_disk

        # Whose CPU the latency runs count, beside the gateways' and the poller's: the
        # pipeline's processes and, on the dev stack, the broker and PostgreSQL.
        cpu_pids = {"writer": writer.pid, "projector": projector.pid, "api": api.pid,
                    **stack_pids()}
        result["latency"] = []
        with tempfile.TemporaryDirectory(prefix="bench-spool-") as spool:
            for rate in args.rate_list:
                writer_max = rate == "max"
                if writer_max:  # the writer's full rate, as section 1 measured it
                    rate = float(result["sealing"]["writer"]["records_per_s"])
                settled = settle_disk(args.database_url)
                _say(f"capture-to-queryable at {rate:g}/s for {args.latency_seconds:g} s "
                     f"(disk settled: {settled['dirty_mib_before']} -> "
                     f"{settled['dirty_mib_after']} MiB dirty in {settled['seconds']} s)")
                result["latency"].append(measure(args.bootstrap, args.tag, base, key, rate,
                                                 args.latency_seconds, Path(spool) / str(int(rate)),
                                                 cpu_pids=cpu_pids,
                                                 database_url=args.database_url))
                result["latency"][-1]["writer_max"] = writer_max
                result["latency"][-1]["settled"] = settled

        # The latency runs leave a backlog at their top rates (the writer and the projector
        # work on after the window): the rebuild is timed on a settled pipeline, as its
        # COPY baseline is, not beside the backlog's draining.
        _say("waiting for the pipeline to settle before the rebuild")
        settle_s, settled = wait_settled(args.database_url, cfg.views_schema, projector)
        result["settled_before_rebuild"] = {"seconds": round(settle_s, 1), "records": settled}
        result["rebuild"] = rebuild_vs_copy(args, cfg)

        import psycopg

        with psycopg.connect(args.database_url, autocommit=True) as conn:
            offsets = conn.execute(f'select log_partition, log_offset from "{cfg.views_schema}".records '
                                   "order by random() limit 5000").fetchall()
        result["verify"] = verify_vs_bare(args, base, key, args.captures, offsets)

        from bench.replay_verified import measure as replay_verified
        from tests.fixtures.writer import log_signing_key

        # The writer of this run signs checkpoints with the test log key (writer_env).
        with tempfile.TemporaryDirectory(prefix="bench-replay-spool-") as spool:
            result["replay_verified"] = replay_verified(
                args.bootstrap, args.tag, base, key, log_signing_key()[0].verifier,
                args.replay_calls, args.replay_rounds, Path(spool), stream="bench:replay",
                say=_say)

        from bench.services import peak_rss_mib

        wpid = writer.pid
        if args.profile:  # the writer runs under py-spy: its child is the writer
            wpid = int(Path(f"/proc/{wpid}/task/{wpid}/children").read_text().split()[0])
        # A multi-worker API is a supervisor and its workers: the largest worker is reported.
        from bench.services import children

        api_pids = children(api.pid, b"spawn_main") or [api.pid]
        result["api_workers"] = len(api_pids)
        rss = {"writer": peak_rss_mib(wpid), "projector": peak_rss_mib(projector.pid),
               "api": max((peak_rss_mib(p) or 0.0 for p in api_pids), default=None)}
        if args.profile:
            os.kill(wpid, signal.SIGTERM)  # py-spy writes its file when the writer exits
            writer.wait(120)
        result["peak_rss_mib"] = rss
        result["wall_s"] = round(time.monotonic() - wall0, 1)
        result["steal_pct"] = steal_pct(host0, host_ticks())
        result["speed"]["end"] = speed_probe()
        result["targets"] = _targets(result)
        from bench.report import write

        paths = write(result, args.out, stem)
        print(Path(paths[1]).read_text())
        _say("wrote " + ", ".join(str(p) for p in paths))
        return 0
    finally:
        for svc in (api, projector):
            if svc is not None:
                svc.stop()
        if writer is not None:
            writer.terminate(60)
        _cleanup(args, admin, list(settings.names.all()) + scratch)


def _cleanup(args: argparse.Namespace, admin: Any, topics: list[str]) -> None:
    import psycopg

    for f in admin.delete_topics(topics, operation_timeout=30).values():
        try:
            f.result()
        except Exception:  # noqa: BLE001 - a topic that was never made
            pass
    with psycopg.connect(args.database_url, autocommit=True) as conn:
        for (name,) in conn.execute("select nspname from pg_namespace where nspname like %s",
                                    (f"{args.tag}%",)).fetchall():
            conn.execute(f'drop schema "{name}" cascade')


if __name__ == "__main__":
    sys.exit(main())
