"""Capture-to-queryable latency at a fixed offered rate, through the gateway's Recorder.

One stream per rate. The main thread hands synthetic finished exchanges (a chat request and a
1 KiB JSON response, as the capture transport would build them) to ``Recorder.submit`` on a
fixed schedule (open loop: a late submit does not delay the next) and notes when each was
sent. A poller process asks the API for the stream's head (``GET /streams/{s}``) every 2 ms
and notes when each seq first became visible. The Recorder keeps submit order and one stream
lives on one partition, so the i-th submit is seq i: its latency is the first time the head
reached i minus its send time (wall clock, shared by both processes). A poll's round trip
and pause (~3–5 ms) are included. Each latency is also split at the writer's seal
(``occurred_at``): send → sealed and sealed → visible.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

import httpx

from evidence_client import Recorder
from evidence_client.capture import Exchange
from evidence_contract import content_key, now_micros


def _exchange(stream: str, i: int, response: bytes) -> Exchange:
    request = json.dumps({"model": "bench", "messages": [{"role": "user", "content": f"q{i}"}]}).encode()
    t = now_micros()
    return Exchange(stream=stream, request_policy="VALUE", content_key=content_key(request),
                    request_bytes=request, url="http://127.0.0.1/v1/chat/completions",
                    host="127.0.0.1", path="/v1/chat/completions", started_at=t - 1000,
                    finished_at=t, duration_us=1000, status=200,
                    content_type="application/json", chunks=[response], eof=True)


def _poll(api_url: str, key: str, stream: str, n: int, stop: Any, results: Any) -> None:
    """In the poller process: note (wall time, head_seq) whenever the head moves."""
    seen: list[tuple[float, int]] = []
    head = 0
    with httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {key}"},
                      timeout=10) as client:
        client.get(f"/streams/{stream}")
        results.put("ready")
        while not stop.is_set() and head < n:
            r = client.get(f"/streams/{stream}")
            t = time.time()
            if r.status_code == 200:
                h = r.json()["head_seq"]
                if h > head:
                    head = h
                    seen.append((t, h))
            time.sleep(0.002)
    results.put(seen)


def _percentile(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return float("nan")
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


def measure(bootstrap: str, prefix: str, api_url: str, key: str, rate: float, seconds: float,
            spool_dir: Path, settle_s: float = 30.0) -> dict[str, Any]:
    stream = f"bench:lat-{int(rate)}"
    n = max(1, int(rate * seconds))
    text = "x" * 900
    response = json.dumps({"id": "bench", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}).encode()
    sent = [0.0] * n
    sent_wall_us = [0] * n
    # The poller is a process of its own: as a thread it would share this process's GIL with
    # the Recorder's sender thread and slow the very gateway being measured.
    ctx = multiprocessing.get_context("spawn")
    stop, results = ctx.Event(), ctx.Queue()
    poller = ctx.Process(target=_poll, args=(api_url, key, stream, n, stop, results),
                         name=f"poll-{stream}", daemon=True)
    poller.start()
    recorder = Recorder(bootstrap, stream, topic_prefix=prefix, spool_dir=spool_dir,
                        close_timeout=10)
    recorder.start()
    try:
        results.get(timeout=60)  # the poller is up and polling
        t0 = time.perf_counter()
        interval = 1.0 / rate
        for i in range(n):
            due = t0 + i * interval
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            ex = _exchange(stream, i, response)
            sent[i], sent_wall_us[i] = time.time(), now_micros()
            recorder.submit(ex)
        offered_s = time.perf_counter() - t0
        poller.join(settle_s)
    finally:
        stop.set()
        seen: list[tuple[float, int]] = results.get(timeout=30)
        poller.join(10)
        recorder.close(10)
    lat_ms: list[float] = []
    j = 0
    for i in range(n):  # seq i+1
        while j < len(seen) and seen[j][1] < i + 1:
            j += 1
        if j == len(seen):
            break
        lat_ms.append((seen[j][0] - sent[i]) * 1e3)
    sealed_ms, shown_ms = _stages(api_url, key, stream, sent_wall_us, seen)
    lat_ms.sort()
    return {"rate_offered": rate, "rate_achieved": round(n / offered_s, 1), "captures": n,
            "visible": len(lat_ms), "p50_ms": round(_percentile(lat_ms, 0.50), 1),
            "p95_ms": round(_percentile(lat_ms, 0.95), 1),
            "p99_ms": round(_percentile(lat_ms, 0.99), 1),
            "max_ms": round(lat_ms[-1], 1) if lat_ms else None,
            "send_to_sealed_ms": {"p50": round(_percentile(sealed_ms, 0.5), 1),
                                  "p99": round(_percentile(sealed_ms, 0.99), 1)},
            "sealed_to_visible_ms": {"p50": round(_percentile(shown_ms, 0.5), 1),
                                     "p99": round(_percentile(shown_ms, 0.99), 1)}}


def _stages(api_url: str, key: str, stream: str, sent_wall_us: list[int],
            seen: list[tuple[float, int]]) -> tuple[list[float], list[float]]:
    """Split each latency at the writer's seal (``occurred_at``, wall clock): send → sealed
    (gateway, intake, the writer's batch wait) and sealed → visible (commit, projector, API)."""
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
    return sorted(sealed), sorted(shown)
