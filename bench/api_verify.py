"""Load test of POST /replay/verify against a real uvicorn, from a separate process.

    .venv/bin/python -m bench.api_verify [--seconds 10] [--concurrency 16] [--records 1000]

Builds a read model of its own (random views schema, dropped afterwards), starts the API in a
subprocess with one extra route, ``GET /_bench/pk/{offset}``, that does nothing but one
primary-key select on the same views through the same pool (the "bare route" verify is
measured against), and drives both with an asyncio httpx client in this process. Prints req/s,
p50 and p99 per route and the verify/bare throughput ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import subprocess
import sys
import time

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
    async with db._connection() as conn:
        row = await (await conn.execute(sql, (offset,))).fetchone()
    return {"offset": row[0] if row else None}

uvicorn.run(app, host="127.0.0.1", port=int(os.environ["BENCH_PORT"]), log_level="warning",
            access_log=False, server_header=False)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _drive(base: str, key: str, make_request, seconds: float, concurrency: int):
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
    latencies.sort()
    n = len(latencies)
    if n == 0:
        return {"n": 0, "rps": 0.0, "p50_ms": float("nan"), "p99_ms": float("nan"),
                "errors": errors}
    return {"n": n, "rps": n / elapsed, "p50_ms": latencies[n // 2] * 1e3,
            "p99_ms": latencies[min(n - 1, int(n * 0.99))] * 1e3, "errors": errors}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--records", type=int, default=1000)
    p.add_argument("--database-url", default=None)
    args = p.parse_args(argv)

    from devstack import StackConfig, read_env
    from tests.fixtures.readmodel import ReadModel

    url = (args.database_url or os.environ.get("EVIDENCE_DATABASE_URL")
           or read_env(StackConfig.from_env()).get("EVIDENCE_DATABASE_URL"))
    if not url:
        print("no database: run `make up` or set EVIDENCE_DATABASE_URL", file=sys.stderr)
        return 1
    key = "bench-" + os.urandom(24).hex()
    with ReadModel(url) as rm:
        records = [rm.add("bench:verify", output=f"answer {i}") for i in range(args.records)]
        rm.conn.execute("analyze")
        port = _free_port()
        env = {**os.environ, "EVIDENCE_DATABASE_URL": url, "EVIDENCE_API_KEY": key,
               "EVIDENCE_API_KEY_STREAMS": "bench:*", "EVIDENCE_PG_VIEWS_SCHEMA": rm.views,
               "EVIDENCE_API_KEYS_FILE": "", "BENCH_PORT": str(port)}
        server = subprocess.Popen([sys.executable, "-c", SERVE_CODE], env=env)
        try:
            import httpx

            base = f"http://127.0.0.1:{port}"
            for _ in range(200):
                try:
                    if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.05)

            def verify_req():
                i = random.randrange(len(records))
                # Half match, half mismatch: both are the same work for the server.
                text = f"answer {i}" if i % 2 else "something else"
                return "POST", "/replay/verify", {"stream": "bench:verify", "seq": i + 1,
                                                   "replayed_output": text}

            def bare_req():
                return "GET", f"/_bench/pk/{random.randrange(len(records))}", None

            results = {}  # two rounds, interleaved; the second of each is kept
            for name, make in (("bare", bare_req), ("verify", verify_req),
                               ("bare", bare_req), ("verify", verify_req)):
                asyncio.run(_drive(base, key, make, args.warmup, args.concurrency))
                results[name] = asyncio.run(_drive(base, key, make, args.seconds,
                                                   args.concurrency))
            for name, r in results.items():
                print(f"{name:<7} {r['rps']:8.1f} req/s  p50 {r['p50_ms']:6.2f} ms  "
                      f"p99 {r['p99_ms']:6.2f} ms  n={r['n']} errors={r['errors']}")
            print(f"verify/bare throughput ratio: {results['verify']['rps'] / results['bare']['rps']:.2f}")
        finally:
            server.terminate()
            server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
