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

Then the takeover (:func:`takeover`): two writers with the writer's default timeouts on the
2-writer run's topics (so a restore reads that run's history), under a steady load of
``TAKEOVER_RATE`` captures/s on every partition; one is killed -9, and the takeover is the
time from the kill until a read_committed reader of the log has seen, on every partition the
dead writer owned, a record sealed by the survivor. What bounds it (docs/sizing.md,
"Scale-out"): the session timeout, the dead writer's open transaction (aborted at the
transaction timeout plus the broker's abort check), then the survivor's restore; the
survivor's ``assigned`` event says how long it waited for stable offsets and how long it
restored. Every capture sent is then checked sealed once.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

COUNTS = (1, 2)
SESSION_TIMEOUT_MS = 60_000
TAKEOVER_RATE = 200  # captures/s during the takeover, over every partition
TAKEOVER_DEADLINE_S = 300.0


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


class _Feeder(threading.Thread):
    """Captures to intake at ``rate`` a second over ``streams`` until stopped; their event
    ids in ``sent``, in order, and in ``ids``, each added before its capture is produced."""

    def __init__(self, bootstrap: str, settings: Any, streams: list[str], rate: float) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.settings, self.streams, self.rate = bootstrap, settings, streams, rate
        self.sent: list[str] = []
        self.ids: set[str] = set()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import Producer

        from tests.fixtures.writer import encode_capture, make_capture

        try:
            p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                          "acks": "all", "linger.ms": 5, "partitioner": "murmur2_random"})
            t0, i = time.monotonic(), 0
            while not self.stop.is_set():
                e = make_capture(self.streams[i % len(self.streams)])
                self.ids.add(e["event_id"])
                p.produce(self.settings.names.intake, encode_capture(e), e["stream"].encode())
                self.sent.append(e["event_id"])
                i += 1
                p.poll(0)
                ahead = t0 + i / self.rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            if p.flush(60) != 0:
                raise RuntimeError("the takeover load was not all delivered")
        except BaseException as e:  # noqa: BLE001 - re-raised by finish()
            self.error = e

    def finish(self) -> list[str]:
        self.stop.set()
        self.join(90)
        if self.error is not None:
            raise self.error
        return self.sent


class _LogWatch:
    """A read_committed reader of the log from its end that looks only at the load's records
    (event ids in ``load``): when each was seen, per partition and transactional id, and
    every load event id sealed, in the order read.

    Only the load's: the writers of a takeover have the transactional ids of the run before
    it on the same topics, whose last transaction can become readable after this reader has
    taken the log's end (its markers land on a partition after the offsets it committed were
    seen, most often on a busy cluster). Taken for the load, such a record said a writer had
    sealed before the load started, and a wait for one after it never ended (a CI run)."""

    def __init__(self, bootstrap: str, settings: Any, load: set[str]) -> None:
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watch-{uuid.uuid4().hex}",
                           "isolation.level": "read_committed", "enable.auto.commit": False,
                           "fetch.wait.max.ms": 10})
        self.c.assign([TopicPartition(settings.names.log, p, OFFSET_END)
                       for p in range(settings.partitions)])
        self.load = load
        self.seen: dict[tuple[int, str], list[float]] = {}
        self.sealed: list[str] = []
        self.unique: set[str] = set()  # of ``sealed``: what the waits ask about, kept as read

    def poll(self, seconds: float) -> None:
        from evidence_contract import split_record

        for m in self.c.consume(1000, seconds):
            if m.error() is not None:
                continue
            _body, rec = split_record(m.value())
            self.note(m.partition(), rec["body"]["event_id"],
                      rec["seal"]["writer"]["transactional_id"], time.time())

    def note(self, partition: int, event_id: str, transactional_id: str, at: float) -> None:
        """A record read at ``at``; kept only if it is the load's."""
        if event_id not in self.load:
            return
        self.sealed.append(event_id)
        self.unique.add(event_id)
        self.seen.setdefault((partition, transactional_id), []).append(at)

    def first_since(self, partition: int, transactional_id: str, since: float) -> float | None:
        """When this reader first saw a load record of ``transactional_id`` on ``partition``
        at or after ``since``; None if it has not."""
        times = self.seen.get((partition, transactional_id), [])
        k = bisect.bisect_left(times, since)
        return times[k] if k < len(times) else None

    def close(self) -> None:
        self.c.close()


def _spread_streams(partitions: int, per_partition: int = 2) -> list[str]:
    from evidence_contract.topics import partition_for

    out: dict[int, list[str]] = {p: [] for p in range(partitions)}
    i = 0
    while any(len(v) < per_partition for v in out.values()):
        s, i = f"bench:t-{i}", i + 1
        if len(out[partition_for(s, partitions)]) < per_partition:
            out[partition_for(s, partitions)].append(s)
    return [s for v in out.values() for s in v]


def _takeover_state(writers: list[Any], ids: list[str], feeder: _Feeder,
                    watch: _LogWatch) -> str:
    """What a takeover that ran out of time had seen, for its error: each writer's
    assignment, the partitions on which the log reader saw it seal, the load sent and
    sealed, and the end of each writer's log."""
    seen = {k: sorted(p for (p, t) in watch.seen if t == ids[k]) for k in range(len(ids))}
    parts = [f"{len(feeder.sent)} captures sent, {len(watch.unique)} of them read sealed"]
    for k, w in enumerate(writers):
        parts.append(f"writer {ids[k]} (alive: {w.alive()}) owns {sorted(_assignment(w) or ())}, "
                     f"seen sealing on {seen[k]}; its log ends:\n{w.output()[-3000:]}")
    return "\n".join(parts)


def takeover(bootstrap: str, settings: Any, group: str, say=lambda _m: None,
             rate: float = TAKEOVER_RATE) -> dict[str, Any]:
    """Two writers (transactional ids ``<group>-1`` and ``-2``, the writer's default
    timeouts) on ``settings``' topics under ``rate`` captures/s; kill -9 of the first; see
    the module docstring. Returns the seconds from the kill to the survivor's assignment and
    to its first record on each dead partition, the survivor's stable-offsets wait and
    restore, and the captures lost and duplicated."""
    from tests.fixtures.writer import WriterProcess, writer_env

    ids = [f"{group}-1", f"{group}-2"]
    writers = [WriterProcess([sys.executable, "-m", "cli.main", "writer"],
                             writer_env(bootstrap, settings, transactional_id=t, group_id=group))
               for t in ids]
    feeder = _Feeder(bootstrap, settings, _spread_streams(settings.partitions), rate)
    watch = _LogWatch(bootstrap, settings, feeder.ids)
    try:
        deadline = time.monotonic() + TAKEOVER_DEADLINE_S

        def step(what: str, alive: list[Any]) -> None:
            for w in alive:
                w.assert_alive()
            if feeder.error is not None:
                raise RuntimeError(f"takeover: the load failed: {feeder.error!r}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"takeover: {what} not in {TAKEOVER_DEADLINE_S:.0f} s; "
                                   + _takeover_state(writers, ids, feeder, watch))
            watch.poll(0.05)

        while not _settled(writers, settings.partitions):
            step("two writers settled", writers)
        feeder.start()
        t_load = time.time()

        def both_sealing() -> bool:
            # Settled still (a rebalance since moves the partitions each must be seen on),
            # and each seen sealing the load on every partition it owns.
            return _settled(writers, settings.partitions) and all(
                watch.first_since(p, ids[k], t_load) is not None
                for k, w in enumerate(writers) for p in _assignment(w) or ())

        while not both_sealing():
            step("both writers sealing the load", writers)
        dead, survivor = writers
        dead_parts = sorted(_assignment(dead) or ())
        say(f"takeover: kill -9 the writer of partitions {dead_parts} under {rate:g} captures/s")
        os.kill(dead.pid, signal.SIGKILL)
        t_kill = time.time()
        dead.wait(30)
        while not all(watch.first_since(p, ids[1], t_kill) is not None for p in dead_parts):
            step("the survivor sealing the dead writer's partitions", [survivor])
        sealed_at = max(watch.first_since(p, ids[1], t_kill) or t_kill for p in dead_parts)
        sent = feeder.finish()
        sent_ids = set(sent)  # once: the wait below would rebuild both sets every poll
        while not sent_ids <= watch.unique:
            step("every capture sent sealed", [survivor])
        took = next(e for e in survivor.events() if e.get("event") == "assigned"
                    and e["ts"] >= t_kill and set(dead_parts) <= set(e.get("partitions") or ()))
        return {"partitions": settings.partitions, "dead_partitions": dead_parts,
                "rate": rate, "takeover_s": round(sealed_at - t_kill, 2),
                "assigned_s": round(took["ts"] - t_kill, 2),
                "offsets_wait_s": took.get("offsets_wait_s"), "restore_s": took.get("restore_s"),
                "restored": sorted(set(took["partitions"]) - set(took.get("kept") or ())),
                "sent": len(sent), "lost": len(sent_ids - watch.unique),
                "duplicated": len(watch.sealed) - len(watch.unique)}
    finally:
        feeder.stop.set()
        watch.close()
        for w in writers:
            if w.alive():
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
        say("scale-out: takeover after a writer's kill -9")
        took = takeover(bootstrap, made[-1], f"{tag}-w{COUNTS[-1]}", say)
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
            "cores": os.cpu_count(), "takeover": took}


def takeover_line(t: dict[str, Any]) -> str:
    return (f"takeover after kill -9: {t['takeover_s']} s to the survivor's first record on "
            f"each of partitions {t['dead_partitions']} (assigned at {t['assigned_s']} s: "
            f"stable offsets {t['offsets_wait_s']} s, restore {t['restore_s']} s of "
            f"partitions {t.get('restored')}); "
            f"{t['sent']} captures at {t['rate']:g}/s, {t['lost']} lost, "
            f"{t['duplicated']} duplicated")


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
    print(takeover_line(result["takeover"]), file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
