"""How fast does the writer seal? ``python bench/seal_rate.py [--captures 50000]``.

Pre-loads captures (1 KiB responses over 16 streams) into fresh topics, starts
``evidence writer`` as a subprocess, and times it from "partitions assigned" until its
committed intake offsets reach the end of intake: sustained sealing in records/s. Beside it,
the baseline: a plain idempotent producer sending the same (key, value) bytes with the
writer's own producer settings to fresh topics of as many partitions, one untimed warm-up
run, then ``PLAIN_RUNS`` timed runs before and after the writer, each from a settled disk and
a connected producer; the baseline is their median (see :func:`plain_producer_run`).
Topics are deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from evidence_contract import canonical_body_bytes, encode, fingerprint  # noqa: E402
from evidence_contract.codec import MARKER  # noqa: E402
from tests.fixtures.writer import WriterProcess, make_capture, writer_env  # noqa: E402
from topics import TopicNames, TopicSettings, ensure_topics  # noqa: E402
from topics.admin import while_settling  # noqa: E402


def _fast_encode(event: dict) -> bytes:
    # encode() validates strictly (~0.5 ms); the bench's own events are known good.
    return MARKER + fingerprint("CaptureEvent") + canonical_body_bytes(event)


def capture_messages(n: int, streams: int) -> list[tuple[bytes, bytes]]:
    """(key, CaptureEvent bytes) for ``n`` captures with 1 KiB responses over ``streams``."""
    first = make_capture("s-0", response=os.urandom(512).hex().encode())
    assert _fast_encode(first) == encode("CaptureEvent", first)
    out = []
    for i in range(n):
        e = make_capture(f"s-{i % streams}", response=os.urandom(512).hex().encode())  # 1 KiB
        out.append((e["stream"].encode(), _fast_encode(e)))
    return out


def preload(bootstrap: str, settings: TopicSettings, messages: list[tuple[bytes, bytes]]) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                  "batch.size": 1_000_000, "partitioner": "murmur2_random"})
    t0 = time.perf_counter()
    for i, (key, value) in enumerate(messages):
        while True:
            try:
                p.produce(settings.names.intake, value, key)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return time.perf_counter() - t0


PLAIN_RUNS = (2, 2)
"""Timed runs of the plain producer before and after the writer (after one untimed warm-up
run): the baseline is their median."""


def writer_producer_config(bootstrap: str) -> dict[str, Any]:
    """The writer's own producer settings (``writer.kafka_io.producer_config``: acks,
    idempotence, batch size, linger, compression, whatever they are now) without its
    transactions, and the keyed partitioner the gateways use: the baseline batches and sends
    as the writer's producer does, so the ratio compares sealing, not settings."""
    from writer.config import WriterConfig
    from writer.kafka_io import producer_config

    conf = producer_config(WriterConfig(bootstrap=bootstrap), error_cb=lambda _e: None)
    for key in ("transactional.id", "transaction.timeout.ms", "error_cb", "client.id"):
        conf.pop(key, None)
    return {**conf, "client.id": "bench-plain-producer", "partitioner": "murmur2_random"}


def plain_producer_run(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]],
                       database_url: str | None = None) -> dict[str, Any]:
    """One timed run of the plain idempotent producer: ``messages`` ((key, value) pairs) to
    ``topic`` until all are acknowledged. The clock starts once the disk is settled
    (``bench.services.settle_disk``) and the producer is connected (its producer id and the
    topic's leaders fetched, a small message to each partition delivered), as the writer's
    clock starts at its assignment; what it measures is the sending, not the start-up."""
    from confluent_kafka import Producer

    from bench.services import host_ticks, settle_disk, steal_pct

    settled = settle_disk(database_url)
    p = Producer(writer_producer_config(bootstrap))
    for part in range(len(p.list_topics(topic, timeout=30).topics[topic].partitions)):
        p.produce(topic, b"warm-up", partition=part)
    if p.flush(60) != 0:
        raise RuntimeError(f"the plain producer could not reach {topic}")
    h0, t0 = host_ticks(), time.perf_counter()
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
    s = time.perf_counter() - t0
    return {"seconds": round(s, 2), "records_per_s": round(len(messages) / s),
            "steal_pct": steal_pct(h0, host_ticks()), "dirty_mib_settled": settled["dirty_mib_before"]}


def plain_producer_runs(bootstrap: str, topics: list[str], messages: list[tuple[bytes, bytes]],
                        when: str, database_url: str | None = None) -> list[dict[str, Any]]:
    """A run of :func:`plain_producer_run` to each of ``topics`` (fresh ones: each run meets an
    empty topic, as the writer's log is), labelled ``when``."""
    return [{"when": f"{when}, run {i}", **plain_producer_run(bootstrap, t, messages, database_url)}
            for i, t in enumerate(topics, 1)]


def median_rate(runs: list[dict[str, Any]]) -> int:
    """The median records/s of ``runs`` (the baseline a ratio is taken against)."""
    return round(statistics.median(r["records_per_s"] for r in runs))


def intake_end(bootstrap: str, settings: TopicSettings, timeout: float = 30.0
               ) -> list[TopicPartition]:
    """The intake's end offsets. On topics just made, a partition's leader can still be moving
    (NOT_LEADER_FOR_PARTITION in a full run): ask again until ``timeout``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-probe"})
    try:
        out = []
        for p in range(settings.partitions):
            tp = TopicPartition(settings.names.intake, p)
            _, hi = while_settling(
                lambda: c.get_watermark_offsets(tp, timeout=10, cached=False), timeout)
            out.append(TopicPartition(settings.names.intake, p, hi))
        return out
    finally:
        c.close()


def committed(bootstrap: str, group: str, tps: list[TopicPartition]) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(t.topic, t.partition) for t in tps], timeout=10)]
    finally:
        c.close()



def start_writer(bootstrap: str, settings: TopicSettings, opts: dict, profile: str | None = None,
                 ready_timeout: float = 120, native: str | None = None) -> WriterProcess:
    """Start ``evidence writer`` on the bench's topics, under py-spy when ``profile`` is given
    (speedscope for a .json path, a flame graph otherwise), and wait until it is ready.
    ``native`` is the writer's ``EVIDENCE_NATIVE`` (its seal path; default: auto)."""
    cmd = [sys.executable, "-m", "cli.main", "writer"]
    if profile:
        fmt = "speedscope" if str(profile).endswith(".json") else "flamegraph"
        cmd = [str(Path(sys.executable).with_name("py-spy")), "record", "--nonblocking", "-r",
               "200", "-f", fmt, "-o", str(profile), "--"] + cmd
    env = writer_env(bootstrap, settings, **opts)
    if native is not None:
        env["EVIDENCE_NATIVE"] = native
    writer = WriterProcess(cmd, env)
    writer.wait_ready(ready_timeout)
    return writer


def time_until_sealed(bootstrap: str, writer: WriterProcess, group_id: str, ends: list,
                      timeout: float) -> tuple[float, float]:
    """(start, end) wall times: from the writer's partition assignment until its committed
    intake offsets reach ``ends`` (every pre-loaded capture sealed)."""
    t0 = writer.wait_event("assigned")["ts"]
    deadline = time.monotonic() + timeout
    while True:
        offs = committed(bootstrap, group_id, ends)
        # a partition no stream hashes to has nothing to seal and never a committed offset
        if all(tp.offset == 0 or o >= tp.offset for o, tp in zip(offs, ends)):
            return t0, time.time()
        writer.assert_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the writer did not seal everything in {timeout:.0f} s")
        time.sleep(0.1)

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=os.environ.get("EVIDENCE_KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    ap.add_argument("--database-url", default=os.environ.get("EVIDENCE_DATABASE_URL"),
                    help="PostgreSQL, for a checkpoint when the disk is settled (default: "
                         "EVIDENCE_DATABASE_URL; without it, sync only)")
    ap.add_argument("--captures", type=int, default=50_000)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--batch-max-messages", type=int, default=None)
    ap.add_argument("--batch-linger-ms", type=int, default=None)
    ap.add_argument("--profile", metavar="PATH", default=None,
                    help="run the writer under py-spy and write a flame graph (svg) or speedscope json")
    ap.add_argument("--native", choices=("auto", "0", "1"), default=None,
                    help="the writer's EVIDENCE_NATIVE: its seal path (default auto: compiled "
                         "if built)")
    args = ap.parse_args()

    from bench.services import settle_disk

    settings = TopicSettings(names=TopicNames(f"bench{uuid.uuid4().hex[:8]}"), partitions=args.partitions)
    ensure_topics(args.bootstrap, settings)
    scratch = [f"{settings.names.prefix}.scratch-{i}" for i in range(1 + sum(PLAIN_RUNS))]
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    writer = None
    try:
        create_scratch(admin, scratch, args.partitions)
        messages = capture_messages(args.captures, args.streams)
        load_s = preload(args.bootstrap, settings, messages)
        ends = intake_end(args.bootstrap, settings)
        assert sum(tp.offset for tp in ends) == args.captures
        # The warm-up run is not timed: the broker's first appends after a quiet spell (and
        # the JIT's) are slower than the rest, and which side met them decided the ratio.
        plain_producer_run(args.bootstrap, scratch[0], messages, args.database_url)
        plain = plain_producer_runs(args.bootstrap, scratch[1:1 + PLAIN_RUNS[0]], messages,
                                    "before the writer", args.database_url)
        opts = {"transactional_id": f"bench-{settings.names.prefix}", "group_id": f"bench-{settings.names.prefix}"}
        if args.batch_max_messages:
            opts["batch_max_messages"] = args.batch_max_messages
        if args.batch_linger_ms is not None:
            opts["batch_linger_ms"] = args.batch_linger_ms
        settle_disk(args.database_url)
        writer = start_writer(args.bootstrap, settings, opts, args.profile, ready_timeout=60,
                              native=args.native)
        t0, t1 = time_until_sealed(args.bootstrap, writer, opts["group_id"], ends, timeout=600)
        seal_rate = args.captures / (t1 - t0)
        if args.profile:  # stop the writer under py-spy, so py-spy sees it exit and writes
            for child in Path(f"/proc/{writer.pid}/task/{writer.pid}/children").read_text().split():
                os.kill(int(child), signal.SIGTERM)
            writer.wait(120)
        writer.terminate()
        plain += plain_producer_runs(args.bootstrap, scratch[1 + PLAIN_RUNS[0]:], messages,
                                     "after the writer", args.database_url)
        base = median_rate(plain)
        result = {"captures": args.captures, "streams": args.streams, "partitions": args.partitions,
                  "preload_s": round(load_s, 2), "seal_s": round(t1 - t0, 2),
                  "sealed_per_s": round(seal_rate), "plain_idempotent_producer_per_s": base,
                  "plain_runs_per_s": [r["records_per_s"] for r in plain],
                  "ratio": round(seal_rate / base, 3), "native": args.native or "auto"}
        print(json.dumps(result))
        return 0
    finally:
        if writer and writer.alive():
            writer.kill()
        for f in admin.delete_topics(list(settings.names.all()) + scratch,
                                     operation_timeout=30).values():
            try:
                f.result()
            except Exception:  # noqa: BLE001
                pass


def create_scratch(admin: AdminClient, names: list[str], partitions: int) -> None:
    """The plain producer's topics: as many partitions as the writer's log, one replica."""
    from confluent_kafka.admin import NewTopic

    for f in admin.create_topics([NewTopic(t, partitions, 1) for t in names]).values():
        f.result()


if __name__ == "__main__":
    sys.exit(main())
