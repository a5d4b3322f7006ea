"""Sealing on three brokers beside one (section 9 of ``make bench``).
``python bench/cluster.py [--captures 20000]``.

The same captures are sealed by one writer on the broker the bench runs on (topics with
replication factor 1) and on a cluster of three KRaft brokers started for this section
(``devstack.kafka.start`` on ``StackConfig.on_free_ports(root, brokers=3)``, under a temporary
root, the same jars and settings as ``make up BROKERS=3``; topics with replication factor 3 and
``min.insync.replicas`` 2, so each transaction is acknowledged once two brokers hold it). Each
run is timed as section 1 times the writer (``bench.seal_rate``: from its assignment until its
committed intake offsets reach the end of a pre-loaded intake); the pre-load itself is the
plain producer's rate on that broker, acks=all, with the same bytes. One broker is measured
before the cluster and again after it, and the faster run is the baseline, so the ratio is
not flattered by a slow moment. Then the takeover after a writer's kill -9 on the cluster
(``bench.scale_out.takeover``, over the history the cluster's run sealed). Before its
timed run the new cluster is warmed up by producing the same bytes once, untimed.

Every process shares the machine: the three brokers of the cluster run on the same 2 cores as
the writer, so the ratio says what replication costs here, not what three machines do.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BROKERS = 3


@contextlib.contextmanager
def three_brokers(say: Callable[[str], None] = lambda _m: None) -> Iterator[str]:
    """A cluster of :data:`BROKERS` KRaft nodes on free ports under a temporary root, for the
    ``with`` block; yields its bootstrap servers, then stops the nodes and removes the root."""
    from devstack import StackConfig, kafka

    root = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    cfg = StackConfig.on_free_ports(root, brokers=BROKERS)
    try:
        say(f"cluster: starting {BROKERS} Kafka brokers at {cfg.bootstrap}")
        t0 = time.monotonic()
        kafka.start(cfg)
        say(f"cluster: up in {time.monotonic() - t0:.1f} s")
        yield cfg.bootstrap
    finally:
        kafka.stop(cfg)
        shutil.rmtree(root, ignore_errors=True)


def seal_on(bootstrap: str, settings: Any, messages: list[tuple[bytes, bytes]],
            group: str) -> dict[str, Any]:
    """Pre-load ``messages`` into ``settings``' intake (timed: the plain producer), then
    time one writer (transactional id ``<group>-1``) sealing them all."""
    from bench.run import produce_all
    from bench.seal_rate import intake_end, start_writer, time_until_sealed
    from topics import ensure_topics

    # A cluster just started, on a machine that may be busy: its brokers' metadata can take
    # more than the default 30 s to list the topics just made (a fresh-clone `make test` run).
    ensure_topics(bootstrap, settings, timeout=120)
    n = len(messages)
    produced = produce_all(bootstrap, settings.names.intake, messages)
    ends = intake_end(bootstrap, settings)
    if sum(tp.offset for tp in ends) != n:
        raise RuntimeError(f"{settings.names.intake} does not hold the {n} captures")
    writer = start_writer(bootstrap, settings, {"transactional_id": f"{group}-1",
                                                "group_id": group})
    try:
        t0, t1 = time_until_sealed(bootstrap, writer, group, ends, timeout=1800)
    finally:
        writer.terminate(60)
    return {"replication_factor": settings.replication_factor, "captures": n,
            "seconds": round(t1 - t0, 2), "records_per_s": round(n / (t1 - t0)),
            "producer_records_per_s": round(n / produced)}


def warm_up(bootstrap: str, topic: str, partitions: int, messages: list[tuple[bytes, bytes]],
            say: Callable[[str], None]) -> None:
    """The same bytes produced once, untimed, to a topic of the new cluster's own: the broker
    the bench runs on has served for a while, a cluster just started has cold JVMs and
    allocates its first producer ids on the first producer's request."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from bench.run import produce_all

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, BROKERS)])[topic].result()
    say(f"cluster: warm-up, {produce_all(bootstrap, topic, messages):.1f} s untimed")


def _delete_topics(bootstrap: str, settings: Any) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_topics(list(settings.names.all()), operation_timeout=30).values():
        with contextlib.suppress(Exception):  # a topic that was never made
            f.result()


def measure(bootstrap: str, messages: list[tuple[bytes, bytes]], partitions: int, tag: str,
            say: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """One broker (``bootstrap``), three brokers, one broker again, over the same
    ``messages``; then the takeover on the three. See the module docstring."""
    from bench.scale_out import takeover
    from topics import TopicNames, TopicSettings

    def on_one(k: str) -> dict[str, Any]:
        settings = TopicSettings(names=TopicNames(f"{tag}b1{k}"), partitions=partitions)
        say(f"cluster: 1 broker ({k}), {len(messages)} captures")
        try:
            return {"when": k, **seal_on(bootstrap, settings, messages, f"{tag}-b1{k}")}
        finally:
            _delete_topics(bootstrap, settings)

    one = [on_one("before")]
    with three_brokers(say) as cluster:
        settings = TopicSettings(names=TopicNames(f"{tag}b3"), partitions=partitions,
                                 replication_factor=BROKERS)
        warm_up(cluster, f"{tag}b3.warm-up", partitions, messages, say)
        say(f"cluster: {BROKERS} brokers, {len(messages)} captures")
        three = seal_on(cluster, settings, messages, f"{tag}-b3")
        say("cluster: takeover after a writer's kill -9")
        took = takeover(cluster, settings, f"{tag}-b3", say)
    one.append(on_one("after"))
    best = max(one, key=lambda x: x["records_per_s"])
    return {"brokers": BROKERS, "one": one, "three": three, "takeover": took,
            "ratio": round(three["records_per_s"] / best["records_per_s"], 3),
            "producer_ratio": round(three["producer_records_per_s"]
                                    / max(x["producer_records_per_s"] for x in one), 3),
            "cores": os.cpu_count()}


def markdown(c: dict[str, Any]) -> list[str]:
    """Section 9 of the report."""
    from bench.scale_out import takeover_line

    lines = ["", f"## 9. Sealing on {c['brokers']} brokers beside 1 (same captures, same run)",
             "", f"One writer over the same pre-loaded captures on the bench's broker "
             f"(replication factor 1) before and after, and on a cluster of {c['brokers']} "
             f"KRaft brokers started for this section (replication factor {c['brokers']}, "
             f"`min.insync.replicas` 2), all on the same {c['cores']} cores (`bench.cluster`). "
             f"{c['brokers']} brokers / 1 (the faster run of 1): **{c['ratio']:.2f}×** the "
             f"writer's records/s, {c['producer_ratio']:.2f}× the plain producer's "
             f"(acks=all, the pre-load).", "",
             "| brokers | replication factor | writer records/s | seconds | plain producer "
             "records/s |", "|---|---|---|---|---|"]
    for name, x in [*((f"1 ({o['when']})", o) for o in c["one"]), (str(c["brokers"]), c["three"])]:
        lines.append(f"| {name} | {x['replication_factor']} | {x['records_per_s']:,} | "
                     f"{x['seconds']} | {x['producer_records_per_s']:,} |")
    line = takeover_line(c["takeover"])
    lines += ["", f"On {c['brokers']} brokers, {line}."]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap",
                    default=os.environ.get("EVIDENCE_KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    ap.add_argument("--captures", type=int, default=20_000)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--response-bytes", type=int, default=1024)
    args = ap.parse_args()

    from bench.run import make_messages

    messages = make_messages(args.captures, args.streams, args.response_bytes)
    result = measure(args.bootstrap, messages, args.partitions, f"bench{uuid.uuid4().hex[:8]}",
                     say=lambda m: print(f"[bench] {m}", file=sys.stderr, flush=True))
    print("\n".join(markdown(result)), file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
