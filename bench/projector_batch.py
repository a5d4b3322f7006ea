"""What a live projector's batch costs, with the streams' heads and tree ranges kept between
batches and read back each batch. ``python -m bench.projector_batch [--batches 100]``.

The projector's own write path (``RecordStore.apply``: positions locked, records by binary
COPY, heads, event ids, trees grown, positions moved, one transaction a batch) on the
configured PostgreSQL, no Kafka: ``--batch`` records with 1 KiB responses over ``--streams``
streams a batch, as the live projector takes them at a few thousand captures a second. Each
round writes ``--batches`` batches into a fresh generation under each setting, the order
alternating round by round:

- ``kept``: the default, :mod:`projections.kept` (a batch folds and grows from the heads and
  ranges the last one left);
- ``read back``: keeping nothing (``Kept(limit=0)``), so every batch reads its streams'
  heads, tree sizes and range nodes back, as every batch did until 2026-12-04.

Reports per setting the batch's wall time (p50, p90) and the PostgreSQL backend's CPU a batch
(from ``/proc``: the server must run on this machine, as the dev stack's does), and kept over
read back. Makes its own meta, views and generation schemas and drops them afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SETTINGS = ("kept", "read back")


def _backend_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (a PostgreSQL backend), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _round(store: Any, setting: str, batches: list[list[Any]]) -> dict[str, list[float]]:
    from projections.kept import Kept

    limit = None if setting == "kept" else 0
    store.trees.kept_ranges = Kept() if limit is None else Kept(limit)
    store.records.kept_heads = Kept() if limit is None else Kept(limit)
    gen = store.gens.create_generation()
    topic = store.cfg.log_topic
    pid = store.db.conn.execute("select pg_backend_pid()").fetchone()[0]
    wall, cpu = [], []
    expected = {0: 0}
    for msgs in batches:
        c0, t0 = _backend_cpu_s(pid), time.perf_counter()
        folded = store.records.apply(gen, topic, expected, msgs, {}, {}, follow_live=False)
        wall.append(time.perf_counter() - t0)
        cpu.append(_backend_cpu_s(pid) - c0)
        expected = dict(folded.next_offsets)
    return {"wall": wall, "cpu": cpu}


def measure(database_url: str, batches: int = 100, batch: int = 100, streams: int = 8,
            rounds: int = 8, response_bytes: int = 1024) -> dict[str, Any]:
    import psycopg

    from projections import ProjectorConfig
    from projections.fold import decode_message
    from projections.store import Store
    from tests.fixtures.log import chain
    from topics import TopicNames, TopicSettings

    tag = f"pbatch{uuid.uuid4().hex[:8]}"
    cfg = ProjectorConfig(database_url=database_url, bootstrap="127.0.0.1:9",
                          topics=TopicSettings(names=TopicNames(tag)),
                          meta_schema=f"{tag}_meta", views_schema=f"{tag}_views",
                          generation_prefix=f"{tag}_g", metrics_port=0).checked()
    n = batches * batch
    recs = chain({f"s{i}": n // streams for i in range(streams)},
                 response=os.urandom(response_bytes // 2).hex().encode())
    msgs = [decode_message(0, i, r.value) for i, r in enumerate(recs)]
    cut = [msgs[i:i + batch] for i in range(0, len(msgs), batch)]
    got: dict[str, dict[str, list[float]]] = {s: {"wall": [], "cpu": []} for s in SETTINGS}
    try:
        with Store(cfg) as store:
            store.gens.live_generation(create=True)
            _round(store, "kept", cut[: max(1, len(cut) // 4)])  # warm-up, not counted
            for r in range(rounds):
                for setting in (SETTINGS if r % 2 == 0 else SETTINGS[::-1]):
                    one = _round(store, setting, cut)
                    for k in ("wall", "cpu"):
                        got[setting][k] += one[k]
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            for (name,) in conn.execute("select nspname from pg_namespace where nspname like %s",
                                        (f"{tag}%",)).fetchall():
                conn.execute(f'drop schema "{name}" cascade')
    out: dict[str, Any] = {"batches": batches, "batch": batch, "streams": streams,
                           "rounds": rounds, "response_bytes": response_bytes, "prefix": tag}
    for s, v in got.items():
        wall = sorted(v["wall"])
        out[s] = {"batch_ms_p50": round(statistics.median(wall) * 1e3, 2),
                  "batch_ms_p90": round(wall[int(len(wall) * 0.9)] * 1e3, 2),
                  "postgres_cpu_ms_a_batch": round(statistics.mean(v["cpu"]) * 1e3, 2)}
    k, b = out["kept"], out["read back"]
    out["kept_over_read_back"] = {
        "batch_ms_p50": round(k["batch_ms_p50"] / b["batch_ms_p50"], 2),
        "postgres_cpu": (round(k["postgres_cpu_ms_a_batch"] / b["postgres_cpu_ms_a_batch"], 2)
                         if b["postgres_cpu_ms_a_batch"] else None)}
    return out


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def main(argv: list[str] | None = None) -> int:
    from devstack import StackConfig, read_env

    ap = argparse.ArgumentParser(prog="python -m bench.projector_batch",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", default=None,
                    help="PostgreSQL (default: EVIDENCE_DATABASE_URL, else the dev stack's)")
    ap.add_argument("--batches", type=_positive, default=100, help="batches a round and setting")
    ap.add_argument("--batch", type=_positive, default=100, help="records a batch")
    ap.add_argument("--streams", type=_positive, default=8)
    ap.add_argument("--rounds", type=_positive, default=8)
    ap.add_argument("--json", action="store_true", help="one JSON document, not a table")
    args = ap.parse_args(argv)
    env = {**read_env(StackConfig.from_env()), **os.environ}
    url = args.database_url or env.get("EVIDENCE_DATABASE_URL",
                                       "postgresql://evidence:evidence@127.0.0.1:5432/evidence")
    r = measure(url, args.batches, args.batch, args.streams, args.rounds)
    if args.json:
        print(json.dumps(r))
        return 0
    print(f"{r['rounds']} rounds x {r['batches']} batches of {r['batch']} records over "
          f"{r['streams']} streams, a setting")
    print("| heads and ranges | batch p50 ms | batch p90 ms | PostgreSQL CPU ms a batch |")
    print("|---|---|---|---|")
    for s in SETTINGS:
        v = r[s]
        print(f"| {s} | {v['batch_ms_p50']} | {v['batch_ms_p90']} "
              f"| {v['postgres_cpu_ms_a_batch']} |")
    ratio = r["kept_over_read_back"]
    print(f"kept / read back: batch p50 {ratio['batch_ms_p50']}x, PostgreSQL CPU "
          f"{ratio['postgres_cpu']}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
