"""Load test of POST /replay/verify against the real server, from a separate process.

    .venv/bin/python -m bench.api_verify [--seconds 5] [--concurrency 4,16,64,256]
        [--workers N] [--client raw|httpx] [--processes 1] [--records 1000]

Builds a read model of its own (random views schema, dropped afterwards), serves it with
``evidence api --factory bench.app:bench_app`` (the production server path: workers, head
and body bounds, keep-alive, pool per worker; plus ``GET /_bench/pk/{partition}/{offset}``,
one primary-key select through the same pool: the "bare route" verify is measured against),
and drives both at each concurrency with :mod:`bench.loadgen` from this process. Prints
req/s, p50 and p99 per route and the verify/bare throughput ratio of each level.

``--client httpx`` drives the same requests with one ``httpx.AsyncClient`` instead, the load
generator the bench used before: it is what collapsed at concurrency 64 (see bench.loadgen).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from devstack.ports import free_port

ROOT = Path(__file__).resolve().parents[1]

# The server tlog_proofs serves (a bare route on partition 0 only); this bench serves
# bench.app through `evidence api` instead.
SERVE_CODE = r"""
import os, uvicorn
from typing import Annotated
from fastapi import Depends
from api import Settings, create_app
settings = Settings.from_env()
app = create_app(settings)
db = app.state.db

@app.get("/_bench/pk/{offset}")
async def bare(offset: int):
    sql = f'select log_offset from "{db.views}".records where log_partition = 0 and log_offset = %s'
    row = await db._pool.one("bench_pk", sql, (offset,))
    return {"offset": row[0] if row else None}

uvicorn.run(app, host="127.0.0.1", port=int(os.environ["BENCH_PORT"]), log_level="warning",
            access_log=False, server_header=False)
"""

LEVELS = (4, 16, 64, 256)

Spec = tuple[str, str, Any]
"""A request: method, path and JSON body (or None)."""


async def _drive(base: str, key: str, make_request: Callable[[], Spec], seconds: float,
                 concurrency: int) -> dict[str, Any]:
    """One ``httpx.AsyncClient`` with ``concurrency`` tasks: the old load generator, kept for
    ``--client httpx`` and bench.tlog_proofs."""
    import httpx

    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=10,
                                 headers={"Authorization": f"Bearer {key}"}) as client:
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < deadline:
                method, url, body = make_request()
                t0 = time.perf_counter()
                try:
                    r = await client.request(method, url, json=body)
                except httpx.TransportError:
                    # A reset or timeout under overload is a failed request, not a crash of
                    # the benchmark: it is counted and reported beside the rate.
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - t0)
                if r.status_code != 200:
                    errors += 1

        t_start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t_start
    from bench.loadgen import summary

    return summary(latencies, errors, elapsed)


def _encode(base: str, key: str, specs: list[Spec]) -> list[bytes]:
    from urllib.parse import urlsplit

    from bench.loadgen import encode_request

    host = urlsplit(base).netloc
    out = []
    for method, path, body in specs:
        headers = {"Authorization": f"Bearer {key}"}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body, separators=(",", ":")).encode()
        out.append(encode_request(method, path, host, headers, data))
    return out


def measure(base: str, key: str, routes: dict[str, list[Spec]], level: int, seconds: float,
            warmup: float, client: str = "raw", processes: int = 1) -> dict[str, Any]:
    """Each route of ``routes`` at ``level`` connections: a warm-up each, then two rounds
    each, interleaved (a, b, b, a) so a slow moment of the shared machine falls on both;
    the rates are averaged and the worst p50/p99 kept. Adds ``ratio``: the first route's
    rate over the second's."""
    from bench.loadgen import drive

    encoded = {name: _encode(base, key, specs) for name, specs in routes.items()}

    def once(name: str, secs: float) -> dict[str, Any]:
        if client == "httpx":
            rng = random.Random(level)
            specs = routes[name]
            return asyncio.run(_drive(base, key, lambda: rng.choice(specs), secs, level))
        return drive(base, encoded[name], secs, level, processes=processes, seed=level)

    names = list(routes)
    for name in names:
        once(name, warmup)
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for name in names + names[::-1]:
        rounds[name].append(once(name, seconds))
    res: dict[str, Any] = {"concurrency": level}
    for name, rs in rounds.items():
        res[name] = {"rps": round(sum(r["rps"] for r in rs) / len(rs), 1),
                     "p50_ms": round(max(r["p50_ms"] for r in rs), 2),
                     "p99_ms": round(max(r["p99_ms"] for r in rs), 2),
                     "errors": sum(r["errors"] for r in rs)}
        if any("failures" in r for r in rs):
            from bench.loadgen import merge_failures

            res[name]["failures"] = merge_failures([r.get("failures", {}) for r in rs])
    a, b = names[0], names[1]
    res["ratio"] = round(res[a]["rps"] / res[b]["rps"], 3) if res[b]["rps"] else float("nan")
    return res


def start_server(env: dict[str, str], port: int, workers: int | None,
                 log: Any = None) -> subprocess.Popen:
    """``evidence api --factory bench.app:bench_app`` on 127.0.0.1:``port``; ``workers``
    None leaves the server its default (EVIDENCE_API_WORKERS, else the cores)."""
    cmd = [sys.executable, "-m", "cli.main", "api", "--factory", "bench.app:bench_app",
           "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=log)


def wait_healthy(base: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the API exited with {proc.returncode}")
        try:
            if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the API did not come up within {timeout:g} s")
        time.sleep(0.1)


def print_table(results: list[dict[str, Any]], out: Any = sys.stdout) -> None:
    print("    c | verify req/s   p50 ms   p99 ms err | bare req/s   p50 ms   p99 ms err | "
          "ratio", file=out)
    for r in results:
        v, b = r["verify"], r["bare"]
        print(f"{r['concurrency']:5d} | {v['rps']:12.1f} {v['p50_ms']:8.2f} {v['p99_ms']:8.2f} "
              f"{v['errors']:3d} | {b['rps']:10.1f} {b['p50_ms']:8.2f} {b['p99_ms']:8.2f} "
              f"{b['errors']:3d} | {r['ratio']:.2f}", file=out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--concurrency", default=",".join(map(str, LEVELS)),
                   help="levels, comma-separated (default 4,16,64,256)")
    p.add_argument("--records", type=int, default=1000)
    p.add_argument("--workers", type=int, default=None,
                   help="API worker processes (default: the server's, one per core)")
    p.add_argument("--client", choices=("raw", "httpx"), default="raw")
    p.add_argument("--processes", type=int, default=1, help="load generator processes")
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--database-url", default=None)
    args = p.parse_args(argv)
    if args.workers is None:  # the API's default is one; the bench measures one per core
        from api.config import default_workers

        args.workers = default_workers()
    levels = [int(x) for x in args.concurrency.split(",") if x]

    from devstack import StackConfig, read_env
    from tests.fixtures.readmodel import ReadModel

    url = (args.database_url or os.environ.get("EVIDENCE_DATABASE_URL")
           or read_env(StackConfig.from_env()).get("EVIDENCE_DATABASE_URL"))
    if not url:
        print("no database: run `make up` or set EVIDENCE_DATABASE_URL", file=sys.stderr)
        return 1
    key = "bench-" + os.urandom(24).hex()
    rng = random.Random(1)
    with ReadModel(url) as rm:
        records = [rm.add("bench:verify", output=f"answer {i}") for i in range(args.records)]
        rm.conn.execute("analyze")
        port = free_port()
        env = {**os.environ, "EVIDENCE_DATABASE_URL": url, "EVIDENCE_API_KEY": key,
               "EVIDENCE_API_KEY_STREAMS": "bench:*", "EVIDENCE_PG_VIEWS_SCHEMA": rm.views,
               "EVIDENCE_API_KEYS_FILE": "", "PYTHONUNBUFFERED": "1"}
        server = start_server(env, port, args.workers)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_healthy(base, server)
            verify, bare = [], []
            for _ in range(2000):
                i = rng.randrange(len(records))
                # Half match, half mismatch: both are the same work for the server.
                text = f"answer {i}" if i % 2 else "something else"
                verify.append(("POST", "/replay/verify", {"stream": "bench:verify",
                                                          "seq": i + 1, "replayed_output": text}))
                r = records[rng.randrange(len(records))]
                bare.append(("GET", f"/_bench/pk/{r.partition}/{r.offset}", None))
            results = []
            for level in levels:
                results.append(measure(base, key, {"verify": verify, "bare": bare}, level,
                                       args.seconds, args.warmup, args.client, args.processes))
                print_table(results[-1:] if len(results) > 1 else results)
            print(f"\nclient {args.client} x{args.processes}, workers "
                  f"{args.workers or 'default'}; all levels:")
            print_table(results)
            if args.json:
                args.json.write_text(json.dumps({"client": args.client, "processes":
                                                 args.processes, "workers": args.workers,
                                                 "results": results}, indent=2) + "\n")
        finally:
            server.terminate()
            server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
