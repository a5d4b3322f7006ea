"""How fast does the writer seal? ``python bench/seal_rate.py [--captures 50000]``.

Pre-loads captures (1 KiB responses over 16 streams) into fresh topics, starts
``evidence writer`` as a subprocess, and times it from "partitions assigned" until its
committed intake offsets reach the end of intake: sustained sealing in records/s. For scale
it also times a plain idempotent producer writing the same number of same-sized messages.
Topics are deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from evidence_contract import canonical_body_bytes, encode, fingerprint  # noqa: E402
from evidence_contract.codec import MARKER  # noqa: E402
from tests.fixtures.writer import WriterProcess, make_capture, writer_env  # noqa: E402
from topics import TopicNames, TopicSettings, ensure_topics  # noqa: E402


def _fast_encode(event: dict) -> bytes:
    # encode() validates strictly (~0.5 ms); the bench's own events are known good.
    return MARKER + fingerprint("CaptureEvent") + canonical_body_bytes(event)


def preload(bootstrap: str, settings: TopicSettings, n: int, streams: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                  "batch.size": 1_000_000, "partitioner": "murmur2_random"})
    first = make_capture("s-0", response=os.urandom(512).hex().encode())
    assert _fast_encode(first) == encode("CaptureEvent", first)
    t0 = time.perf_counter()
    for i in range(n):
        e = make_capture(f"s-{i % streams}", response=os.urandom(512).hex().encode())  # 1 KiB
        while True:
            try:
                p.produce(settings.names.intake, _fast_encode(e), e["stream"].encode())
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return time.perf_counter() - t0


def plain_producer_rate(bootstrap: str, topic: str, n: int, size: int, streams: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "partitioner": "murmur2_random"})
    payload = os.urandom(size)
    keys = [f"s-{i}".encode() for i in range(streams)]
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, payload, keys[i % streams])
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0
    return n / (time.perf_counter() - t0)


def intake_end(bootstrap: str, settings: TopicSettings) -> list[TopicPartition]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-probe"})
    try:
        out = []
        for p in range(settings.partitions):
            _, hi = c.get_watermark_offsets(TopicPartition(settings.names.intake, p), timeout=10, cached=False)
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

    settings = TopicSettings(names=TopicNames(f"bench{uuid.uuid4().hex[:8]}"), partitions=args.partitions)
    ensure_topics(args.bootstrap, settings)
    writer = None
    try:
        load_s = preload(args.bootstrap, settings, args.captures, args.streams)
        ends = intake_end(args.bootstrap, settings)
        assert sum(tp.offset for tp in ends) == args.captures
        opts = {"transactional_id": f"bench-{settings.names.prefix}", "group_id": f"bench-{settings.names.prefix}"}
        if args.batch_max_messages:
            opts["batch_max_messages"] = args.batch_max_messages
        if args.batch_linger_ms is not None:
            opts["batch_linger_ms"] = args.batch_linger_ms
        writer = start_writer(args.bootstrap, settings, opts, args.profile, ready_timeout=60,
                              native=args.native)
        t0, t1 = time_until_sealed(args.bootstrap, writer, opts["group_id"], ends, timeout=600)
        seal_rate = args.captures / (t1 - t0)
        if args.profile:  # stop the writer under py-spy, so py-spy sees it exit and writes
            for child in Path(f"/proc/{writer.pid}/task/{writer.pid}/children").read_text().split():
                os.kill(int(child), signal.SIGTERM)
            writer.wait(120)
        writer.terminate()
        plain = plain_producer_rate(args.bootstrap, settings.names.rejected, args.captures, 1300, args.streams)
        result = {"captures": args.captures, "streams": args.streams, "partitions": args.partitions,
                  "preload_s": round(load_s, 2), "seal_s": round(t1 - t0, 2),
                  "sealed_per_s": round(seal_rate), "plain_idempotent_producer_per_s": round(plain),
                  "ratio": round(seal_rate / plain, 3), "native": args.native or "auto"}
        print(json.dumps(result))
        return 0
    finally:
        if writer and writer.alive():
            writer.kill()
        admin = AdminClient({"bootstrap.servers": args.bootstrap})
        for f in admin.delete_topics(list(settings.names.all()), operation_timeout=30).values():
            try:
                f.result()
            except Exception:  # noqa: BLE001
                pass


if __name__ == "__main__":
    sys.exit(main())
