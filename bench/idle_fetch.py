"""What an idle writer's intake fetches cost the broker: ``python -m bench.idle_fetch``.

A writer with nothing to seal still asks its partitions' leaders for more every
``EVIDENCE_WRITER_FETCH_WAIT_MS`` (``writer.config``): its intake consumer's fetch waits for
512 KiB or that long, whichever comes first, and comes back empty. This starts ``--consumers``
consumers with the writer's own intake settings (``writer.kafka_io.consumer_config``, each in
a group of its own) on a fresh, empty topic of ``--partitions`` partitions, for each fetch wait
in turn, and counts the broker's CPU over ``--seconds`` (``/proc``; the broker must run on
this machine: the dev stack's, or ``--broker-pid``). Before each wait the same span with no
consumer gives the broker's own idle CPU, the baseline; the figure is the difference, per
consumer, as a share of one core.

    python -m bench.idle_fetch [--waits 20,100,500] [--consumers 4] [--seconds 20]

On the development machine (a lone broker, 2 cores), two runs: 2.4% and 3.8% of a core per
idle consumer at 20 ms, 0.8% at 100 ms, 0.1% and 0.35% at 500 ms. The topic is deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.services import cpu_seconds  # noqa: E402
from writer.config import WriterConfig  # noqa: E402
from writer.kafka_io import consumer_config  # noqa: E402

ASSIGNED_WITHIN_S = 60.0  # a consumer that has no partitions by then fails the run


def _broker_cpu(pid: int) -> float:
    got = cpu_seconds(pid)
    if got is None:
        raise SystemExit(f"the broker (pid {pid}) is gone")
    return got


def _idle_span(pid: int, seconds: float, poll: Callable[[], None]) -> float:
    """The broker's CPU seconds over ``seconds`` of ``poll()`` in a loop."""
    before, end = _broker_cpu(pid), time.monotonic() + seconds
    while time.monotonic() < end:
        poll()
    return _broker_cpu(pid) - before


def _consumers(bootstrap: str, topic: str, n: int, wait_ms: int) -> list[Consumer]:
    def failed(err: Any) -> None:
        print(f"consumer error: {err}", file=sys.stderr)

    out = []
    for _ in range(n):
        tag = f"bench-idle-{uuid.uuid4().hex[:10]}"
        cfg = replace(WriterConfig(bootstrap=bootstrap), group_id=tag, group_instance_id=tag,
                      transactional_id=tag, fetch_wait_ms=wait_ms)
        c = Consumer(consumer_config(cfg, failed, client_id=tag))
        c.subscribe([topic])
        out.append(c)
    deadline = time.monotonic() + ASSIGNED_WITHIN_S
    while not all(c.assignment() for c in out):
        if time.monotonic() > deadline:
            raise SystemExit(f"the consumers had no partitions after {ASSIGNED_WITHIN_S:g} s")
        for c in out:
            c.poll(0.05)
    return out


def measure(bootstrap: str, broker_pid: int, waits: list[int], consumers: int,
            seconds: float, partitions: int, say: Callable[[str], None]) -> list[dict[str, Any]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"bench-idle-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    rows = []
    try:
        for wait in waits:
            base = _idle_span(broker_pid, seconds, lambda: time.sleep(0.05))
            group = _consumers(bootstrap, topic, consumers, wait)
            try:
                for c in group:  # past the joins and the first fetches
                    c.poll(0.5)

                def poll() -> None:
                    for c in group:
                        if (m := c.poll(0.05)) is not None and m.error() is not None:
                            say(f"consumer: {m.error()}")

                busy = _idle_span(broker_pid, seconds, poll)
            finally:
                for c in group:
                    c.close()
            per = max(0.0, busy - base) / consumers / seconds
            rows.append({"fetch_wait_ms": wait, "consumers": consumers, "seconds": seconds,
                         "broker_cpu_s_idle": round(base, 2),
                         "broker_cpu_s_with_consumers": round(busy, 2),
                         "core_share_per_consumer": round(per, 4)})
            say(f"fetch wait {wait} ms: broker {busy:.2f} s of CPU with {consumers} idle "
                f"consumers, {base:.2f} s without, in {seconds:g} s: {100 * per:.2f}% of a "
                f"core a consumer")
    finally:
        for done in admin.delete_topics([topic], operation_timeout=30).values():
            done.result(60)
    return rows


def markdown(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| intake fetch wait | broker CPU per idle writer consumer | broker alone, same span |",
           "|---|---|---|"]
    for r in rows:
        out.append(f"| {r['fetch_wait_ms']} ms | {100 * r['core_share_per_consumer']:.2f}% of "
                   f"a core | {r['broker_cpu_s_idle']:.2f} s of CPU in {r['seconds']:g} s |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.idle_fetch",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--waits", default="20,100,500", help="fetch waits (ms), comma-separated")
    ap.add_argument("--consumers", type=int, default=4, help="idle consumers at a time (4)")
    ap.add_argument("--seconds", type=float, default=20.0, help="span of each count (20)")
    ap.add_argument("--partitions", type=int, default=6, help="of the empty topic (6)")
    ap.add_argument("--bootstrap", help="Kafka (default: the dev stack's)")
    ap.add_argument("--broker-pid", type=int, help="the broker's pid (default: the dev stack's)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    try:
        waits = [int(w) for w in args.waits.split(",") if w]
    except ValueError:
        ap.error(f"--waits {args.waits!r}: milliseconds, comma-separated")
    if not waits or args.consumers < 1 or args.seconds <= 0:
        ap.error("give at least one wait, one consumer and a positive --seconds")
    from bench.run import stack_pids
    from devstack import StackConfig, read_env

    bootstrap = args.bootstrap or {**read_env(StackConfig.from_env()), **os.environ}.get(
        "EVIDENCE_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    pid = args.broker_pid or stack_pids().get("kafka")
    if pid is None:
        ap.error("no broker of the dev stack runs here (make up); give --broker-pid")
    rows = measure(bootstrap, pid, waits, args.consumers, args.seconds, args.partitions,
                   lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(rows, indent=2) if args.json else "\n".join(markdown(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
