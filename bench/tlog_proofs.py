"""Proofs at scale: ``python -m bench.tlog_proofs [--leaves 1000000]``.

Builds a read model of its own (random schemas, dropped afterwards) holding one stream whose
Merkle tree has ``--leaves`` records (every perfect subtree hash in ``tree_nodes``, bulk
loaded by COPY) and a checkpoint of it signed with a fresh log key, starts the API in a
subprocess with one extra route, ``GET /_bench/pk/{offset}`` (one primary-key select through
the same pool: the baseline), and drives, for ``--seconds`` each with ``--concurrency``
clients in this process:

- ``GET /streams/{s}/proof/inclusion?seq=<random>&tree_size=<leaves>``
- ``GET /streams/{s}/proof/consistency?first=<random>&second=<leaves>``
- the bare primary-key route

Prints req/s, p50 and p99 per route, each proof route's throughput as a ratio of the bare
route's, and the proof sizes (hashes, bytes). A sample of the proofs served is verified with
``evidence_contract.merkle`` against the signed root, so a fast wrong answer cannot pass.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api_verify import SERVE_CODE, _drive  # noqa: E402
from devstack.ports import free_port  # noqa: E402

STREAM = "bench:proofs"


def _leaf(i: int) -> bytes:
    """The synthetic leaf hash of leaf ``i`` (proof latency does not depend on its value)."""
    return hashlib.sha256(b"bench leaf " + i.to_bytes(8, "big")).digest()


def _levels(leaves: list[bytes]) -> list[list[bytes]]:
    """Every perfect subtree hash, level by level (level 0: the leaves)."""
    from evidence_contract.merkle import node_hash

    levels = [leaves]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append([node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)])
    return levels


def build(conn, gen: str, n: int, key) -> bytes:
    """Load the tree of ``n`` leaves and its signed checkpoint; returns the root."""
    from evidence_contract.merkle import root_from
    from evidence_contract.note import Checkpoint, format_checkpoint, format_note, sign
    from evidence_contract.tlog import checkpoint_origin

    t0 = time.perf_counter()
    leaves = [_leaf(i) for i in range(n)]
    levels = _levels(leaves)
    with conn.cursor() as cur, cur.copy(
            f'copy "{gen}".tree_nodes (stream, level, idx, hash) from stdin') as copy:
        for level, hashes in enumerate(levels):
            for idx, h in enumerate(hashes):
                copy.write_row((STREAM, level, idx, h))
    root = root_from(n, lambda lv, i: levels[lv][i])
    conn.execute(f'insert into "{gen}".trees (stream, size, root) values (%s, %s, %s)',
                 (STREAM, n, root))
    text = format_checkpoint(Checkpoint(checkpoint_origin(key.name, STREAM), n, root))
    note = format_note(text, [sign(key, text)])
    conn.execute(
        f'insert into "{gen}".checkpoints (stream, tree_size, root, note, log_partition, '
        f"log_offset, root_matches) values (%s, %s, %s, %s, 0, 0, true)",
        (STREAM, n, root, note))
    conn.execute("analyze")
    nodes = sum(len(level) for level in levels)
    print(f"tree of {n:,} leaves: {nodes:,} nodes loaded in {time.perf_counter() - t0:.1f} s",
          flush=True)
    return root


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--leaves", type=int, default=1_000_000)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--database-url", default=None)
    args = p.parse_args(argv)

    import httpx

    from devstack import StackConfig, read_env
    from evidence_contract.merkle import tree_root, verify_consistency, verify_inclusion
    from evidence_contract.note import format_vkey, generate_signer
    from tests.fixtures.readmodel import ReadModel

    url = (args.database_url or os.environ.get("EVIDENCE_DATABASE_URL")
           or read_env(StackConfig.from_env()).get("EVIDENCE_DATABASE_URL"))
    if not url:
        print("no database: run `make up` or set EVIDENCE_DATABASE_URL", file=sys.stderr)
        return 1
    n = args.leaves
    key = generate_signer("bench.local/log")
    api_key = "bench-" + os.urandom(24).hex()
    with ReadModel(url) as rm, tempfile.TemporaryDirectory() as tmp:
        root = build(rm.conn, rm.gen, n, key)
        vkey_file = Path(tmp) / "log.vkey"
        vkey_file.write_text(format_vkey(key.verifier) + "\n")
        port = free_port()
        env = {**os.environ, "EVIDENCE_DATABASE_URL": url, "EVIDENCE_API_KEY": api_key,
               "EVIDENCE_API_KEY_STREAMS": "bench:*", "EVIDENCE_PG_VIEWS_SCHEMA": rm.views,
               "EVIDENCE_API_KEYS_FILE": "", "BENCH_PORT": str(port),
               "EVIDENCE_LOG_NAME": key.name, "EVIDENCE_LOG_VERIFIER_KEY_FILE": str(vkey_file),
               "EVIDENCE_LOG_SIGNING_KEY_FILE": ""}
        server = subprocess.Popen([sys.executable, "-c", SERVE_CODE], env=env, cwd=ROOT)
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(200):
                try:
                    if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            auth = {"Authorization": f"Bearer {api_key}"}
            # correctness first: a sample of served proofs checks against the signed root
            sizes = {}
            for seq in [1, n, *random.sample(range(1, n + 1), 20)]:
                r = httpx.get(f"{base}/streams/{STREAM}/proof/inclusion",
                              params={"seq": seq, "tree_size": n}, headers=auth, timeout=10)
                r.raise_for_status()
                body = r.json()
                verify_inclusion(seq - 1, n, bytes.fromhex(body["leaf_hash"]),
                                 [bytes.fromhex(h) for h in body["hashes"]], root)
                sizes.setdefault("inclusion", []).append(len(body["hashes"]))
            for first in [1, n - 1, *random.sample(range(1, n), 20)]:
                r = httpx.get(f"{base}/streams/{STREAM}/proof/consistency",
                              params={"first": first, "second": n}, headers=auth, timeout=10)
                r.raise_for_status()
                sizes.setdefault("consistency", []).append(len(r.json()["hashes"]))
            # one consistency proof checked end to end: the first root recomputed from
            # the same synthetic leaves (the served proof must lead from it to the signed root)
            first = n // 3
            body = httpx.get(f"{base}/streams/{STREAM}/proof/consistency",
                             params={"first": first, "second": n}, headers=auth,
                             timeout=10).json()
            first_root = tree_root(_leaf(i) for i in range(first))
            verify_consistency(first, n, [bytes.fromhex(h) for h in body["hashes"]],
                               first_root, root)

            def inclusion():
                return ("GET", f"/streams/{STREAM}/proof/inclusion?seq="
                               f"{random.randint(1, n)}&tree_size={n}", None)

            def consistency():
                return ("GET", f"/streams/{STREAM}/proof/consistency?first="
                               f"{random.randint(1, n)}&second={n}", None)

            def bare():
                return ("GET", "/_bench/pk/0", None)

            results = {}
            for name, make in (("bare", bare), ("inclusion", inclusion),
                               ("consistency", consistency)):
                asyncio.run(_drive(base, api_key, make, args.warmup, args.concurrency))
                results[name] = asyncio.run(_drive(base, api_key, make, args.seconds,
                                                   args.concurrency))
        finally:
            server.terminate()
            server.wait(10)
    print(f"\nproofs over a tree of {n:,} records (concurrency {args.concurrency}):")
    for name, r in results.items():
        ratio = r["rps"] / results["bare"]["rps"] if results["bare"]["rps"] else float("nan")
        print(f"  {name:12s} {r['rps']:8.0f} req/s  p50 {r['p50_ms']:6.2f} ms  "
              f"p99 {r['p99_ms']:6.2f} ms  errors {r['errors']}  "
              f"ratio vs bare {ratio:.2f}x")
    for kind, counts in sizes.items():
        print(f"  {kind} proof: {min(counts)}-{max(counts)} hashes "
              f"({min(counts) * 32}-{max(counts) * 32} bytes)")
    return 0 if all(r["errors"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
