"""What does a capture's encode cost the gateway? ``python bench/encode_cost.py``.

``encode("CaptureEvent", ...)`` of a capture with a ``--size`` byte request and response
(its Avro written by the compiled writer, ``evidence_seal_native.AvroWriter``, where it is
built: ``compiled`` says whether it was), against three baselines measured in the same run
and process: the generated Python writer it takes without it (``generated``: what ``encode``
did until 2026-12-05, and does with ``EVIDENCE_NATIVE=0``), the path that writer replaced
(its bytes proven by the strict reader reading them back and comparing every value,
``codec._same``) and fastavro's own ``schemaless_writer``. Prints microseconds a capture for
each (median over ``--rounds``) and the ratios, as one JSON document.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure(size: int, rounds: int, number: int) -> dict[str, object]:
    import fastavro

    from evidence_contract import encode
    from evidence_contract._avro import SCHEMAS
    from evidence_contract import codec
    from evidence_contract.codec import _FAST, _FAST_WRITE, _HEADER_SIZE, _same
    from evidence_contract.vectors import committed_event

    event = committed_event()
    event["request_bytes"] = os.urandom(size)
    event["response_bytes"] = os.urandom(size)
    write, read = _FAST_WRITE["CaptureEvent"], _FAST["CaptureEvent"]
    parsed = SCHEMAS["CaptureEvent"].parsed

    def proven() -> bytes:  # the replaced path: write, read back, compare
        data = write(event)
        got = read(data, 0)
        assert got is not None and _same(got[0], event)
        return data

    def by_fastavro() -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, event, strict_allow_default=True)
        return out.getvalue()

    def generated() -> bytes:  # encode without the compiled writer
        native = codec._NATIVE_WRITE.pop("CaptureEvent", None)
        try:
            return encode("CaptureEvent", event)
        finally:
            if native is not None:
                codec._NATIVE_WRITE["CaptureEvent"] = native

    assert encode("CaptureEvent", event)[_HEADER_SIZE:] == proven() == by_fastavro()
    assert generated() == encode("CaptureEvent", event)
    runs = {"encode": lambda: encode("CaptureEvent", event), "generated": generated,
            "write_and_read_back": proven, "fastavro": by_fastavro}
    us = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():  # interleaved, so drift on a shared machine hits all
            us[name].append(timeit.timeit(fn, number=number) / number * 1e6)
    med = {name: round(statistics.median(v), 2) for name, v in us.items()}
    return {"size": size, "rounds": rounds, "number": number,
            "compiled": "CaptureEvent" in codec._NATIVE_WRITE, "us_per_capture": med,
            "generated_over_encode": round(med["generated"] / med["encode"], 2),
            "read_back_path_over_encode": round(med["write_and_read_back"] / med["encode"], 2),
            "fastavro_over_encode": round(med["fastavro"] / med["encode"], 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024, help="request and response bytes")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--number", type=int, default=5000, help="encodes a round")
    args = ap.parse_args(argv)
    print(json.dumps(measure(args.size, args.rounds, args.number), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
