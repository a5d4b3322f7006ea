"""What a verified replay costs against an unverified one, in the same run.

    .venv/bin/python -m bench.replay_verified [--calls 300] [--rounds 6] [--json PATH]

Records ``calls`` LLM calls on a stream of its own through the Recorder (the synthetic chat
exchanges of :mod:`bench.latency`'s gateways, each with a ~1 KiB response of its own), waits
until the API serves them all and a checkpoint signed by the log key covers them, then
replays every one through ``Replayer(...).http_client()`` (the transport an application
hands its SDK), posting the recorded request bodies:

- *verified*: ``Replayer(api_url, api_key, stream=S, log_key=K)``, the default: each read is
  ``GET /replay/{key}/bundle?stream=S&known_size=N`` and the bundle's check
  (``evidence_contract.bundle.verify_bundle`` through ``LogVerifier``) before any byte is
  handed out;
- *unverified*: the same with ``verify=False``: ``GET /replay/{key}?stream=S``, no check.

Both readers are made once and warmed up (the verified one pins its first checkpoint then),
as a service would hold them. Then ``rounds`` rounds, each replaying every call once in a
shuffled order, by both readers one after the other, the order alternating (A B, B A, ...)
so a slow moment of the shared host falls on both. One read at a time (concurrency 1): the
per-read latency is what an application waits for. The SDK is left out on purpose: its
parsing costs the same on both paths and would only dilute the ratio.

Reported per reader: reads/s, p50 and p99 of a read (ms), the requests each read made of the
API, the bytes it downloaded and the p50 of an API round trip (sent to the answer's head:
``httpx`` event hooks on the reader's API client), and
failed reads (an error, an answer other than the recorded bytes, or a verified answer without
its ``Evidence-Verified`` header); for the verified reader also the client-side check's p50
(µs). ``ratio``: verified reads/s over unverified; ``p50_ratio``: verified p50 over
unverified. In the steady state a verified read is one request (with ``stream=`` the bundle
carries the consistency proof from the size the reader last verified).

Standalone it runs on the ``make up`` stack (``.stack/env``: the API, its key, Kafka, the topic
prefix, and the log key from ``EVIDENCE_LOG_VERIFIER_KEY_FILE``) and leaves its stream,
``bench:replay-<hex>``, in the stack's log; ``python -m bench`` runs :func:`measure` on its
own isolated pipeline, with the key that pipeline's writer signs with.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

URL = "http://provider.invalid/v1/chat/completions"
"""Where the replayed calls say they go; a replay transport never opens it."""


def _response(i: int) -> bytes:
    """Call ``i``'s recorded answer: a chat completion of ~1 KiB, different for each call."""
    text = f"answer {i} " + "x" * 900
    return json.dumps({"id": f"bench-{i}", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text},
         "finish_reason": "stop"}]}).encode()


def record(bootstrap: str, prefix: str, stream: str, n: int,
           spool_dir: Path) -> list[tuple[bytes, bytes]]:
    """Record ``n`` calls on ``stream`` through a Recorder (topic prefix ``prefix``); returns
    each call's (request body, response body), call ``i`` being seq ``i + 1``."""
    from evidence_client import Recorder

    from bench.latency import _exchange

    calls = []
    recorder = Recorder(bootstrap, stream, topic_prefix=prefix, spool_dir=spool_dir,
                        close_timeout=30)
    recorder.start()
    try:
        for i in range(n):
            ex = _exchange(stream, i, _response(i))
            calls.append((ex.request_bytes, ex.chunks[0]))
            recorder.submit(ex)
    finally:
        recorder.close(30)
    return calls


def wait_covered(api_url: str, api_key: str, stream: str, n: int, log_key: Any,
                 timeout: float = 120.0) -> dict[str, Any]:
    """Wait until the API serves ``n`` records of ``stream`` and its latest checkpoint, signed
    by ``log_key``, covers them; returns the head, the checkpoint's size and the seconds."""
    import httpx

    from evidence_contract.note import NoteError
    from evidence_contract.tlog import open_stream_checkpoint

    t0 = time.monotonic()
    head = size = 0
    with httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {api_key}"},
                      timeout=10) as api:
        while True:
            if head < n:
                r = api.get(f"/streams/{stream}", params={"after_seq": head, "wait_ms": 1000})
                if r.status_code == 200:
                    head = r.json()["head_seq"]
                elif r.status_code != 404:  # 404: no record of the stream projected yet
                    raise RuntimeError(f"GET /streams/{stream}: {r.status_code} {r.text[:300]}")
                else:
                    time.sleep(0.1)
            else:
                r = api.get(f"/streams/{stream}/checkpoint")
                if r.status_code == 200:
                    try:
                        size = open_stream_checkpoint(r.content, log_key, stream)[0].size
                    except NoteError as e:
                        raise RuntimeError(f"the checkpoint of {stream} does not verify with "
                                           f"the log key given: {e}") from e
                elif r.status_code != 404:
                    raise RuntimeError(f"GET /streams/{stream}/checkpoint: {r.status_code} "
                                       f"{r.text[:300]}")
                if size >= n:
                    return {"head_seq": head, "checkpoint_size": size,
                            "seconds": round(time.monotonic() - t0, 1)}
                time.sleep(0.2)
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"after {timeout:g} s the API serves {head} of {n} records "
                                   f"of {stream}, and its checkpoint covers {size}")


def _p50(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2] if xs else float("nan")


class _Reader:
    """One Replayer, its application-side client, and what its API client did."""

    def __init__(self, name: str, replayer: Any) -> None:
        self.name, self.replayer = name, replayer
        self.client = replayer.http_client()
        self.requests = self.bytes = 0
        self.latencies: list[float] = []
        self.round_rps: list[float] = []
        self.errors = 0
        self.first_error: str | None = None
        self.check_s: list[float] = []
        self.api_s: list[float] = []
        self._sent = 0.0
        # The Replayer's own API client (made on first use; the Replayer takes no hooks):
        # every request it makes of the API is counted, with the bytes of the answer and the
        # time from sending it to the answer's head (one read at a time: one in flight).
        replayer._sync_client().event_hooks = {"request": [self._on_request],
                                               "response": [self._on_response]}
        verifier = replayer.verifier
        if verifier is not None:  # the client-side check alone, timed around the call
            check = verifier.check

            def timed(*args: Any, **kwargs: Any) -> Any:
                t = time.perf_counter()
                try:
                    return check(*args, **kwargs)
                finally:
                    self.check_s.append(time.perf_counter() - t)

            verifier.check = timed

    def _on_request(self, _request: Any) -> None:
        self.requests += 1
        self._sent = time.perf_counter()

    def _on_response(self, response: Any) -> None:
        self.api_s.append(time.perf_counter() - self._sent)
        self.bytes += int(response.headers.get("content-length", 0))

    def reset(self) -> None:
        self.requests = self.bytes = self.errors = 0
        self.latencies, self.round_rps, self.check_s, self.api_s = [], [], [], []
        self.first_error = None

    def read(self, calls: list[tuple[bytes, bytes]], order: list[int]) -> None:
        """Replay ``calls`` in ``order``, one at a time, noting each read's latency."""
        post, clock = self.client.post, time.perf_counter
        headers = {"content-type": "application/json"}
        verified = self.replayer.verifier is not None
        t_round, ok_reads = clock(), 0
        for i in order:
            body, expected = calls[i]
            t0 = clock()
            try:
                r = post(URL, content=body, headers=headers)
                why = (None if r.status_code == 200 and r.content == expected
                       and ("evidence-verified" in r.headers) == verified
                       else f"call {i}: {r.status_code}, not the recorded answer")
            except Exception as e:  # noqa: BLE001 - a failed read is counted, not fatal
                why = f"call {i}: {type(e).__name__}: {e}"
            t1 = clock()
            if why is None:
                self.latencies.append(t1 - t0)
                ok_reads += 1
            else:
                self.errors += 1
                self.first_error = self.first_error or why[:300]
        self.round_rps.append(ok_reads / (clock() - t_round))

    def summary(self, reads: int, seconds: float) -> dict[str, Any]:
        from bench.loadgen import summary

        s = summary(self.latencies, self.errors, seconds)
        out = {"reads": reads, "rps": round(s["rps"], 1), "p50_ms": round(s["p50_ms"], 3),
               "p99_ms": round(s["p99_ms"], 3), "errors": self.errors,
               "api_requests_per_read": round(self.requests / reads, 3),
               "api_bytes_per_read": round(self.bytes / reads),
               "api_ms_p50": round(_p50(self.api_s) * 1e3, 3),
               "rounds_rps": [round(x, 1) for x in self.round_rps]}
        if self.check_s:
            out["client_check_us_p50"] = round(_p50(self.check_s) * 1e6, 1)
        if self.first_error:
            out["first_error"] = self.first_error
        return out

    def close(self) -> None:
        self.client.close()
        self.replayer.close()


def measure(bootstrap: str, prefix: str, api_url: str, api_key: str, log_key: Any,
            calls: int, rounds: int, spool_dir: Path, stream: str | None = None,
            warmup: int = 20, say: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Record, wait, replay verified and unverified in alternating rounds; see the module
    docstring. ``log_key``: the verifier key (or its text, or a file of it) the pipeline's
    writer signs checkpoints with."""
    from evidence_client import Replayer
    from evidence_client.trust import load_key

    from bench.services import host_ticks, steal_pct

    log_key = load_key(log_key)
    stream = stream or f"bench:replay-{uuid.uuid4().hex[:8]}"
    say(f"recording {calls} calls on {stream}")
    recorded = record(bootstrap, prefix, stream, calls, spool_dir)
    covered = wait_covered(api_url, api_key, stream, calls, log_key)
    say(f"checkpoint of {covered['checkpoint_size']} covers them after {covered['seconds']} s; "
        f"{rounds} rounds of {calls} reads each, verified and unverified alternating")
    readers = [_Reader("verified", Replayer(api_url, api_key, stream=stream, log_key=log_key)),
               _Reader("unverified", Replayer(api_url, api_key, stream=stream, verify=False))]
    try:
        rng = random.Random(11)
        for r in readers:  # connections, and the verified reader's first checkpoint
            r.read(recorded, rng.sample(range(calls), min(warmup, calls)))
            if r.errors:
                raise RuntimeError(f"the {r.name} warm-up failed: {r.first_error}")
            r.reset()
        seconds = {r.name: 0.0 for r in readers}
        h0 = host_ticks()
        for k in range(rounds):
            order = list(range(calls))
            rng.shuffle(order)
            for r in (readers if k % 2 == 0 else readers[::-1]):
                t0 = time.perf_counter()
                r.read(recorded, order)
                seconds[r.name] += time.perf_counter() - t0
        steal = steal_pct(h0, host_ticks())
        res = {r.name: r.summary(calls * rounds, seconds[r.name]) for r in readers}
    finally:
        for r in readers:
            r.close()
    v, u = res["verified"], res["unverified"]
    return {"stream": stream, "calls": calls, "rounds": rounds, "concurrency": 1,
            "covered": covered, **res,
            "ratio": round(v["rps"] / u["rps"], 3) if u["rps"] else float("nan"),
            "p50_ratio": round(v["p50_ms"] / u["p50_ms"], 3) if u["p50_ms"] else float("nan"),
            "steal_pct": steal}


def print_table(res: dict[str, Any], out: Any = sys.stdout) -> None:
    print("reader     |  reads/s |  p50 ms |  p99 ms | API p50 ms | API req/read | "
          "API bytes/read | failed", file=out)
    for name in ("verified", "unverified"):
        x = res[name]
        print(f"{name:10} | {x['rps']:8.1f} | {x['p50_ms']:7.2f} | {x['p99_ms']:7.2f} | "
              f"{x['api_ms_p50']:10.2f} | {x['api_requests_per_read']:12.2f} | "
              f"{x['api_bytes_per_read']:14,} | {x['errors']:6}", file=out)
    print(f"verified / unverified: {res['ratio']:.2f}x the reads/s, {res['p50_ratio']:.2f}x the "
          f"p50; client-side check p50 {res['verified'].get('client_check_us_p50')} µs; "
          f"{res['calls']} calls x {res['rounds']} rounds each; CPU steal "
          f"{res['steal_pct']}%", file=out)


def _serves_bundles(api_url: str) -> bool:
    """Whether the API's OpenAPI document has the bundle route a verified replay asks."""
    import httpx

    try:
        paths = httpx.get(api_url.rstrip("/") + "/openapi.json", timeout=10).json()["paths"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return False
    return "/replay/{content_key_hex}/bundle" in paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=300, help="calls to record and replay")
    p.add_argument("--rounds", type=int, default=6,
                   help="rounds; each replays every call once with each reader")
    p.add_argument("--warmup", type=int, default=20, help="reads per reader before timing")
    p.add_argument("--own-api", action="store_true",
                   help="serve this checkout's API (`evidence api`, a free port) over the "
                        "stack's database, instead of the stack's API: for a stack started "
                        "before the code under test")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)

    import os

    from devstack import StackConfig, read_env

    env = {**read_env(StackConfig.from_env()), **os.environ}
    need = ("EVIDENCE_API_URL", "EVIDENCE_API_KEY", "EVIDENCE_KAFKA_BOOTSTRAP")
    if not all(env.get(k) for k in need):
        print(f"no stack: run `make up` or set {', '.join(need)}", file=sys.stderr)
        return 1
    key_file = env.get("EVIDENCE_LOG_VERIFIER_KEY_FILE") or env.get("EVIDENCE_LOG_SIGNING_KEY_FILE")
    if not key_file:
        print("no log key: EVIDENCE_LOG_VERIFIER_KEY_FILE (.stack/env) names none",
              file=sys.stderr)
        return 1

    def say(msg: str) -> None:
        print(f"[replay_verified {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr,
              flush=True)

    api = None
    url, key = env["EVIDENCE_API_URL"], env["EVIDENCE_API_KEY"]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    loadavg = " ".join(f"{x:.2f}" for x in os.getloadavg())
    try:
        if args.own_api:
            from bench.services import start_api

            key = f"bench-{uuid.uuid4().hex}"
            api, url = start_api(env["EVIDENCE_DATABASE_URL"],
                                 env.get("EVIDENCE_PG_VIEWS_SCHEMA") or "evidence", key)
            say(f"this checkout's API at {url} (pid {api.pid})")
        elif not _serves_bundles(url):
            print(f"the API at {url} has no bundle route (GET /replay/{{key}}/bundle): it "
                  f"predates the code under test; restart the stack's API, or pass --own-api",
                  file=sys.stderr)
            return 1
        with tempfile.TemporaryDirectory(prefix="bench-replay-spool-") as spool:
            res = measure(env["EVIDENCE_KAFKA_BOOTSTRAP"],
                          env.get("EVIDENCE_TOPIC_PREFIX", "evidence"), url, key, key_file,
                          args.calls, args.rounds, Path(spool), warmup=args.warmup, say=say)
    finally:
        if api is not None:
            api.stop()
    res["api"] = "this checkout's, over the stack's database" if args.own_api else "the stack's"
    import shlex

    from bench.services import speed_probe

    res["command"] = shlex.join([".venv/bin/python", "-m", "bench.replay_verified",
                                 *(sys.argv[1:] if argv is None else argv)])
    res["started"], res["loadavg"] = started, loadavg
    res["speed_after"] = speed_probe()
    print_table(res)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
