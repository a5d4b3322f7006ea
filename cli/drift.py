"""``evidence drift``: did a provider's model change under us, and did its calls move?

    evidence drift [the filters of evidence list: --stream PATTERN, --model M, --since T,
                    --until T, ...] [--baseline-since T --baseline-until T] [--threshold R] [--min-samples N]
                   [--format table|json]

Per provider and model (the model asked for, else the one that answered), over the records
the API key may read in the window (``--since``/``--until`` on the sealed time, as ``evidence
list``):

- **change points**: each record whose provider fingerprint (``system_fingerprint``) or served
  model (``response_model``) differs from the one before it in sealed-time order, with the
  last record before the change and the first after it (stream and seq: ``evidence inspect``
  shows and verifies them). The rule is :mod:`projections.drift`'s, the one the projector's
  metrics count. With a baseline, its records come first, so a window that only ever saw the
  new value still shows the change against the baseline's last record.
- **shifts**: median (p50) and p90 of the capture latency (``capture.duration_us``), the
  input and output tokens (from response bodies that carry usage, as ``evidence stats``) and
  the response length in bytes, of the committed calls: the window's first half against its
  second half (by sealed time, half the records each), or the baseline window against the
  window. A measure is flagged when its p50 or p90 moved by more than ``--threshold`` (a
  ratio: 0.25 is 25 %, up or down) and both sides counted at least ``--min-samples`` values;
  fewer are reported, never flagged.

Reads every record of the window (and baseline) through the API with its bytes (100 a page):
narrow it with ``--stream``, ``--model`` and the times. What it reads is the projection's word;
``evidence inspect`` verifies a record.

Exit codes: 0 nothing changed or shifted, 1 the API unreachable or the key refused (or the
stream not found), 2 usage error, 3 a change point or a flagged shift was found.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

from projections.drift import Change, ChangeWatch, Observation, model_of

from .records import add_filter_options, filter_params, parse_time, records, table
from .stats import duration_us, percentiles, tokens_of
from .tlog import CliError, add_common, api_client, fail, stack_env

__all__ = ["HELP", "MEASURES", "Shift", "add_arguments", "changes", "measures", "observation",
           "report", "run", "shifts", "text"]

HELP = "changes of provider fingerprint or served model, and shifts in latency, tokens, length"

EXIT_OK, EXIT_USAGE, EXIT_FOUND = 0, 2, 3
MEASURES = ("latency_ms", "input_tokens", "output_tokens", "response_length")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_filter_options(p)
    g = p.add_argument_group("drift")
    g.add_argument("--baseline-since", metavar="TIME",
                   help="compare against the records sealed from TIME (with --baseline-until) "
                        "instead of the window's first half")
    g.add_argument("--baseline-until", metavar="TIME", help="the baseline's end (exclusive)")
    g.add_argument("--threshold", type=float, default=0.25, metavar="R",
                   help="flag a p50 or p90 that moved by more than R (a ratio; default 0.25)")
    g.add_argument("--min-samples", type=int, default=5, metavar="N",
                   help="flag a measure only when each side counted N values (default 5)")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="tables (default) or JSON")
    add_common(p)


def observation(record: dict[str, Any]) -> Observation:
    """What a record as the API serves it says about the model that answered."""
    return Observation(record["stream"], record["seq"], record["occurred_at_us"],
                       (record.get("provider") or {}).get("name") or "(none)",
                       model_of(record.get("model_id"), record.get("response_model")),
                       record.get("fingerprint") or None, record.get("response_model") or None)


def measures(record: dict[str, Any]) -> dict[str, float]:
    """The measures a committed record (with its bytes) gives; none for another outcome."""
    if record.get("outcome") != "COMMITTED":
        return {}
    out: dict[str, float] = {}
    duration = duration_us(record)
    if duration is not None:
        out["latency_ms"] = duration / 1000
    _, counts = tokens_of(record)
    for name in ("input", "output"):
        if counts and name in counts:
            out[f"{name}_tokens"] = counts[name]
    if isinstance(record.get("response_length"), int):
        out["response_length"] = record["response_length"]
    return out


def changes(observations: Iterable[Observation]) -> list[Change]:
    """The change points of ``observations`` taken in sealed-time order."""
    ordered = sorted(observations, key=lambda o: (o.at_us, o.stream, o.seq))
    return ChangeWatch().see_all(ordered)


@dataclass(frozen=True)
class Shift:
    """One measure of one provider and model, before against after."""

    measure: str
    before: dict[str, Any]
    after: dict[str, Any]
    change: dict[str, float | None]
    """per percentile, (after - before) / before; None when not comparable"""
    flagged: bool

    def to_dict(self) -> dict[str, Any]:
        return {"measure": self.measure, "before": self.before, "after": self.after,
                "change": self.change, "flagged": self.flagged}


def _ratio(old: float | None, new: float | None) -> float | None:
    if old is None or new is None:
        return None
    if old == 0:
        return 0.0 if new == 0 else math.inf
    return (new - old) / old


def shifts(before: list[dict[str, float]], after: list[dict[str, float]], threshold: float,
           min_samples: int) -> list[Shift]:
    """Per measure, p50 and p90 of ``before`` against ``after`` (each a list of
    :func:`measures`); flagged past ``threshold`` when each side counted ``min_samples``."""
    out = []
    for name in MEASURES:
        b = percentiles(m[name] for m in before if name in m)
        a = percentiles(m[name] for m in after if name in m)
        if not b["counted"] and not a["counted"]:
            continue
        change = {p: _ratio(b[p], a[p]) for p in ("p50", "p90")}
        enough = b["counted"] >= min_samples and a["counted"] >= min_samples
        flagged = enough and any(c is not None and abs(c) > threshold for c in change.values())
        out.append(Shift(name, {k: b[k] for k in ("counted", "p50", "p90")},
                         {k: a[k] for k in ("counted", "p50", "p90")}, change, flagged))
    return out


def _at(us: int) -> str:
    return (_EPOCH + timedelta(microseconds=us)).isoformat()


def _change_dict(c: Change) -> dict[str, Any]:
    def side(s: tuple[str, int, int]) -> dict[str, Any]:
        return {"stream": s[0], "seq": s[1], "sealed": _at(s[2])}

    return {"kind": c.kind, "old": c.old, "new": c.new, "at": _at(c.at_us),
            "before": side(c.before), "after": side(c.after)}


def report(window: list[dict[str, Any]], baseline: list[dict[str, Any]] | None,
           threshold: float, min_samples: int) -> dict[str, Any]:
    """The drift report of ``window`` (records with their bytes), against ``baseline`` or,
    without one, its first half against its second half."""
    groups: dict[tuple[str, str], dict[str, list]] = {}
    for side, found in (("baseline", baseline or []), ("window", window)):
        for r in found:
            obs = observation(r)
            g = groups.setdefault(obs.key, {"baseline": [], "window": []})
            g[side].append((obs, measures(r)))
    models = []
    for (provider, model), g in sorted(groups.items()):
        in_window = {(o.stream, o.seq) for o, _ in g["window"]}
        found = [c for c in changes(o for o, _ in g["baseline"] + g["window"])
                 if (c.after[0], c.after[1]) in in_window]
        ordered = [m for _, m in sorted(g["window"], key=lambda x: (x[0].at_us, x[0].stream,
                                                                     x[0].seq))]
        if baseline is None:
            half = len(ordered) // 2
            before, after = ordered[:half], ordered[half:]
        else:
            before, after = [m for _, m in g["baseline"]], ordered
        moved = shifts(before, after, threshold, min_samples) if before and after else []
        models.append({
            "provider": provider, "model": model, "records": len(g["window"]),
            "baseline_records": None if baseline is None else len(g["baseline"]),
            "fingerprints": sorted({o.fingerprint for o, _ in g["window"] if o.fingerprint}),
            "served_models": sorted({o.served_model for o, _ in g["window"] if o.served_model}),
            "changes": [_change_dict(c) for c in found],
            "shifts": [s.to_dict() for s in moved]})
    n_changes = sum(len(m["changes"]) for m in models)
    n_shifts = sum(s["flagged"] for m in models for s in m["shifts"])
    return {"compared": "halves" if baseline is None else "baseline",
            "threshold": threshold, "min_samples": min_samples, "models": models,
            "changes": n_changes, "shifts_flagged": n_shifts,
            "found": bool(n_changes or n_shifts)}


def _num(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:.1f}"
    return str(v)


def _pct(v: float | None) -> str:
    if v is None:
        return "-"
    return "+inf%" if math.isinf(v) else f"{v * 100:+.0f}%"


def text(rep: dict[str, Any]) -> str:
    """The report as tables."""
    out = ["=== models ===", table([
        {"provider": m["provider"], "model": m["model"], "records": str(m["records"]),
         "fingerprints": ",".join(m["fingerprints"]) or "-",
         "served_models": ",".join(m["served_models"]) or "-"} for m in rep["models"]],
        (("provider", 10), ("model", 16), ("records", 7), ("fingerprints", 14),
         ("served_models", 16))), "", "=== change points ==="]
    rows = [{"provider": m["provider"], "model": m["model"], "kind": c["kind"],
             "old -> new": f"{c['old']} -> {c['new']}", "at": c["at"],
             "last before": f"{c['before']['stream']}@{c['before']['seq']}",
             "first after": f"{c['after']['stream']}@{c['after']['seq']}"}
            for m in rep["models"] for c in m["changes"]]
    out += [table(rows, (("provider", 10), ("model", 16), ("kind", 12), ("old -> new", 20),
                         ("at", 32), ("last before", 14), ("first after", 14)))
            if rows else "(none)", ""]
    versus = ("first half -> second half" if rep["compared"] == "halves"
              else "baseline -> window")
    out.append(f"=== shifts ({versus}; flagged past {rep['threshold'] * 100:g}% with "
               f"{rep['min_samples']}+ values a side) ===")
    rows = [{"provider": m["provider"], "model": m["model"], "measure": s["measure"],
             "n": f"{s['before']['counted']}/{s['after']['counted']}",
             "p50": f"{_num(s['before']['p50'])} -> {_num(s['after']['p50'])} "
                    f"({_pct(s['change']['p50'])})",
             "p90": f"{_num(s['before']['p90'])} -> {_num(s['after']['p90'])} "
                    f"({_pct(s['change']['p90'])})",
             "flagged": "SHIFT" if s["flagged"] else ""}
            for m in rep["models"] for s in m["shifts"]]
    out += [table(rows, (("provider", 10), ("model", 16), ("measure", 15), ("n", 7),
                         ("p50", 24), ("p90", 24), ("flagged", 7))) if rows else "(none)", ""]
    out.append(f"{rep['changes']} change point{'' if rep['changes'] == 1 else 's'}, "
               f"{rep['shifts_flagged']} shift{'' if rep['shifts_flagged'] == 1 else 's'} "
               f"flagged")
    return "\n".join(out)


def _baseline_args(args: argparse.Namespace) -> argparse.Namespace | None:
    if (args.baseline_since is None) != (args.baseline_until is None):
        raise CliError(EXIT_USAGE, "--baseline-since and --baseline-until go together")
    if args.baseline_since is None:
        return None
    since = parse_time(args.baseline_since, "--baseline-since")
    until = parse_time(args.baseline_until, "--baseline-until")
    if datetime.fromisoformat(since) >= datetime.fromisoformat(until):
        raise CliError(EXIT_USAGE, f"--baseline-since {args.baseline_since} is not before "
                                   f"--baseline-until {args.baseline_until}")
    return argparse.Namespace(**{**vars(args), "since": since, "until": until})


def run(args: argparse.Namespace) -> int:
    try:
        if not (args.threshold > 0 and math.isfinite(args.threshold)):
            raise CliError(EXIT_USAGE, f"--threshold must be a ratio above 0, got "
                                       f"{args.threshold}")
        if args.min_samples < 1:
            raise CliError(EXIT_USAGE, f"--min-samples must be 1 or more, got "
                                       f"{args.min_samples}")
        listing = filter_params(args)
        base_args = _baseline_args(args)
        base_listing = None if base_args is None else filter_params(base_args)
        api = api_client(args, stack_env())

        def read(lst: Any) -> list[dict[str, Any]]:
            return [r for r in records(api, lst, None, None, with_bytes=True)
                    if isinstance(r, dict)]

        window = read(listing)
        baseline = None if base_listing is None else read(base_listing)
    except CliError as e:
        return fail("drift", e)
    rep = report(window, baseline, args.threshold, args.min_samples)
    if args.format == "json":
        print(json.dumps(_finite(rep), indent=2))
    else:
        print(text(rep))
        print(f"({len(window)} record{'' if len(window) == 1 else 's'} in the window)",
              file=sys.stderr)
    return EXIT_FOUND if rep["found"] else EXIT_OK


def _finite(v: Any) -> Any:
    """JSON has no infinity: a ratio from 0 to something is written as the string "inf"."""
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v
