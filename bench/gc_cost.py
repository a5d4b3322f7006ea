"""What does the cycle collector cost the projector? ``python bench/gc_cost.py``.

The projector's per-record Python work, decode (the compiled row path where installed) and
fold, over ``--records`` records in batches of 5,000 kept alive as a rebuild keeps them,
each round in a fresh process: CPython's default collector thresholds (the baseline,
measured in the same run) against ``server.runtime.tune_gc``. Prints microseconds a record
per setting (median over ``--rounds``) and the ratio tuned / default, as one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _child(records: int, tuned: bool) -> float:
    from projections.fold import decode_messages, fold
    from server.runtime import tune_gc
    from tests.fixtures.log import chain

    recs = chain({f"s{i}": records // 40 for i in range(40)}, response=os.urandom(1024))
    msgs = [(i % 3, i, r.value) for i, r in enumerate(recs)]
    del recs
    if tuned:
        tune_gc()
    kept = []
    t0 = time.perf_counter()
    for k in range(0, len(msgs), 5000):
        decoded = decode_messages(msgs[k:k + 5000])
        fold({}, decoded)
        kept.append(decoded)
    return (time.perf_counter() - t0) / len(msgs) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", choices=("default", "tuned"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(_child(args.records, args.child == "tuned"))
        return 0
    got: dict[str, list[float]] = {"default": [], "tuned": []}
    for _ in range(args.rounds):
        for setting in got:  # alternating, so drift in the machine's load hits both
            out = subprocess.run([sys.executable, __file__, "--records", str(args.records),
                                  "--child", setting], capture_output=True, text=True,
                                 check=True)
            got[setting].append(float(out.stdout.strip().splitlines()[-1]))
    med = {k: statistics.median(v) for k, v in got.items()}
    print(json.dumps({"records": args.records, "rounds": args.rounds,
                      "us_per_record": {k: round(v, 2) for k, v in med.items()},
                      "tuned_over_default": round(med["tuned"] / med["default"], 3)}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
