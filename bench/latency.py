"""Capture-to-queryable latency at a fixed offered rate, through the gateway's Recorder.

The load comes from gateway processes, each a Recorder on a stream of its own: one up to
``PER_GATEWAY`` captures/s, and as many as that takes above it (one Python process's sender
thread encodes and spools a few thousand captures a second: a deployment taking 10k/s runs
several gateways too). Each hands synthetic finished exchanges (a chat request and a 1 KiB
JSON response, as the capture transport would build them) to ``Recorder.submit`` on a fixed
schedule (open loop: a late submit does not delay the next) and notes when each was sent. A
poller process follows each stream's head with a long poll, a thread a stream
(``GET /streams/{s}?after_seq=<head seen>&wait_ms=1000``: the API answers as soon as the live
projector's notice says the head moved, ``api.watch``), and notes when each seq first became
visible. A Recorder keeps submit order and one stream lives on one partition, so a stream's
i-th submit is its seq i: its latency is the first time the head reached i minus its send
time (wall clock, shared by the processes). The notice and the answer's round trip are
included. (Until 2026-12-02 the poller asked for every head in turn, pausing 2 ms after a
round: at 1k/s that polling, and the API answering it, kept 0.41 of the 2 cores busy.) Each
latency is also split at
the writer's seal (``occurred_at``): send → sealed and sealed → visible; and send → sealed at
the capture's hand-off to Kafka (its intake record's timestamp, which librdkafka sets when the
Recorder's sender calls ``produce``): send → produced (the gateway: the journal, the spool's
append and fsync) and produced → sealed (the producer's linger and send, the writer's fetch,
batch and transaction). ``rate_achieved`` is
what the gateways managed to submit; when it falls short of the offer the load generator,
not the pipeline, was the limit.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import threading
import time
from pathlib import Path
from typing import Any, Mapping

import httpx

from evidence_client import Recorder
from evidence_client.capture import Exchange
from evidence_contract import content_key, now_micros

from bench.services import autovacuum_runs, cpu_seconds, host_ticks, jit_seconds, steal_pct
from topics import TopicNames


def _request(i: int) -> bytes:
    """The application's request body of exchange ``i``."""
    return json.dumps({"model": "bench", "messages": [{"role": "user", "content": f"q{i}"}]}).encode()


def _exchange(stream: str, i: int, response: bytes, request: bytes | None = None) -> Exchange:
    """Exchange ``i`` as the Recorder's transport hands it over: the request body (made by
    :func:`_request` unless given), its content key, the response."""
    if request is None:
        request = _request(i)
    t = now_micros()
    return Exchange(stream=stream, request_policy="VALUE", content_key=content_key(request),
                    request_bytes=request, url="http://127.0.0.1/v1/chat/completions",
                    host="127.0.0.1", path="/v1/chat/completions", started_at=t - 1000,
                    finished_at=t, duration_us=1000, status=200,
                    content_type="application/json", chunks=[response], eof=True)


LOOP_S = 1.0
"""Seconds each gateway first runs its open loop alone, to measure what the loop itself costs
(:func:`_generate`)."""

PER_GATEWAY = 2000.0
"""Captures/s one gateway process offers at most; above it the load is split."""


def _poll(api_url: str, key: str, streams: list[str], n: int, stop: Any, results: Any,
          start_at: float = 0.0) -> None:
    """In the poller process: per stream, note (wall time, head_seq) whenever the head moves;
    put them, and the CPU seconds the poller used from ``start_at`` on."""
    seen: dict[str, list[tuple[float, int]]] = {s: [] for s in streams}
    headers = {"Authorization": f"Bearer {key}"}

    def follow(stream: str) -> None:
        head = 0
        with httpx.Client(base_url=api_url, headers=headers, timeout=10) as client:
            while not stop.is_set() and head < n:
                r = client.get(f"/streams/{stream}",
                               params={"after_seq": head, "wait_ms": WAIT_MS})
                t = time.time()
                if r.status_code == 200:
                    h = r.json()["head_seq"]
                    if h > head:
                        head = h
                        seen[stream].append((t, h))
                else:  # 404 until the stream's first record: no head to wait on yet
                    time.sleep(0.002)

    with httpx.Client(base_url=api_url, headers=headers, timeout=10) as client:
        for s in streams:
            client.get(f"/streams/{s}")
    threads = [threading.Thread(target=follow, args=(s,), daemon=True) for s in streams]
    for t in threads:
        t.start()
    results.put("ready")
    time.sleep(max(0.0, start_at - time.time()))
    cpu0 = time.process_time()  # every thread's
    for t in threads:
        t.join()
    results.put((seen, time.process_time() - cpu0))


WAIT_MS = 1000
"""The poller's long-poll wait; the API answers sooner whenever the head moves."""


def _pace(rate: float, n: int, work: Any = None) -> tuple[list[float], list[int], float]:
    """``n`` turns of the gateway's open loop at ``rate``: wait for the turn's due time, note
    its send times (wall, and wall µs), call ``work(i)`` if given; returns the send times
    and the seconds the turns took."""
    sent = [0.0] * n
    sent_wall_us = [0] * n
    t0 = time.perf_counter()
    interval = 1.0 / rate
    for i in range(n):
        due = t0 + i * interval
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        sent[i], sent_wall_us[i] = time.time(), now_micros()
        if work is not None:
            work(i)
    return sent, sent_wall_us, time.perf_counter() - t0


def _generate(bootstrap: str, prefix: str, stream: str, rate: float, n: int,
              spool_dir: str, start_at: float, results: Any,
              recorder_options: Mapping[str, Any] | None = None,
              loop_s: float = 0.0) -> None:
    """In a gateway process: submit ``n`` exchanges at ``rate`` from wall time ``start_at``;
    put (stream, sent wall times, sent wall µs, offered seconds, CPU seconds, the loop's
    own CPU seconds a turn or None). ``recorder_options``: more arguments for the Recorder.

    ``loop_s`` > 0: first, before the Recorder exists, the same open loop runs alone for
    that long at ``rate`` (its waits and send-time notes, no exchange, no capture), and the
    CPU it used a turn is put too: what the bench's synthetic application costs its own
    process, which a gateway's CPU a capture must not count as capture's."""
    json_text = "x" * 900
    response = json.dumps({"id": "bench", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": json_text},
         "finish_reason": "stop"}]}).encode()
    # The application's request bodies, made before the clock starts: a gateway already holds
    # the bytes it sends, so their json.dumps is not capture's cost (~8 % of this process's
    # CPU a capture at 2,000/s: docs/performance.md, "The gateway's own CPU").
    requests = [_request(i) for i in range(n)]
    loop_cpu = None
    if loop_s > 0:
        turns = max(20, int(rate * loop_s))
        cpu0 = time.thread_time()  # this thread's alone: the loop runs on it
        _pace(rate, turns)
        loop_cpu = (time.thread_time() - cpu0) / turns
    recorder = Recorder(bootstrap, stream, topic_prefix=prefix, spool_dir=Path(spool_dir),
                        close_timeout=10, **dict(recorder_options or {}))
    recorder.start()
    try:
        results.put(("ready", stream))
        time.sleep(max(0.0, start_at - time.time()))
        cpu0 = time.process_time()  # every thread: the sender's, librdkafka's

        def capture(i: int) -> None:
            recorder.submit(_exchange(stream, i, response, requests[i]))

        sent, sent_wall_us, offered_s = _pace(rate, n, capture)
    finally:
        recorder.close(10)
    results.put((stream, sent, sent_wall_us, offered_s, time.process_time() - cpu0, loop_cpu))


def _percentile(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return float("nan")
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


def measure(bootstrap: str, prefix: str, api_url: str, key: str, rate: float, seconds: float,
            spool_dir: Path, settle_s: float = 30.0,
            cpu_pids: Mapping[str, int] | None = None,
            database_url: str | None = None) -> dict[str, Any]:
    """One rate; see the module docstring. ``cpu_pids`` (a name per process tree: writer,
    projector, api, kafka, postgres) adds ``cpu_us_per_capture``: what each used from the
    gateways' start to the end of the settle, per capture sent, beside the gateways' own and
    the poller's, and ``cores_busy``, all of it over that wall time: the machine's demand;
    ``steal_pct``, how much of the cores' time over it the hypervisor gave to other guests;
    ``jit_us_per_capture``, how much of the broker's (``cpu_pids["kafka"]``) went to its JVM's
    JIT compiler threads (``bench.services.jit_seconds``). ``database_url`` adds
    ``autovacuum_runs``: the tables autovacuum vacuumed or analysed over the same window, whose
    work PostgreSQL's figure then includes."""
    gateways = max(1, math.ceil(rate / PER_GATEWAY))
    per = rate / gateways
    n = max(1, int(per * seconds))  # per gateway
    streams = [f"bench:lat-{int(rate)}-{g}" for g in range(gateways)]
    intake = TopicNames(prefix).intake
    intake_from = _ends(bootstrap, intake)  # this rate's captures are all past these
    # Each a process of its own: as threads they would share one GIL with the Recorders'
    # sender threads and slow the very gateways being measured.
    ctx = multiprocessing.get_context("spawn")
    stop, polled, made = ctx.Event(), ctx.Queue(), ctx.Queue()
    # Every gateway started, its loop measured alone (LOOP_S) and its Recorder connected.
    start_at = time.time() + 3.0 + LOOP_S + 0.2 * gateways
    poller = ctx.Process(target=_poll, args=(api_url, key, streams, n, stop, polled, start_at),
                         name=f"poll-{int(rate)}", daemon=True)
    poller.start()
    procs = [ctx.Process(target=_generate, args=(bootstrap, prefix, s, per, n,
                                                 str(spool_dir / s.replace(":", "_")),
                                                 start_at, made, None, LOOP_S),
                         name=f"gateway-{s}", daemon=True) for s in streams]
    for p in procs:
        p.start()
    sent: dict[str, tuple[list[float], list[int], float]] = {}
    seen: dict[str, list[tuple[float, int]]] = {}
    gateway_cpu, loop_cpu, wall = 0.0, 0.0, float("nan")
    jit0 = jit1 = vac0 = vac1 = None
    host0 = host1 = None
    cpu0: dict[str, float | None] = {}
    cpu1: dict[str, float | None] = {}
    try:
        polled.get(timeout=60)  # the poller is up and polling
        for _ in procs:
            made.get(timeout=60)  # each gateway's Recorder is up
        time.sleep(max(0.0, start_at - time.time()))
        wall0, host0 = time.monotonic(), host_ticks()
        cpu0 = {name: cpu_seconds(pid) for name, pid in (cpu_pids or {}).items()}
        jit0 = jit_seconds(cpu_pids["kafka"]) if cpu_pids and "kafka" in cpu_pids else None
        vac0 = autovacuum_runs(database_url) if database_url else None
        for _ in procs:
            stream, times, wall_us, offered_s, used, loop = made.get(timeout=seconds * 10 + 120)
            sent[stream] = (times, wall_us, offered_s)
            gateway_cpu += used
            loop_cpu += min(used, loop * len(times))
        poller.join(settle_s)
        cpu1 = {name: cpu_seconds(pid) for name, pid in (cpu_pids or {}).items()}
        jit1 = jit_seconds(cpu_pids["kafka"]) if jit0 is not None else None
        vac1 = autovacuum_runs(database_url) if vac0 is not None else None
        wall, host1 = time.monotonic() - wall0, host_ticks()
    finally:
        stop.set()
        poller_cpu = None
        try:
            seen, poller_cpu = polled.get(timeout=30)
        finally:
            poller.join(10)
            for p in procs:
                p.join(30)
    lat_ms: list[float] = []
    sealed_ms: list[float] = []
    shown_ms: list[float] = []
    produced_ms: list[float] = []
    after_ms: list[float] = []
    arrived = _arrivals(bootstrap, intake, intake_from, streams)
    for stream in streams:
        times, wall_us, _ = sent.get(stream, ([], [], 0.0))
        got = seen.get(stream, [])
        j = 0
        for i in range(len(times)):  # seq i+1
            while j < len(got) and got[j][1] < i + 1:
                j += 1
            if j == len(got):
                break
            lat_ms.append((got[j][0] - times[i]) * 1e3)
        a, b, occurred = _stages(api_url, key, stream, wall_us, got)
        sealed_ms += a
        shown_ms += b
        k, w = _hand_off(wall_us, arrived.get(stream, []), occurred)
        produced_ms += k
        after_ms += w
    for xs in (lat_ms, sealed_ms, shown_ms, produced_ms, after_ms):
        xs.sort()
    offered_s = max((v[2] for v in sent.values()), default=0.0) or float("nan")
    total = n * gateways
    # The gateways' CPU less what their synthetic application's own loop costs alone (its
    # waits for each turn and its notes of the send times, ~20 µs a turn at 1,700/s here):
    # what capture costs the application's process. The loop's share is a column of its own.
    used = {"gateways": gateway_cpu - loop_cpu, "app_loop": loop_cpu}
    if poller_cpu is not None:
        used["poller"] = poller_cpu
    for name, before in cpu0.items():
        after = cpu1.get(name)
        if before is not None and after is not None:
            used[name] = after - before
    cpu = {}
    if cpu_pids:
        cpu = {"cpu_us_per_capture": {k: round(v / total * 1e6, 1) for k, v in used.items()},
               "cores_busy": round(sum(used.values()) / wall, 2),
               "cpu_window_s": round(wall, 1), "steal_pct": steal_pct(host0, host1)}
        if jit0 is not None and jit1 is not None:
            cpu["jit_us_per_capture"] = {"kafka": round((jit1 - jit0) / total * 1e6, 1)}
    if vac0 is not None and vac1 is not None:
        cpu["autovacuum_runs"] = vac1 - vac0
    return {**cpu, "rate_offered": rate, "rate_achieved": round(total / offered_s, 1),
            "gateways": gateways, "captures": total,
            "visible": len(lat_ms), "p50_ms": round(_percentile(lat_ms, 0.50), 1),
            "p95_ms": round(_percentile(lat_ms, 0.95), 1),
            "p99_ms": round(_percentile(lat_ms, 0.99), 1),
            "max_ms": round(lat_ms[-1], 1) if lat_ms else None,
            "send_to_sealed_ms": _p50_p99(sealed_ms),
            "sealed_to_visible_ms": _p50_p99(shown_ms),
            "send_to_produced_ms": _p50_p99(produced_ms),
            "produced_to_sealed_ms": _p50_p99(after_ms)}


def _p50_p99(sorted_ms: list[float]) -> dict[str, float | None]:
    """p50 and p99 of ``sorted_ms`` (None for an empty list: a split not measured)."""
    if not sorted_ms:
        return {"p50": None, "p99": None}
    return {"p50": round(_percentile(sorted_ms, 0.5), 1),
            "p99": round(_percentile(sorted_ms, 0.99), 1)}


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's end offset of ``topic`` now: where the next captures land."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-latency-ends",
                  "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=30).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in parts}
    finally:
        c.close()


def _arrivals(bootstrap: str, topic: str, start: Mapping[int, int],
              streams: list[str]) -> dict[str, list[int]]:
    """For each of ``streams``, the timestamps (ms) of its intake records from ``start`` on,
    in log order: when its Recorder produced each capture (librdkafka stamps a record when
    ``produce`` is called; the topics keep that CreateTime). Only the keys are read, no value
    is decoded."""
    from confluent_kafka import Consumer, TopicPartition

    wanted = {s.encode(): s for s in streams}
    out: dict[str, list[int]] = {s: [] for s in streams}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-latency-arrivals",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in start}
        todo = {p for p in start if ends[p] > start[p]}
        c.assign([TopicPartition(topic, p, start[p]) for p in todo])
        deadline = time.monotonic() + 120
        while todo and time.monotonic() < deadline:
            for m in c.consume(10_000, 1.0):
                if m.error() is not None:
                    continue  # end of a partition: its end offset below says it is done
                stream = wanted.get(m.key() or b"")
                if stream is not None:
                    out[stream].append(m.timestamp()[1])
                if m.offset() >= ends[m.partition()] - 1:
                    todo.discard(m.partition())
    finally:
        c.close()
    return out


def _hand_off(sent_wall_us: list[int], arrived_ms: list[int],
              occurred: Mapping[int, int]) -> tuple[list[float], list[float]]:
    """Split send → sealed at each capture's hand-off to Kafka: (send → produced, produced →
    sealed) in ms. A Recorder produces a stream's captures in submit order (idempotent, one
    partition), so its i-th intake record is its seq i+1; a stream whose intake count is not
    its count sent (a capture produced twice after a retry) is left out rather than misread."""
    if len(arrived_ms) != len(sent_wall_us):
        return [], []
    to_kafka, to_sealed = [], []
    for i, (sent_us, at_ms) in enumerate(zip(sent_wall_us, arrived_ms)):
        to_kafka.append(at_ms - sent_us / 1e3)
        occ = occurred.get(i + 1)
        if occ is not None:
            to_sealed.append(occ / 1e3 - at_ms)
    return to_kafka, to_sealed


def _stages(api_url: str, key: str, stream: str, sent_wall_us: list[int],
            seen: list[tuple[float, int]]) -> tuple[list[float], list[float], dict[int, int]]:
    """Split each latency at the writer's seal (``occurred_at``, wall clock): send → sealed
    (gateway, intake, the writer's batch wait) and sealed → visible (commit, projector, API);
    and each seq's ``occurred_at`` (µs)."""
    occurred: dict[int, int] = {}
    after = 0
    with httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
        while True:
            r = c.get(f"/streams/{stream}/records", params={"after_seq": after, "limit": 1000})
            if r.status_code != 200:
                break
            page = r.json()
            for rec in page["records"]:
                occurred[rec["seq"]] = rec["occurred_at_us"]
            if page.get("next_after_seq") is None:
                break
            after = page["next_after_seq"]
    sealed, shown = [], []
    j = 0
    for i in range(len(sent_wall_us)):
        while j < len(seen) and seen[j][1] < i + 1:
            j += 1
        if j == len(seen) or (i + 1) not in occurred:
            break
        occ = occurred[i + 1]
        sealed.append((occ - sent_wall_us[i]) / 1e3)
        shown.append((seen[j][0] * 1e6 - occ) / 1e3)
    return sorted(sealed), sorted(shown), occurred
