"""What capture adds to a model call as the application sees it (section 8 of ``make bench``).

The official openai SDK calls a local fake provider (``testing.fake_provider``, served by a
process of its own so it does not share the callers' interpreter) twice over: through a
Recorder's client (``Recorder.http_client()`` / ``async_http_client()``) and through the same
SDK on a bare ``httpx2`` client with the same connection limits. The two alternate in blocks
(each worker makes ``block`` calls with one, then ``block`` with the other), so drift of the
shared machine hits both. Measured for each durability mode of the Recorder
(``docs/capture.md``), sync (threads) and async (tasks on one loop), plain and streamed, at
1, 16 and 64 concurrent callers: the latency of each call (``create`` to the parsed
response; for a stream, to its first content chunk and to the end of the iteration), p50 and
p99, and what capture added to each (captured minus bare, at the same percentile).

    python -m bench.call_overhead [--quick] [--calls N]

The Recorder produces to an intake topic of its own (``<prefix>.intake``, deleted after);
nothing consumes it.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODES: list[tuple[str, dict[str, Any]]] = [
    ("before_return (default)", {}),
    ("before_return, group_commit_ms=2", {"group_commit_ms": 2.0}),
    ("after_return", {"durability": "after_return"}),
]
"""The Recorder settings compared, each beside the bare client (``docs/capture.md``)."""

CONCURRENCY = (1, 16, 64)
LONE_CALLS = 5
"""A lone caller's rows make this many times ``calls`` a side: cheap (a call takes a
millisecond or two) and their p99 is the figure the target is set on, so it is 20 calls deep
at the default 400 rather than 4 (a 400-call p99 of the difference moved by ±0.5 ms between
runs of the same code)."""
PROMPT = "how long does capture make me wait?"
"""The fake echoes it: ~40 characters of answer, a dozen SSE chunks when streamed."""


def _serve(conn: Any) -> None:
    """In a process of its own: a fake provider until the pipe closes."""
    import os

    from testing.fake_provider import FakeProvider

    # Callers that close a kept-alive connection make the server print a traceback each.
    sys.stderr = open(os.devnull, "w")
    with FakeProvider() as fake:
        conn.send(fake.url)
        try:
            conn.recv()
        except EOFError:
            pass


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def _stats(ms: list[float]) -> dict[str, float]:
    return {"p50": round(_percentile(ms, 0.5), 3), "p99": round(_percentile(ms, 0.99), 3),
            "mean": round(statistics.fmean(ms), 3), "n": len(ms)}


# -- one call -----------------------------------------------------------------------------------

def _sync_call(client: Any, stream: bool) -> tuple[float, float | None]:
    """(ms to the end, ms to the first content chunk or None) of one call."""
    t0 = time.perf_counter()
    first = None
    if stream:
        for chunk in client.chat.completions.create(
                model="bench", messages=[{"role": "user", "content": PROMPT}], stream=True):
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter()
    else:
        client.chat.completions.create(model="bench",
                                       messages=[{"role": "user", "content": PROMPT}])
    end = time.perf_counter()
    return (end - t0) * 1000, None if first is None else (first - t0) * 1000


async def _async_call(client: Any, stream: bool) -> tuple[float, float | None]:
    t0 = time.perf_counter()
    first = None
    if stream:
        async for chunk in await client.chat.completions.create(
                model="bench", messages=[{"role": "user", "content": PROMPT}], stream=True):
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter()
    else:
        await client.chat.completions.create(model="bench",
                                             messages=[{"role": "user", "content": PROMPT}])
    end = time.perf_counter()
    return (end - t0) * 1000, None if first is None else (first - t0) * 1000


# -- alternating blocks -------------------------------------------------------------------------

Samples = dict[str, dict[str, list[float]]]  # side -> "last"/"first" -> ms


def _empty() -> Samples:
    return {side: {"last": [], "first": []} for side in ("captured", "bare")}


def _note(samples: Samples, side: str, got: tuple[float, float | None]) -> None:
    samples[side]["last"].append(got[0])
    if got[1] is not None:
        samples[side]["first"].append(got[1])


def _order(r: int) -> tuple[str, str]:
    """The sides of round ``r``: each goes first in every other round."""
    return ("captured", "bare") if r % 2 == 0 else ("bare", "captured")


def _run_sync(clients: dict[str, Any], stream: bool, workers: int, rounds: int,
              block: int) -> Samples:
    """``workers`` threads; in each block all of them call through the same side."""
    samples = _empty()
    lock = threading.Lock()
    barrier = threading.Barrier(workers)

    def work() -> None:
        for r in range(rounds):
            for side in _order(r):
                barrier.wait()
                for _ in range(block):
                    got = _sync_call(clients[side], stream)
                    with lock:
                        _note(samples, side, got)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples


async def _run_async(clients: dict[str, Any], stream: bool, workers: int, rounds: int,
                     block: int) -> Samples:
    """``workers`` tasks on this loop; in each block all of them call through the same side."""
    samples = _empty()

    async def work(side: str) -> None:
        for _ in range(block):
            _note(samples, side, await _async_call(clients[side], stream))

    for r in range(rounds):
        for side in _order(r):
            await asyncio.gather(*(work(side) for _ in range(workers)))
    return samples


def _summary(samples: Samples, stream: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for what in ("last", "first") if stream else ("last",):
        c, b = _stats(samples["captured"][what]), _stats(samples["bare"][what])
        out[what] = {"captured": c, "bare": b,
                     "added_p50_ms": round(c["p50"] - b["p50"], 3),
                     "added_p99_ms": round(c["p99"] - b["p99"], 3)}
    return out


# -- one mode -----------------------------------------------------------------------------------

def _clients(recorder: Any, url: str, asynchronous: bool) -> dict[str, Any]:
    """The SDK on the Recorder's client and on a bare one, with the same limits."""
    import httpx2
    import openai

    limits = httpx2.Limits(max_connections=128, max_keepalive_connections=128)
    if asynchronous:
        http = {"captured": recorder.async_http_client(limits=limits),
                "bare": httpx2.AsyncClient(limits=limits, follow_redirects=True)}
        sdk = openai.AsyncOpenAI
    else:
        http = {"captured": recorder.http_client(limits=limits),
                "bare": httpx2.Client(limits=limits, follow_redirects=True)}
        sdk = openai.OpenAI
    return {side: sdk(base_url=url + "/v1", api_key="bench", max_retries=0, timeout=30,
                      http_client=h) for side, h in http.items()}


def _levels(calls: int, block: int,
            levels: tuple[int, ...]) -> list[tuple[bool, int, int, int]]:
    """(stream, callers, block, rounds) of each row: about ``calls`` calls a side at every
    level (:data:`LONE_CALLS` times that for one caller), fewer a block with more callers, at
    least two rounds (each side first once)."""
    out = []
    for stream in (False, True):
        for c in levels:
            n = calls * LONE_CALLS if c == 1 else calls
            b = max(1, min(block, n // (2 * c)))
            out.append((stream, c, b, max(2, round(n / (c * b)))))
    return out


def _row(asynchronous: bool, stream: bool, c: int, samples: Samples,
         say: Callable[[str], None]) -> dict[str, Any]:
    row = {"sync": "async" if asynchronous else "sync", "stream": stream, "concurrency": c,
           **_summary(samples, stream)}
    say(f"  {row['sync']} {'streamed' if stream else 'plain'} c={c}: "
        f"+{row['last']['added_p50_ms']} ms p50, +{row['last']['added_p99_ms']} ms p99")
    return row


def _sync_rows(recorder: Any, url: str, calls: int, block: int, levels: tuple[int, ...],
               say: Callable[[str], None]) -> list[dict[str, Any]]:
    clients = _clients(recorder, url, False)
    rows = []
    try:
        for stream, c, b, rounds in _levels(calls, block, levels):
            _run_sync(clients, stream, c, 1, 1)  # warm both sides' connections first
            rows.append(_row(False, stream, c, _run_sync(clients, stream, c, rounds, b), say))
    finally:
        for client in clients.values():
            client.close()
    return rows


async def _async_rows(recorder: Any, url: str, calls: int, block: int, levels: tuple[int, ...],
                      say: Callable[[str], None]) -> list[dict[str, Any]]:
    clients = _clients(recorder, url, True)
    rows = []
    try:
        for stream, c, b, rounds in _levels(calls, block, levels):
            await _run_async(clients, stream, c, 1, 1)
            samples = await _run_async(clients, stream, c, rounds, b)
            rows.append(_row(True, stream, c, samples, say))
    finally:
        for client in clients.values():
            await client.close()
    return rows


def _measure_mode(bootstrap: str, prefix: str, spool: Path, url: str, settings: dict[str, Any],
                  calls: int, block: int, levels: tuple[int, ...],
                  say: Callable[[str], None]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    from evidence_client import Recorder

    recorder = Recorder(bootstrap, "bench:overhead", topic_prefix=prefix, spool_dir=spool,
                        close_timeout=30, **settings)
    recorder.start()
    try:
        rows = _sync_rows(recorder, url, calls, block, levels, say)
        rows += asyncio.run(_async_rows(recorder, url, calls, block, levels, say))
    finally:
        recorder.close()
    return rows, recorder.metrics.snapshot()


# -- the section --------------------------------------------------------------------------------

def measure(bootstrap: str, prefix: str, *, calls: int, block: int = 10,
            modes: list[tuple[str, dict[str, Any]]] | None = None,
            levels: tuple[int, ...] = CONCURRENCY,
            say: Callable[[str], None] = print,
            database_url: str | None = None) -> dict[str, Any]:
    """Every mode of ``modes`` (default :data:`MODES`) at every level of ``levels`` (callers),
    ~``calls`` calls a side and level; returns the rows with the fsync time of this disk
    beside them. The disk is settled first (:func:`bench.services.settle_disk`, with a
    PostgreSQL checkpoint when ``database_url`` is given), as before every other timed
    section: a call waits for its fsync, and writeback left by whatever ran before (a stack
    just made, an earlier run's topics deleted) would be in its figures."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from bench.services import settle_disk

    topic = f"{prefix}.intake"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result()
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=_serve, args=(child,), daemon=True)
    server.start()
    out: dict[str, Any] = {"calls": calls, "block": block, "modes": []}
    try:
        url = parent.recv()
        with tempfile.TemporaryDirectory(prefix="bench-overhead-") as d:
            out["settled"] = settle_disk(database_url)
            out["fsync_ms"] = _fsync_ms(Path(d))
            for name, settings in modes or MODES:
                say(f"call overhead, durability {name}")
                rows, counts = _measure_mode(bootstrap, prefix, Path(d) / "spool", url,
                                             settings, calls, block, levels, say)
                out["modes"].append({"name": name, "settings": settings, "rows": rows,
                                     "recorder": counts})
    finally:
        parent.close()
        server.join(10)
        if server.is_alive():
            server.terminate()
        for f in admin.delete_topics([topic], operation_timeout=30).values():
            try:
                f.result()
            except Exception:  # noqa: BLE001 - best effort
                pass
    return out


def _fsync_ms(d: Path, n: int = 200) -> dict[str, float]:
    """An fsync of a ~1 KiB append on this disk, for scale."""
    import os

    times = []
    fd = os.open(d / "fsync-probe", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(n):
            os.write(fd, b"x" * 1024)
            t0 = time.perf_counter()
            os.fsync(fd)
            times.append((time.perf_counter() - t0) * 1000)
    finally:
        os.close(fd)
        os.unlink(d / "fsync-probe")
    return {"p50": round(_percentile(times, 0.5), 3), "p99": round(_percentile(times, 0.99), 3)}


def markdown(x: dict[str, Any]) -> list[str]:
    """The section's lines for the report."""
    f = x.get("fsync_ms") or {}
    lines = ["", "## 8. What capture adds to a call (openai SDK, fake provider, same run)", "",
             f"The official openai SDK through `Recorder.http_client()` (async: "
             f"`async_http_client()`) against the same SDK on a bare `httpx2` client, in "
             f"alternating blocks of {x['block']} calls a caller, ~{x['calls']} calls a side and "
             f"row, {x['calls'] * LONE_CALLS} for a lone caller "
             f"(`bench.call_overhead`). Added: captured minus bare at the same percentile. "
             f"Streamed: first content chunk and end of the stream. An fsync on this disk: "
             f"p50 {f.get('p50')} ms, p99 {f.get('p99')} ms"
             + (f" (the disk settled first: {st['dirty_mib_before']} -> "
                f"{st['dirty_mib_after']} MiB dirty in {st['seconds']} s)"
                if (st := x.get("settled")) else "") + "."
             + (f" The broker used {b['cores']} of a core over the section's {b['seconds']} s, "
                f"{b['jit_cores']} of it compiling (its JIT: a broker minutes old still "
                f"compiles, on the cores the calls run on)." if (b := x.get("broker")) else ""),
             "",
             "| durability | API | body | callers | bare p50 / p99 ms | captured p50 / p99 ms "
             "| added p50 / p99 ms | first chunk added p50 / p99 ms |",
             "|---|---|---|---|---|---|---|---|"]
    for mode in x["modes"]:
        for r in mode["rows"]:
            last, first = r["last"], r.get("first")
            lines.append(
                f"| {mode['name']} | {r['sync']} | {'streamed' if r['stream'] else 'plain'} | "
                f"{r['concurrency']} | {last['bare']['p50']} / {last['bare']['p99']} | "
                f"{last['captured']['p50']} / {last['captured']['p99']} | "
                f"**{last['added_p50_ms']} / {last['added_p99_ms']}** | "
                + (f"{first['added_p50_ms']} / {first['added_p99_ms']}" if first else "–")
                + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.call_overhead",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls")
    ap.add_argument("--calls", type=int, help="calls a side and row (default 400; quick 60)")
    ap.add_argument("--block", type=int, default=10, help="calls a caller makes in a block")
    ap.add_argument("--concurrency", default="1,16,64", help="callers, comma-separated")
    ap.add_argument("--mode", action="append", choices=[m for m, _ in MODES],
                    help="only these durability modes (repeatable)")
    ap.add_argument("--bootstrap", default=None, help="Kafka (default: the dev stack's)")
    ap.add_argument("--database-url", default=None,
                    help="PostgreSQL, checkpointed when the disk is settled before the calls "
                         "(default: the dev stack's, with --bootstrap unset; else sync only)")
    args = ap.parse_args(argv)
    if args.bootstrap is None:
        import os

        from devstack import StackConfig, read_env

        env = {**read_env(StackConfig.from_env()), **os.environ}
        args.bootstrap = env.get("EVIDENCE_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
        args.database_url = args.database_url or env.get("EVIDENCE_DATABASE_URL")
    modes = [m for m in MODES if args.mode is None or m[0] in args.mode]
    x = measure(args.bootstrap, f"bench{uuid.uuid4().hex[:8]}",
                calls=args.calls or (60 if args.quick else 400), block=args.block,
                modes=modes, levels=tuple(int(c) for c in args.concurrency.split(",") if c),
                say=lambda m: print(m, file=sys.stderr, flush=True),
                database_url=args.database_url)
    print("\n".join(markdown(x)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
