"""What does a capture cost the gateway's process? ``python -m bench.gateway_cost``.

One gateway process (``bench.latency._generate``: synthetic finished exchanges with a 1 KiB
response handed to ``Recorder.submit`` on a fixed schedule, as section 2 of ``make bench``
offers them) at each ``--rates`` for ``--seconds``, against the dev stack's Kafka, under each
setting, in the same run and alternating: ``before`` (every capture written at once,
``unwaited_commit_ms=0``, and the sender's delivery-report tick of 1 ms it had until
2026-12-04), ``unwaited 0`` (written at once, the 5 ms tick), ``sender fsyncs`` (the
default, but the sender thread fsyncs every batch itself before producing it, as it did until
the journal's syncer), ``no rounds`` (the default, but every capture is produced as soon as it
is written, as until 2026-12-05, rather than in rounds: ``evidence_client.sender.ROUND_WINDOW``),
``pure encode`` (the default, but each capture's Avro written by the generated Python writer, as
until 2026-12-05, rather than by its compiled twin, as ``EVIDENCE_NATIVE=0`` chooses) and
``default`` (the captures nobody waits for share an fsync for up to 5 ms, made by the syncer
while they are produced; produced in rounds; the compiled Avro writer where it is built: the
``Avro written`` column says which ran). ``--stall-broker S`` freezes the dev stack's
broker (SIGSTOP, then SIGCONT) for S seconds out of every 2 while each gateway runs, as a disk
stall holds up its answers. Reports, per setting and rate, the process's
CPU a capture (user and kernel, from ``os.times`` over the whole process: its sender thread and
librdkafka's too) and the captures a spool fsync, medians over ``--rounds``, and each
setting's CPU over ``before``'s, as one JSON document (``--json``) or a table.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SETTINGS = {
    "before": {"unwaited_commit_ms": 0.0, "tick_s": 0.001, "syncer": False, "rounds": False,
               "native": True},
    "unwaited 0": {"unwaited_commit_ms": 0.0, "tick_s": None, "syncer": False, "rounds": True,
                   "native": True},
    "sender fsyncs": {"unwaited_commit_ms": None, "tick_s": None, "syncer": False,
                      "rounds": True, "native": True},
    "no rounds": {"unwaited_commit_ms": None, "tick_s": None, "syncer": True, "rounds": False,
                  "native": True},
    "pure encode": {"unwaited_commit_ms": None, "tick_s": None, "syncer": True, "rounds": True,
                    "native": False},
    "default": {"unwaited_commit_ms": None, "tick_s": None, "syncer": True, "rounds": True,
                "native": True},
}
"""Each setting: the Recorder's ``unwaited_commit_ms`` and the sender's report tick (None:
the current default), whether the journal's syncer fsyncs the batches no call waits for
(else the sender does, before producing them), whether the sender produces in rounds, and
whether a capture's Avro is written by the compiled writer when it is built
(``evidence_contract.codec.native_writers``; else by the generated Python one, as until
2026-12-05)."""

STALL_EVERY_S = 2.0
"""``--stall-broker``: one freeze of the broker in every this many seconds."""


def _child(bootstrap: str, prefix: str, rate: float, n: int, setting: str, out: Any) -> None:
    """In a fresh process: one gateway under ``setting``; put (CPU µs a capture, kernel µs a
    capture, captures an fsync, whether its encode was the compiled one)."""
    import evidence_client.sender as sender
    import evidence_client.spool as spool
    from bench.latency import _generate

    chosen = SETTINGS[setting]
    if chosen["tick_s"] is not None:
        sender._REPORT_TICK_S = chosen["tick_s"]
    if not chosen["rounds"]:
        sender.ROUND_WINDOW = float("inf")  # every round stays open: produced at once
    from evidence_contract import codec

    if not chosen["native"]:
        codec._NATIVE_WRITE.clear()  # the generated Python writer, as EVIDENCE_NATIVE=0
    compiled = "CaptureEvent" in codec._NATIVE_WRITE
    if not chosen["syncer"]:
        from evidence_client.journal import Journal

        Journal.start_syncer = lambda self: None  # type: ignore[method-assign]
    fsyncs = [0]
    datasync = spool._datasync

    def counted(fd: int) -> None:
        fsyncs[0] += 1
        datasync(fd)

    spool._datasync = counted
    options = ({} if chosen["unwaited_commit_ms"] is None
               else {"unwaited_commit_ms": chosen["unwaited_commit_ms"]})
    results: Any = multiprocessing.Queue()
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as spool_dir:
        t0 = os.times()
        _generate(bootstrap, prefix, f"bench:gw-{uuid.uuid4().hex[:8]}", rate, n, spool_dir,
                  time.time() + 1.0, results, options)
        t1 = os.times()
    results.get()  # ready
    results.get()  # what was sent (this bench needs only the process's CPU)
    cpu = (t1.user - t0.user) + (t1.system - t0.system)
    out.put((cpu / n * 1e6, (t1.system - t0.system) / n * 1e6, n / max(1, fsyncs[0]),
             compiled))


def _stall(pid: int, seconds: float, done: threading.Event) -> None:
    """Freeze process ``pid`` for ``seconds`` out of every :data:`STALL_EVERY_S` until
    ``done``; it is always let go again."""
    while not done.wait(STALL_EVERY_S - seconds):
        os.kill(pid, signal.SIGSTOP)
        try:
            done.wait(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)


def measure(bootstrap: str, prefix: str, rates: list[float], seconds: float,
            rounds: int, stall_pid: int | None = None,
            stall_s: float = 0.0) -> dict[str, Any]:
    """``stall_pid``: the broker to freeze for ``stall_s`` out of every
    :data:`STALL_EVERY_S` while each gateway runs, the first freeze ``STALL_EVERY_S -
    stall_s`` seconds after the gateway's process starts."""
    ctx = multiprocessing.get_context("spawn")
    got: dict[str, dict[float, list[tuple[float, float, float, bool]]]] = {
        s: {r: [] for r in rates} for s in SETTINGS}
    for _ in range(rounds):
        for rate in rates:
            for setting in SETTINGS:  # alternating, so drift in the machine hits each alike
                out = ctx.Queue()
                p = ctx.Process(target=_child, args=(bootstrap, prefix, rate,
                                                     max(1, int(rate * seconds)), setting, out))
                p.start()
                done = threading.Event()
                staller = None
                if stall_pid is not None and stall_s > 0:
                    staller = threading.Thread(target=_stall, args=(stall_pid, stall_s, done),
                                               daemon=True)
                    staller.start()
                try:
                    got[setting][rate].append(out.get(timeout=seconds + 120))
                finally:
                    done.set()
                    if staller is not None:
                        staller.join()
                p.join(60)
    table = []
    for rate in rates:
        base = statistics.median(x[0] for x in got["before"][rate])
        for setting in SETTINGS:
            runs = got[setting][rate]
            cpu = statistics.median(x[0] for x in runs)
            table.append({"rate": rate, "setting": setting, "cpu_us": round(cpu, 1),
                          "kernel_us": round(statistics.median(x[1] for x in runs), 1),
                          "captures_per_fsync": round(statistics.median(x[2] for x in runs), 1),
                          "encode": "compiled" if all(x[3] for x in runs) else "pure",
                          "vs_before": round(cpu / base, 2)})
    return {"seconds": seconds, "rounds": rounds, "stall_broker_s": stall_s if stall_pid else 0,
            "rows": table}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="500,1700",
                    help="captures/s one gateway offers, comma-separated (section 2 of make "
                         "bench gives each gateway at most 2,000)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--bootstrap", help="Kafka (default: EVIDENCE_KAFKA_BOOTSTRAP, else "
                                        ".stack/env)")
    ap.add_argument("--prefix", help="the topic prefix whose intake the gateway produces to "
                                     "(default: EVIDENCE_TOPIC_PREFIX, else evidence)")
    ap.add_argument("--stall-broker", type=float, default=0.0, metavar="S",
                    help="freeze the dev stack's broker for S seconds out of every "
                         f"{STALL_EVERY_S:g} while each gateway runs (0: never)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    try:
        rates = [float(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        ap.error(f"--rates {args.rates!r}: captures a second, comma-separated")
    if not rates or min(rates) <= 0 or args.seconds <= 0 or args.rounds < 1:
        ap.error("give at least one positive rate, a positive --seconds and --rounds >= 1")
    if not 0 <= args.stall_broker < STALL_EVERY_S:
        ap.error(f"--stall-broker {args.stall_broker:g}: seconds from 0 up to "
                 f"{STALL_EVERY_S:g} (one freeze every {STALL_EVERY_S:g} s)")
    from devstack import StackConfig, read_env

    env = {**read_env(StackConfig.from_env()), **os.environ}
    bootstrap = args.bootstrap or env.get("EVIDENCE_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    prefix = args.prefix or env.get("EVIDENCE_TOPIC_PREFIX", "evidence")
    stall_pid = None
    if args.stall_broker:
        from bench.run import stack_pids

        stall_pid = stack_pids().get("kafka")
        if stall_pid is None:
            ap.error("--stall-broker needs the dev stack's broker running here (make up)")
    result = measure(bootstrap, prefix, rates, args.seconds, args.rounds, stall_pid,
                     args.stall_broker)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print("| captures/s | setting | CPU µs a capture | of it kernel | captures an fsync | "
          "Avro written | CPU / before |")
    print("|---|---|---|---|---|---|---|")
    for r in result["rows"]:
        print(f"| {r['rate']:,.0f} | {r['setting']} | {r['cpu_us']} | {r['kernel_us']} | "
              f"{r['captures_per_fsync']} | {r['encode']} | {r['vs_before']}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
