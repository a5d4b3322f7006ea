"""``evidence stats``: per stream and per model, what the records say.

    evidence stats [filters of `evidence list`] [--format table|json]

For each stream and each model (the model asked for, else the one that answered) among the
records the filters keep: how many, their outcomes, the capture's latency (``capture.
duration_us`` of the sealed record: from the request's first byte to the response's last)
and token percentiles (p50, p90, p99, max), and the first and last sealed time.

Tokens are read from the response bodies with the capture client's parser
(``evidence_client.semconv.response_attributes``: OpenAI chat and responses, Anthropic
messages, whole or streamed). A body that is not there (hash-only, truncated, encrypted,
erased, a failed call) or holds no usage is skipped, and the output says how many were
counted of how many (``tokens.counted``, ``tokens.without_body``, ``tokens.without_usage``);
so for the latency (``latency_ms.counted``: a record whose log message the API withholds
under a redaction policy has none).

Reads every record the filters keep through the API (``include=bytes``, 100 a page): narrow a
large log with ``--stream``, ``--since`` and ``--until``. What it counts is the projection's
word, as ``evidence list``.

Exit codes: 0, 1 the API unreachable or the key refused (or the stream not found), 2 usage.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from .records import OUTCOMES, add_filter_options, filter_params, records, table
from .tlog import CliError, add_common, api_client, fail, stack_env

__all__ = ["HELP", "Group", "add_arguments", "percentiles", "run", "summarise", "tokens_of"]

HELP = "counts, outcomes, latency and token percentiles, first/last, per stream and model"

EXIT_OK = 0
PERCENTILES = (50, 90, 99)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_filter_options(p)
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="tables (default) or JSON")
    add_common(p)


def percentiles(values: Iterable[float]) -> dict[str, Any]:
    """``{"counted": n, "p50": .., "p90": .., "p99": .., "max": ..}`` by the nearest-rank
    method (a value that occurred); the percentiles null when there are none."""
    ordered = sorted(values)
    out: dict[str, Any] = {"counted": len(ordered)}
    for p in PERCENTILES:
        out[f"p{p}"] = ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else None
    out["max"] = ordered[-1] if ordered else None
    return out


def tokens_of(record: dict[str, Any]) -> tuple[str, dict[str, int] | None]:
    """``("counted", {"input": n, "output": m})`` from a record's response body (the API's,
    with ``include=bytes``), or ``("without_body", None)`` / ``("without_usage", None)``."""
    from urllib.parse import urlsplit

    from evidence_client.semconv import response_attributes
    from evidence_contract.outputs import wire_format

    if record.get("content") != "plain" or not record.get("response_b64"):
        return "without_body", None
    kind = wire_format(urlsplit((record.get("provider") or {}).get("endpoint") or "").path)
    attrs = response_attributes(kind, base64.b64decode(record["response_b64"]),
                                bool(record.get("streamed")))
    counts = {name: attrs[key] for name, key in (("input", "gen_ai.usage.input_tokens"),
                                                  ("output", "gen_ai.usage.output_tokens"))
              if key in attrs}
    return ("counted", counts) if counts else ("without_usage", None)


def duration_us(record: dict[str, Any]) -> int | None:
    """``capture.duration_us`` of the sealed record (its log message, served with
    ``include=bytes``); None when the message is withheld or has none."""
    from evidence_contract import DecodeError, decode

    if not record.get("record_b64"):
        return None
    try:
        _, rec = decode(base64.b64decode(record["record_b64"]))
    except (DecodeError, ValueError):
        return None
    value = ((rec.get("body") or {}).get("capture") or {}).get("duration_us")
    return value if isinstance(value, int) and value >= 0 else None


@dataclass
class Group:
    """What is counted of one stream or one model."""

    count: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    latency_ms: list[float] = field(default_factory=list)
    input_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=lambda: {
        "counted": 0, "without_body": 0, "without_usage": 0})
    first: str | None = None
    last: str | None = None
    first_us: int | None = None
    last_us: int | None = None

    def add(self, record: dict[str, Any], duration: int | None,
            tokens: tuple[str, dict[str, int] | None]) -> None:
        self.count += 1
        self.outcomes[record["outcome"]] = self.outcomes.get(record["outcome"], 0) + 1
        if duration is not None:
            self.latency_ms.append(duration / 1000)
        state, counts = tokens
        self.tokens[state] += 1
        if counts:
            if "input" in counts:
                self.input_tokens.append(counts["input"])
            if "output" in counts:
                self.output_tokens.append(counts["output"])
        at = record["occurred_at_us"]
        if self.first_us is None or at < self.first_us:
            self.first_us, self.first = at, record["occurred_at"]
        if self.last_us is None or at > self.last_us:
            self.last_us, self.last = at, record["occurred_at"]

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "outcomes": self.outcomes,
                "latency_ms": percentiles(self.latency_ms),
                "tokens": {**self.tokens, "input": percentiles(self.input_tokens),
                           "output": percentiles(self.output_tokens)},
                "first_sealed": self.first, "last_sealed": self.last}


def model_of(record: dict[str, Any]) -> str:
    """The model a record is counted under: the one asked for, else the one that answered."""
    return record.get("model_id") or record.get("response_model") or "(none)"


def summarise(found: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Per stream, per model and in total, of ``found`` (records with their bytes)."""
    streams: dict[str, Group] = {}
    models: dict[str, Group] = {}
    total = Group()
    for record in found:
        duration, tokens = duration_us(record), tokens_of(record)
        for group in (streams.setdefault(record["stream"], Group()),
                      models.setdefault(model_of(record), Group()), total):
            group.add(record, duration, tokens)
    return {"total": total.to_dict(),
            "streams": {k: g.to_dict() for k, g in sorted(streams.items())},
            "models": {k: g.to_dict() for k, g in sorted(models.items())}}


def _num(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if isinstance(v, float) else str(v)


_COLUMNS = (("name", 16), ("count", 5), ("committed", 9), ("failed", 6), ("unknown", 7),
            ("latency_ms p50/p90/p99", 22), ("in_tokens p50/p90/p99", 21),
            ("out_tokens p50/p90/p99", 22), ("tokens_counted", 14), ("first_sealed", 25),
            ("last_sealed", 25))


def _row(name: str, g: dict[str, Any]) -> dict[str, str]:
    def trio(p: dict[str, Any]) -> str:
        return "/".join(_num(p[f"p{q}"]) for q in PERCENTILES)

    t = g["tokens"]
    return {"name": name, "count": str(g["count"]),
            "committed": str(g["outcomes"].get("COMMITTED", 0)),
            "failed": str(g["outcomes"].get("FAILED", 0)),
            "unknown": str(g["outcomes"].get("UNKNOWN", 0)),
            "latency_ms p50/p90/p99": trio(g["latency_ms"]),
            "in_tokens p50/p90/p99": trio(t["input"]),
            "out_tokens p50/p90/p99": trio(t["output"]),
            "tokens_counted": f"{t['counted']}/{g['count']}",
            "first_sealed": g["first_sealed"] or "-", "last_sealed": g["last_sealed"] or "-"}


def text(summary: dict[str, Any]) -> str:
    """The tables of a summary, with what was skipped."""
    out = []
    for title, key in (("streams", "streams"), ("models", "models")):
        rows = [_row(name, g) for name, g in summary[key].items()]
        out += [f"=== per {title[:-1]} ===", table(rows, _COLUMNS), ""]
    t = summary["total"]
    out.append(f"total: {t['count']} records; latency counted for {t['latency_ms']['counted']}; "
               f"tokens counted for {t['tokens']['counted']} (response body not there: "
               f"{t['tokens']['without_body']}, no usage in it: {t['tokens']['without_usage']})")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    try:
        listing = filter_params(args)
        api = api_client(args, stack_env())
        found = [r for r in records(api, listing, None, None, with_bytes=True)
                 if isinstance(r, dict)]
    except CliError as e:
        return fail("stats", e)
    summary = summarise(found)
    print(json.dumps(summary, indent=2) if args.format == "json" else text(summary))
    return EXIT_OK
