"""Rebuild rate: project N records (1 KiB responses) from a fresh log topic via
``projections.rebuild``, next to a baseline: a binary COPY of the same rows into an
unindexed table in the same database.

    .venv/bin/python bench/rebuild_rate.py [--records 50000] [--response-bytes 1024] [--full-live]

``--full-live`` first projects the log into a live generation (an in-place rebuild), so the
timed rebuild compares itself with a live generation as large as its own before the swap,
as ``make bench`` and a production rebuild do; without it the live generation is empty.
The time each step took (``RebuildResult.phases``) is printed after the rate. The rebuild
and each of two COPYs start from a settled disk (``bench.services.settle_disk``); the
faster COPY is the baseline, as in ``make bench``.

Uses the stack in ``.stack/env`` (or EVIDENCE_KAFKA_BOOTSTRAP / EVIDENCE_DATABASE_URL); makes
its own topics, meta/views/generation schemas and drops them afterwards.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from devstack import StackConfig, read_env  # noqa: E402
from projections import ProjectorConfig  # noqa: E402
from cli.progress import Progress  # noqa: E402
from projections.rebuild import rebuild  # noqa: E402
from projections.rows import RECORD_COLUMNS, RECORD_TYPES, record_row  # noqa: E402
from projections.store import Store  # noqa: E402
from server.runtime import tune_gc  # noqa: E402
from bench.services import settle_disk  # noqa: E402
from tests.fixtures.log import chain, produce  # noqa: E402
from topics import TopicNames, TopicSettings, ensure_topics  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--response-bytes", type=int, default=1024)
    ap.add_argument("--streams", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--full-live", action="store_true",
                    help="compare with a full live generation (see the docstring)")
    args = ap.parse_args()

    env = {**read_env(StackConfig.from_env()), **os.environ}
    bootstrap = env.get("EVIDENCE_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    url = env.get("EVIDENCE_DATABASE_URL",
                  "postgresql://evidence:evidence@127.0.0.1:5432/evidence")
    tag = uuid.uuid4().hex[:8]
    topics = TopicSettings(names=TopicNames(f"bench{tag}"), partitions=args.partitions)
    cfg = ProjectorConfig(database_url=url, bootstrap=bootstrap, topics=topics,
                          meta_schema=f"bench{tag}_meta", views_schema=f"bench{tag}_views",
                          generation_prefix=f"bench{tag}_g", batch_max_messages=args.batch,
                          metrics_port=0).checked()
    ensure_topics(bootstrap, topics)
    try:
        per = args.records // args.streams
        t = time.perf_counter()
        recs = chain({f"stream-{i}": per for i in range(args.streams)},
                     response=os.urandom(args.response_bytes))
        recs = produce(bootstrap, topics, recs)
        n = len(recs)
        print(f"produced {n} records ({len(recs[0].value)} bytes each) "
              f"in {time.perf_counter() - t:.1f} s", file=sys.stderr)

        if args.full_live:
            t = time.perf_counter()
            rebuild(cfg, in_place=True)
            print(f"projected a live generation in {time.perf_counter() - t:.1f} s",
                  file=sys.stderr)
        else:
            # An empty live generation, so the rebuild takes the blue/green path (bulk
            # load, checks under the live lock, swap, drop).
            with Store(cfg) as store:
                store.live_generation(create=True)
        # With the collector settings `evidence projections rebuild` runs with, from a
        # settled disk (the production and the live generation's writes written back).
        settle_disk(url)
        before = gc.get_threshold()
        tune_gc()
        try:
            r = rebuild(cfg, progress_factory=Progress)
        finally:
            gc.unfreeze()
            gc.set_threshold(*before)
        assert r.records == n, (r.records, n)
        rate = n / r.seconds

        rows = [record_row(x.value, x.partition, x.offset) for x in recs]
        # Twice, each from a settled disk, the faster kept (as make bench does).
        runs = []
        for i in range(2):
            settle_disk(url)
            runs.append(_copy_baseline(url, f"bench{tag}_baseline{i}", rows))
        base_s = min(runs)
        base = n / base_s
        print(f"rebuild:  {n} records in {r.seconds:6.2f} s = {rate:9,.0f} records/s")
        print(f"baseline: {n} rows    in {base_s:6.2f} s = {base:9,.0f} rows/s "
              f"(binary COPY into an unindexed table, the faster of "
              f"{' and '.join(f'{x:.2f} s' for x in runs)})")
        print(f"ratio:    rebuild / baseline = {rate / base:.2f}")
        print("steps:    " + ", ".join(f"{k} {v:.2f} s" for k, v in r.phases.items()))
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            for (name,) in conn.execute("select nspname from pg_namespace where nspname like %s",
                                        (f"bench{tag}%",)).fetchall():
                conn.execute(f'drop schema "{name}" cascade')
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.delete_topics(list(topics.names.all()), operation_timeout=30).values():
            f.result()
    return 0


def _copy_baseline(url: str, schema: str, rows: list[tuple]) -> float:
    cols = ", ".join(f"{c} {t}" for c, t in zip(RECORD_COLUMNS, RECORD_TYPES))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'create schema "{schema}"')
        conn.execute(f'create table "{schema}".records ({cols})')
        t = time.perf_counter()
        with conn.transaction(), conn.cursor() as cur, cur.copy(
                f'copy "{schema}".records ({", ".join(RECORD_COLUMNS)}) '
                f"from stdin (format binary)") as copy:
            copy.set_types(RECORD_TYPES)
            for row in rows:
                copy.write_row(row)
        return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
