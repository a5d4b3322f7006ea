"""What does sealing content cost a capture? ``python bench/encrypt_cost.py``.

In one run, in process, alternating (plain, encrypt, plain, encrypt, ...) over ``--rounds``
rounds of ``--n`` captures per response size: the work the Recorder's sender thread does per
capture (build the CaptureEvent from a finished exchange, size policy, and under ``encrypt``
keyed commitments and AES-256-GCM envelopes for every content field, then the single-object
encoding), and the work the writer does per capture (``validate`` + ``seal_capture``). The
plain policy is the baseline measured in the same run; prints microseconds per capture and
the ratio encrypt / plain (median over rounds) per response size, as one JSON document.
The subject's keys are cached as the Recorder caches them, so no key-store I/O is timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evidence_client.capture import VALUE, Exchange, build_event  # noqa: E402
from evidence_client.context import CallContext, Chunk  # noqa: E402
from evidence_client.recorder import LIBRARY  # noqa: E402
from evidence_client.sizing import apply_size_policy  # noqa: E402
from evidence_contract import content_key, encode, new_event_id  # noqa: E402
from evidence_contract.sealing import SubjectKeys, new_data_key, new_key_id, seal_body  # noqa: E402
from writer.core import Head, seal_capture, validate  # noqa: E402

STREAM = "bench:encrypt"
W = {"writer_id": "bench", "transactional_id": "bench", "version": "0"}
MAX = 64 << 20


def _exchange(response_bytes: int) -> Exchange:
    req = (b'{"model":"gpt-4o-mini","messages":[{"role":"user","content":"'
           + b"q" * 400 + b'"}],"temperature":0}')
    text = "a" * max(0, response_bytes - 120)
    resp = json.dumps({"id": "x", "object": "chat.completion", "model": "gpt-4o-mini",
                       "choices": [{"index": 0, "message": {"role": "assistant",
                                                             "content": text}}]}).encode()
    ex = Exchange(stream=STREAM, request_policy=VALUE, content_key=content_key(req),
                  request_bytes=req, url="https://api.openai.com/v1/chat/completions",
                  host="api.openai.com", path="/v1/chat/completions", started_at=1,
                  call=CallContext(b"q" * 200, b"p" * 400, (Chunk("kb/1", "1", b"c" * 300),)))
    ex.status, ex.content_type, ex.chunks, ex.eof, ex.finished_at = \
        200, "application/json", [resp], True, 2
    return ex


def _capture(ex: Exchange, keys: SubjectKeys | None) -> bytes:
    event_id = new_event_id()
    if keys is None:
        event = apply_size_policy(build_event(ex, event_id, LIBRARY, None), MAX)
    else:
        event = seal_body(apply_size_policy(build_event(ex, event_id, LIBRARY, None, digests=keys),
                                            MAX, to_seal=True), keys)
    return encode("CaptureEvent", event)


def _time(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def run(sizes: list[int], n: int, rounds: int) -> dict:
    keys = SubjectKeys(new_key_id(), new_data_key())
    out = []
    for size in sizes:
        ex = _exchange(size)
        values = {"plain": _capture(ex, None), "encrypt": _capture(ex, keys)}
        head = Head.genesis(STREAM)

        def write(policy: str) -> None:
            c = validate(values[policy], STREAM.encode(), MAX)
            seal_capture(c, head, 5, W, 0, 0)

        for policy in values:  # warm up both
            _capture(ex, None if policy == "plain" else keys)
            write(policy)
        gw = {"plain": [], "encrypt": []}
        wr = {"plain": [], "encrypt": []}
        for _ in range(rounds):
            for policy in ("plain", "encrypt"):
                k = None if policy == "plain" else keys
                gw[policy].append(_time(lambda: _capture(ex, k), n))
                wr[policy].append(_time(lambda: write(policy), n))
        med = {name: {p: statistics.median(v) for p, v in d.items()}
               for name, d in (("gateway", gw), ("writer", wr))}
        out.append({
            "response_bytes": len(ex.chunks[0]),
            "capture_bytes": {p: len(v) for p, v in values.items()},
            "gateway_us_per_capture": med["gateway"],
            "gateway_ratio_encrypt_vs_plain": med["gateway"]["encrypt"] / med["gateway"]["plain"],
            "writer_us_per_capture": med["writer"],
            "writer_ratio_encrypt_vs_plain": med["writer"]["encrypt"] / med["writer"]["plain"],
        })
    return {"bench": "encrypt_cost", "n": n, "rounds": rounds, "results": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,16384,262144",
                    help="response sizes in bytes, comma separated")
    ap.add_argument("--n", type=int, default=300, help="captures per timing")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args(argv)
    result = run([int(s) for s in args.sizes.split(",")], args.n, args.rounds)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
