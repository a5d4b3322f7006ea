"""A closed-loop HTTP/1.1 load generator light enough not to be what a bench measures.

``drive(base, requests, seconds, concurrency)`` keeps ``concurrency`` keep-alive connections
busy for ``seconds``: each connection sends one of ``requests`` (pre-encoded by
:func:`encode_request`, picked at random), reads the whole response, and sends the next.
It returns ``{"n", "rps", "p50_ms", "p99_ms", "errors", "failures"}``; a non-200 answer or a
failed connection is an error (a failed connection is reopened), never a crash; ``failures``
counts them by what they were (the status, or the exception's name).

Why not httpx: its ``AsyncClient`` spends most of its time in the connection pool's
bookkeeping once there are many connections. httpcore 1.0's
``AsyncConnectionPool._assign_requests_to_connections`` walks every pooled connection (an
``is_idle``/``has_expired`` check, with a socket poll, on each) for every request queued and
every response released (encode/httpcore#1035, pydantic/httpx2#1169). Profiled here at
concurrency 64 with py-spy, 73 % of the load generator's samples were in that pool, the
generator used a whole core and the server sat mostly idle in ``epoll``: the collapse the
bench reported (140 req/s at 64) was the client's. This client costs a write, a
``readuntil`` and a ``readexactly`` per request, the same at 4 connections as at 256.

``processes`` > 1 splits the connections over that many processes (``spawn``), each with an
event loop of its own, for when one client process is saturated; on a two-core machine
shared with the server one process is cheaper, which is the default.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import time
from typing import Any
from urllib.parse import urlsplit

__all__ = ["drive", "encode_request", "merge_failures", "summary"]

_TIMEOUT_S = 10.0


def encode_request(method: str, path: str, host: str, headers: dict[str, str] | None = None,
                   body: bytes | None = None) -> bytes:
    """One HTTP/1.1 request as bytes, with ``Content-Length`` for a body."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """Read one response; return its status and whether the server keeps the connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, _, rest = head.partition(b"\r\n")
    status = int(status_line.split(b" ", 2)[1])
    length, chunked, keep = 0, False, True
    for line in rest.split(b"\r\n"):
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            keep = b"close" not in value.lower()
    if chunked:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            await reader.readexactly(size + 2)  # the chunk and its CRLF
            if size == 0:
                break
    elif length:
        await reader.readexactly(length)
    return status, keep


async def _connection(host: str, port: int, requests: list[bytes], start: float,
                      deadline: float, seed: int, latencies: list[float],
                      failures: dict[str, int]) -> None:
    rng = random.Random(seed)
    choice = rng.choice
    clock = time.perf_counter
    writer = None
    while clock() < deadline:
        try:
            async with asyncio.timeout(_TIMEOUT_S):
                if writer is None:
                    reader, writer = await asyncio.open_connection(host, port)
                    if clock() < start:  # connected before the start: begin all together
                        await asyncio.sleep(start - clock())
                t0 = clock()
                writer.write(choice(requests))
                status, keep = await _read_response(reader)
            latencies.append(clock() - t0)
            if status != 200:
                failures[str(status)] = failures.get(str(status), 0) + 1
            if not keep:
                writer.close()
                writer = None
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                TimeoutError, ValueError, IndexError) as e:
            # A reset, a timeout or a garbled answer under overload is a failed request,
            # counted beside the rate; the connection is reopened.
            failures[type(e).__name__] = failures.get(type(e).__name__, 0) + 1
            if writer is not None:
                writer.close()
                writer = None
            await asyncio.sleep(0.01)
    if writer is not None:
        writer.close()


async def _run(host: str, port: int, requests: list[bytes], start: float, seconds: float,
               concurrency: int, seed: int) -> tuple[list[float], dict[str, int], float]:
    latencies: list[float] = []
    failures: dict[str, int] = {}
    # perf_counter is per process; start and deadline travel as wall-clock time.
    offset = time.perf_counter() - time.time()
    t_start, deadline = start + offset, start + offset + seconds
    await asyncio.gather(*(_connection(host, port, requests, t_start, deadline,
                                       seed * 100_003 + i, latencies, failures)
                           for i in range(concurrency)))
    return latencies, failures, time.perf_counter() - t_start


def _child(args: tuple[Any, ...]) -> tuple[list[float], dict[str, int], float]:
    return asyncio.run(_run(*args))


def summary(latencies: list[float], errors: int, elapsed: float,
            failures: dict[str, int] | None = None) -> dict[str, Any]:
    """The rate and latencies of a run; ``failures`` (what the errors were) when known."""
    latencies = sorted(latencies)
    n = len(latencies)
    out: dict[str, Any] = {"n": n, "rps": 0.0, "p50_ms": float("nan"), "p99_ms": float("nan"),
                           "errors": errors}
    if n:
        out.update(rps=n / elapsed, p50_ms=latencies[n // 2] * 1e3,
                   p99_ms=latencies[min(n - 1, int(n * 0.99))] * 1e3)
    if failures is not None:
        out["failures"] = failures
    return out


def merge_failures(parts: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in parts:
        for kind, n in part.items():
            out[kind] = out.get(kind, 0) + n
    return out


def drive(base: str, requests: list[bytes], seconds: float, concurrency: int,
          processes: int = 1, seed: int = 0) -> dict[str, Any]:
    """Load ``base`` (``http://host:port``) with ``requests`` from ``concurrency`` connections
    for ``seconds``; see the module doc."""
    url = urlsplit(base)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    processes = max(1, min(processes, concurrency))
    shares = [concurrency // processes + (i < concurrency % processes) for i in range(processes)]
    if processes == 1:
        lat, failures, elapsed = asyncio.run(_run(host, port, requests, time.time() + 0.2,
                                                  seconds, concurrency, seed))
        return summary(lat, sum(failures.values()), elapsed, failures)
    # Each process connects first and starts at the same wall-clock moment, after the
    # interpreter start-up that spawn costs.
    start = time.time() + 1.5
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(processes) as pool:
        parts = pool.map(_child, [(host, port, requests, start, seconds, share, seed + i)
                                  for i, share in enumerate(shares)])
    failures = merge_failures([f for _l, f, _t in parts])
    return summary([x for lat, _f, _t in parts for x in lat], sum(failures.values()),
                   max(t for _l, _f, t in parts), failures)
