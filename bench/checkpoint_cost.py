"""What do signed checkpoints cost the writer? ``python bench/checkpoint_cost.py``.

In one run, on the same broker, alternating (off, on, off, on, ...): pre-load the same number
of captures (1 KiB responses over ``--streams`` streams) into fresh topics and time
``evidence writer`` sealing them, once without a log key (checkpoints off, the baseline) and
once signing every grown stream's checkpoint every ``--interval-s``. Prints sealing throughput
with checkpoints on vs off (the ratio, median over ``--rounds``), checkpoints issued per
second of sealing and the signing time they took per second of sealing (from the writer's own
``evidence_writer_checkpoint_sign_seconds``), and, in process, the cost of one leaf append and
of one checkpoint (tree root + Ed25519 note) against one ``seal_capture`` as the baseline.
Topics are deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import AdminClient  # noqa: E402

from bench.seal_rate import intake_end, preload, time_until_sealed  # noqa: E402
from devstack.ports import free_port  # noqa: E402
from tests.fixtures.writer import WriterProcess, make_capture, read_all, writer_env  # noqa: E402
from topics import TopicNames, TopicSettings, ensure_topics  # noqa: E402


def _metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def one_run(args: argparse.Namespace, signing: bool) -> dict:
    settings = TopicSettings(names=TopicNames(f"bench{uuid.uuid4().hex[:8]}"),
                             partitions=args.partitions)
    ensure_topics(args.bootstrap, settings)
    writer = None
    try:
        preload(args.bootstrap, settings, args.captures, args.streams)
        ends = intake_end(args.bootstrap, settings)
        port = free_port()
        opts = {"transactional_id": f"bench-{settings.names.prefix}",
                "group_id": f"bench-{settings.names.prefix}", "metrics_port": port,
                "signing": signing}
        env = writer_env(args.bootstrap, settings, **opts)
        env["EVIDENCE_CHECKPOINT_INTERVAL_S"] = str(args.interval_s)
        writer = WriterProcess([sys.executable, "-m", "cli.main", "writer"], env)
        writer.wait_ready(60)
        t0, t1 = time_until_sealed(args.bootstrap, writer, opts["group_id"], ends, timeout=600)
        seal_s = t1 - t0
        issued = _metric(port, "evidence_writer_checkpoints_total")
        sign_s = _metric(port, "evidence_writer_checkpoint_sign_seconds_sum")
        writer.terminate()
        on_topic = len(read_all(args.bootstrap, settings.names.checkpoints)) if signing else 0
        return {"signing": signing, "seal_s": seal_s, "sealed_per_s": args.captures / seal_s,
                "checkpoints": issued, "checkpoints_on_topic": on_topic, "sign_s": sign_s}
    finally:
        if writer and writer.alive():
            writer.kill()
        admin = AdminClient({"bootstrap.servers": args.bootstrap})
        for f in admin.delete_topics(list(settings.names.all()), operation_timeout=30).values():
            try:
                f.result()
            except Exception:  # noqa: BLE001
                pass


def in_process(n: int = 2000) -> dict:
    """Per-operation costs in this process, against sealing one capture as the baseline."""
    from evidence_contract import canonical_body_bytes, encode
    from evidence_contract.chain import Head
    from evidence_contract.note import generate_signer
    from writer.checkpoints import Trees, record_leaf
    from writer.core import Capture, seal_capture

    events = [make_capture("bench") for _ in range(n)]
    caps = [Capture("bench", e["event_id"], canonical_body_bytes(e)) for e in events]
    assert encode("CaptureEvent", events[0])
    head, records = Head.genesis("bench"), []
    t0 = time.perf_counter()
    for c in caps:
        record, head = seal_capture(c, head, 1, {"writer_id": "w", "transactional_id": "t",
                                                  "version": "0"}, 0, 0)
        records.append((record, head.digest))
    seal_us = (time.perf_counter() - t0) / n * 1e6
    trees = Trees(generate_signer("evidence-store.local/log"))
    trees.assign(0, {})
    t0 = time.perf_counter()
    for i, (record, digest) in enumerate(records):
        trees.append(0, "bench", record_leaf(record, digest), i + 1)
    leaf_us = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    for i in range(200):
        trees.append(0, "bench", bytes(32), n + i + 1)
        trees.issue(0, "bench", float(i))
        trees.commit()
    issue_us = (time.perf_counter() - t0) / 200 * 1e6
    return {"seal_capture_us": round(seal_us, 1), "leaf_append_us": round(leaf_us, 1),
            "leaf_vs_seal": round(leaf_us / seal_us, 3), "checkpoint_issue_us": round(issue_us, 1),
            "checkpoint_vs_seal": round(issue_us / seal_us, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=os.environ.get("EVIDENCE_KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    ap.add_argument("--captures", type=int, default=20_000)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--interval-s", type=float, default=0.2,
                    help="checkpoint interval while on (default 0.2 s: far more often than the "
                         "5 s default, to make the cost visible)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    runs = []
    for _ in range(args.rounds):
        for signing in (False, True):
            runs.append(one_run(args, signing))
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v
                              for k, v in runs[-1].items()}), file=sys.stderr)
    off = statistics.median(r["sealed_per_s"] for r in runs if not r["signing"])
    on_runs = [r for r in runs if r["signing"]]
    on = statistics.median(r["sealed_per_s"] for r in on_runs)
    seal_s = sum(r["seal_s"] for r in on_runs)
    result = {
        "captures": args.captures, "streams": args.streams, "partitions": args.partitions,
        "interval_s": args.interval_s, "rounds": args.rounds,
        "sealed_per_s_off": round(off), "sealed_per_s_on": round(on),
        "on_vs_off": round(on / off, 3),
        "checkpoints_per_s_of_sealing": round(sum(r["checkpoints"] for r in on_runs) / seal_s, 1),
        "sign_s_per_s_of_sealing": round(sum(r["sign_s"] for r in on_runs) / seal_s, 5),
        "in_process": in_process(),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
