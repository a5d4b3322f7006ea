"""Does sealing scale out? ``python bench/scale_out.py [--captures 50000]``.

For 1 and for 2 writers (one consumer group, a transactional id each), on topics of their
own (a log is sealed once) and with the same captures (1 KiB responses over 16 streams, the
same bytes in the same partitions): the writers are started on an empty intake and left
until the group has settled (every writer's last assignment is current, and between them
they own each partition once); then they are paused (SIGSTOP), the captures pre-loaded into
their intake, and the writers resumed (SIGCONT) and timed until their committed intake
offsets reach the end of intake, as ``bench/seal_rate.py`` times one writer (its helpers are
used). Why the pause: on an intake loaded before they start, the first writer to join seals
everything before the second has joined (seen here: 30,000 captures in 1.7 s, while the
group took 4.9 s to settle), which measures start-up skew, not scale-out. The writers'
session timeout is raised to a minute so that the pause costs no rebalance; a rebalance
during the timed window is reported (``rebalanced``), as it would make the figure worse.

All processes share the machine: on 2 cores, with the broker and both writers' Kafka clients
on the same cores, 2 writers do not seal twice as fast; the ratio says how far from it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

COUNTS = (1, 2)
SESSION_TIMEOUT_MS = 60_000


def _assignment(w: Any) -> set[int] | None:
    """The partitions the writer said it owns last; None while a revocation is its latest."""
    events = [e for e in w.events() if e.get("event") in ("assigned", "revoked")]
    if not events or events[-1]["event"] != "assigned":
        return None
    return set(events[-1].get("partitions") or ())


def _settled(writers: list[Any], partitions: int) -> bool:
    sets = [_assignment(w) for w in writers]
    return (all(s is not None and s for s in sets)
            and sorted(p for s in sets for p in s) == list(range(partitions)))


def run_writers(bootstrap: str, settings: Any, messages: list[tuple[bytes, bytes]],
                count: int, tag: str, timeout: float = 1800) -> dict[str, Any]:
    """Seal ``messages`` with ``count`` writers; see the module docstring."""
    from bench.run import produce_all
    from bench.seal_rate import committed, intake_end
    from tests.fixtures.writer import WriterProcess, writer_env

    group = f"{tag}-w{count}"
    writers = [WriterProcess([sys.executable, "-m", "cli.main", "writer"],
                             writer_env(bootstrap, settings, transactional_id=f"{group}-{i}",
                                        group_id=group, session_timeout_ms=SESSION_TIMEOUT_MS))
               for i in range(1, count + 1)]
    try:
        deadline = time.monotonic() + timeout
        while not _settled(writers, settings.partitions):
            for w in writers:
                w.assert_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{count} writers did not settle in {timeout:.0f} s")
            time.sleep(0.05)
        for w in writers:
            os.kill(w.pid, signal.SIGSTOP)
        try:
            produce_all(bootstrap, settings.names.intake, messages)
            ends = intake_end(bootstrap, settings)
            n = sum(tp.offset for tp in ends)
        finally:
            t0 = time.time()
            for w in writers:
                os.kill(w.pid, signal.SIGCONT)
        while True:
            offs = committed(bootstrap, group, ends)
            if all(tp.offset == 0 or o >= tp.offset for o, tp in zip(offs, ends)):
                t1 = time.time()
                break
            for w in writers:
                w.assert_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{count} writers did not seal everything in {timeout:.0f} s")
            time.sleep(0.05)
        rebalanced = any(e.get("event") == "revoked" and e["ts"] >= t0
                         for w in writers for e in w.events())
        return {"writers": count, "captures": n, "seconds": round(t1 - t0, 2),
                "records_per_s": round(n / (t1 - t0)), "rebalanced": rebalanced,
                "partitions_owned": [sorted(_assignment(w) or ()) for w in writers]}
    finally:
        for w in writers:
            if w.alive():
                with contextlib.suppress(OSError):
                    os.kill(w.pid, signal.SIGCONT)
                try:
                    w.terminate(60)
                except AssertionError:
                    pass


def measure(bootstrap: str, messages: list[tuple[bytes, bytes]], partitions: int,
            tag: str, say=lambda _m: None) -> dict[str, Any]:
    """1 and 2 writers over the same ``messages`` (key, value); returns both runs and the
    2-writer/1-writer ratio. Makes and deletes its own topics."""
    from confluent_kafka.admin import AdminClient

    from topics import TopicNames, TopicSettings, ensure_topics

    made = [TopicSettings(names=TopicNames(f"{tag}x{k}"), partitions=partitions) for k in COUNTS]
    try:
        runs = []
        for k, settings in zip(COUNTS, made):
            ensure_topics(bootstrap, settings)
            say(f"scale-out: {k} writer{'s' if k > 1 else ''}, {len(messages)} captures")
            runs.append(run_writers(bootstrap, settings, messages, k, tag))
    finally:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        names = [t for s in made for t in s.names.all()]
        for f in admin.delete_topics(names, operation_timeout=30).values():
            try:
                f.result()
            except Exception:  # noqa: BLE001 - a topic that was never made
                pass
    one, two = runs
    return {"runs": runs, "ratio": round(two["records_per_s"] / one["records_per_s"], 3),
            "cores": os.cpu_count()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap",
                    default=os.environ.get("EVIDENCE_KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    ap.add_argument("--captures", type=int, default=50_000)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--response-bytes", type=int, default=1024)
    args = ap.parse_args()

    from bench.run import make_messages

    messages = make_messages(args.captures, args.streams, args.response_bytes)
    result = measure(args.bootstrap, messages, args.partitions,
                     f"bench{uuid.uuid4().hex[:8]}",
                     say=lambda m: print(f"[bench] {m}", file=sys.stderr, flush=True))
    for r in result["runs"]:
        print(f"{r['writers']} writer(s): {r['records_per_s']:,} records/s "
              f"({r['captures']} in {r['seconds']} s; partitions {r['partitions_owned']}"
              f"{'; rebalanced while timed' if r['rebalanced'] else ''})", file=sys.stderr)
    print(f"2 writers / 1 writer: {result['ratio']:.2f}x ({result['cores']} cores)",
          file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
