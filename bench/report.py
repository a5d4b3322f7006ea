"""Write a run's results: ``<stem>.json`` (everything), ``<stem>.md`` (the table people read)
and ``<stem>.png`` (the same-run ratios against their targets)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _fmt(v: Any, digits: int = 0) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _split(x: dict[str, Any] | None) -> str:
    """A latency split's "p50 / p99" cell; "–" where it was not measured (an older result,
    or a stream whose intake could not be matched to its sends)."""
    if not x or x.get("p50") is None:
        return "–"
    return f"{x['p50']} / {x['p99']}"


def _speed(speed: dict[str, Any]) -> list[str]:
    """The speed probe's line (``bench.services.speed_probe``), if the run has one."""
    if not speed.get("start"):
        return []
    a, b = speed["start"], speed.get("end") or {}
    end = (f"; at the end {b['python_loop_ms']} ms and {_fmt(b['sha256_mib_s'])} MiB/s"
           if b else "")
    return ["", f"Machine speed, one core (`bench.services.speed_probe`: a fixed pure-Python "
            f"loop, and SHA-256): at the start {a['python_loop_ms']} ms and "
            f"{_fmt(a['sha256_mib_s'])} MiB/s{end}. The ratios below compare within this run; "
            f"compare absolute figures (the latency budget is one) only with a run of a like "
            f"speed."]


def machine_line(m: dict[str, Any]) -> str:
    """The report's line on the machine, and on the dev stack's services when they ran
    beside the bench (``bench.run.dev_services``)."""
    line = (f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB RAM, "
            f"{m['os']}, Python {m['python']}. Load average at start: {m['loadavg']}.")
    if m.get("dev_services"):
        line += (f" **The dev stack's own services ran beside the bench** "
                 f"({', '.join(m['dev_services'])}): they took some of the cores it measured, "
                 f"so compare this run only with runs that had them too.")
    return line


STACK_HEAVY_MIB = 1024
"""Topic data or a database above this much before a run is called out beside its figures
(``stack_line``)."""


def stack_line(state: dict[str, Any] | None) -> list[str]:
    """What the stack held before the run (``bench.services.stack_state``), called out when it
    is much: the broker's and PostgreSQL's CPU a capture move with it."""
    if not state:
        return []
    line = (f"The stack before the run: {_fmt(state.get('topics'))} topics "
            f"({_fmt(state.get('partitions'))} partitions"
            + (f", {_fmt(state['topic_mib'])} MiB" if state.get("topic_mib") is not None else "")
            + f") besides Kafka's own, {_fmt(state.get('schemas'))} PostgreSQL schemas, a "
            f"database of {_fmt(state.get('database_mib'))} MiB.")
    if max(state.get("topic_mib") or 0, state.get("database_mib") or 0) > STACK_HEAVY_MIB:
        line += (" **It carried other runs' data**: the broker's and PostgreSQL's CPU a "
                 "capture were up to twice as high beside the leftovers of earlier runs "
                 "(docs/performance.md); compare this run only with runs on a like stack.")
    return ["", line]


def markdown(r: dict[str, Any]) -> str:
    m, cfg = r["machine"], r["config"]
    lines = [f"# evidence-store bench, {r['started']}", "",
             machine_line(m), *stack_line(r.get("stack_before")), "",
             f"Run: {'QUICK' if cfg['quick'] else 'full'}, {cfg['captures']:,} captures of "
             f"{cfg['response_bytes']} B responses over {cfg['streams']} streams, "
             f"{cfg['partitions']} partitions; wall time {r.get('wall_s', 0):.0f} s."
             + (f" CPU steal over the run: {r['steal_pct']}% of the cores' time (what the "
                "hypervisor gave to other guests on the host: a run with much of it is slower "
                "throughout; each section says how much its timed parts had)."
                if r.get("steal_pct") is not None else ""),
             *_speed(r.get("speed") or {}), "",
             "## Ratios (same run) against targets", "",
             "| measure | value | baseline | ratio | target | met |", "|---|---|---|---|---|---|"]
    for t in r["targets"]:
        lines.append(f"| {t['name']} | {t['value']} | {t['baseline']} | {t['ratio']} | "
                     f"{t['target']} | {'yes' if t['met'] else '**no**'} |")
    s = r["sealing"]
    lines += ["", "## 1. Sealing throughput", "",
              "| what | records/s | seconds | CPU steal % |", "|---|---|---|---|",
              f"| writer (validate, seal, chain, exactly-once txn) | {_fmt(s['writer']['records_per_s'])} "
              f"| {s['writer']['seconds']} | {_fmt(s['writer'].get('steal_pct'), 1)} |"]
    for p in s["plain_producer"]:
        lines.append(f"| plain idempotent producer, same bytes ({p['when']}) | "
                     f"{_fmt(p['records_per_s'])} | {p['seconds']} | {_fmt(p.get('steal_pct'), 1)} |")
    if s.get("eventsourcing"):
        e = s["eventsourcing"]
        lines.append(f"| eventsourcing PostgreSQL recorder, batches of {e['batch']} | "
                     f"{_fmt(e['records_per_s'])} | {e['seconds']} | – |")
    lines += ["", "## 2. Capture-to-queryable latency (Recorder → writer → projector → API)", "",
              "| offered/s | achieved/s | gateways | captures | visible | p50 ms | p95 ms | p99 ms | max ms | send → sealed p50 / p99 ms | sealed → visible p50 / p99 ms | send → produced p50 / p99 ms | produced → sealed p50 / p99 ms |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in r["latency"]:
        offered = _fmt(x["rate_offered"]) + (" (writer max)" if x.get("writer_max") else "")
        splits = " | ".join(_split(x.get(k)) for k in (
            "send_to_sealed_ms", "sealed_to_visible_ms", "send_to_produced_ms",
            "produced_to_sealed_ms"))
        lines.append(f"| {offered} | {_fmt(x['rate_achieved'])} | {x.get('gateways', 1)} | "
                     f"{x['captures']} | {x['visible']} | {x['p50_ms']} | {x['p95_ms']} | "
                     f"{x['p99_ms']} | {x['max_ms']} | {splits} |")
    lines += ["", "Each latency is split at the writer's seal (`occurred_at`), and send → sealed "
              "again at the capture's hand-off to Kafka (its intake record's timestamp, set when "
              "the gateway's Recorder produced it): send → produced is the gateway's part (the "
              "journal, the spool's append and fsync on the disk the whole stack shares here), "
              "produced → sealed the producer's linger, the writer's fetch, batch and "
              "transaction."]
    settles = [x["settled"] for x in r["latency"] if x.get("settled")]
    if settles:
        lines += ["", "Before each rate the disk was settled (a PostgreSQL checkpoint, `sync`, "
                  "writeback awaited): dirty MiB before → after: "
                  + "; ".join(f"{_fmt(x['rate_offered'])}/s {x['settled']['dirty_mib_before']}"
                              f" → {x['settled']['dirty_mib_after']}"
                              for x in r["latency"] if x.get("settled")) + "."]
    vac = (r.get("projector_catch_up") or {}).get("vacuumed")
    if vac:
        lines += ["", f"Before the first rate the projector caught up with the sealed log "
                  f"({_fmt(r['projector_catch_up']['records'])} records in "
                  f"{r['projector_catch_up']['seconds']} s), then its {vac['tables']} tables were "
                  f"vacuumed and analysed ({vac['seconds']} s): the work autovacuum would "
                  "otherwise have done to that bulk load in the windows."]
    cpu_rows = [x for x in r["latency"] if x.get("cpu_us_per_capture")]
    if cpu_rows:
        names = list(dict.fromkeys(k for x in cpu_rows for k in x["cpu_us_per_capture"]))
        lines += ["", "CPU a capture cost each process during each rate (µs, from the gateways' "
                  "start to the end of the settle), and the cores all of it kept busy over "
                  "that time; the machine has " + str(r.get("machine", {}).get("cores", "?"))
                  + " cores. `gateways` is what capture cost the gateway processes: their CPU "
                  "less `app_loop`, what their synthetic application's own open loop (its "
                  "waits for each turn, its notes of the send times) used when run alone "
                  "first at the same rate. `kafka JIT`: the part of the broker's figure its "
                  "JVM spent compiling (its JIT's threads: a broker minutes old still compiles "
                  "its hot paths); `autovacuum`: the tables PostgreSQL's autovacuum vacuumed or "
                  "analysed in the window, whose work its figure includes.", "",
                  "| offered/s | " + " | ".join(names)
                  + " | all | cores busy | CPU steal % | kafka JIT | autovacuum |",
                  "|---|" + "---|" * (len(names) + 5)]
        for x in cpu_rows:
            c = x["cpu_us_per_capture"]
            lines.append(f"| {_fmt(x['rate_offered'])} | "
                         + " | ".join(str(c.get(k, "")) for k in names)
                         + f" | {round(sum(c.values()), 1)} | {x['cores_busy']} | "
                         f"{_fmt(x.get('steal_pct'), 1)} | "
                         f"{_fmt((x.get('jit_us_per_capture') or {}).get('kafka'), 1)} | "
                         f"{_fmt(x.get('autovacuum_runs'))} |")
    b = r["rebuild"]
    steal = b.get("steal_pct") or {}
    lines += ["", "## 3. Projection rebuild", "",
              "| what | records/s | seconds | CPU steal % |", "|---|---|---|---|",
              f"| rebuild from offset 0 (blue/green, checks, swap) | {_fmt(b['records_per_s'])} "
              f"| {b['seconds']} | {_fmt(steal.get('rebuild'), 1)} |",
              f"| binary COPY of the same rows, unindexed table"
              + (f" (the faster of {' and '.join(f'{x} s' for x in b['copy_runs_seconds'])})"
                 if b.get("copy_runs_seconds") else "")
              + f" | {_fmt(b['copy_rows_per_s'])} | {b['copy_seconds']} | "
              + " and ".join(_fmt(steal.get(k), 1) for k in ("copy", "copy_again")) + " |"]
    if b.get("steps"):
        lines += ["", "The rebuild's steps (seconds): "
                  + ", ".join(f"{k} {v}" for k, v in b["steps"].items())
                  + "; `summarise` reads and hashes every row of both generations below the "
                    "live positions after the catch-up, `check` the rows past them, under the "
                    "live lock; the COPY baseline has neither."]
    lines += ["", "## 4. Replay verify vs a bare primary-key route (same server)", "",
              f"`evidence api` with {r.get('api_workers', 1)} worker(s); closed-loop load from "
              f"the bench's raw HTTP/1.1 keep-alive client (`bench.loadgen`), one connection "
              f"per concurrent client. Ratio: verify over bare at the same concurrency.", "",
              "| concurrency | verify req/s | p50 ms | p99 ms | failed | bare req/s | p50 ms | p99 ms | failed | ratio |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for v in r["verify"]:
        a, c = v["verify"], v["bare"]
        lines.append(f"| {v['concurrency']} | {a['rps']:.0f} | {a['p50_ms']:.1f} | {a['p99_ms']:.1f} | "
                     f"{a.get('errors', 0)} | {c['rps']:.0f} | {c['p50_ms']:.1f} | {c['p99_ms']:.1f} | "
                     f"{c.get('errors', 0)} | {v['ratio']:.2f} |")
    lines += ["", "## 5. Peak RSS (VmHWM) during 1–4" + (" and 7" if r.get("replay_verified")
                                                          else ""),
              "", "| process | MiB |", "|---|---|"]
    for name, mib in r["peak_rss_mib"].items():
        lines.append(f"| {name} | {_fmt(mib, 1)} |")
    if r.get("scale_out"):
        so = r["scale_out"]
        lines += ["", "## 6. Sealing scale-out (one consumer group)", "",
                  f"The same captures, sealed by 1 and by 2 writers on topics of their own, timed "
                  f"from a settled group over a pre-loaded intake (`bench.scale_out`); "
                  f"{so['cores']} cores shared with the broker. 2 writers / 1 writer: "
                  f"**{so['ratio']:.2f}×**.", "",
                  "| writers | records/s | seconds | partitions owned | rebalanced while timed |",
                  "|---|---|---|---|---|"]
        for x in so["runs"]:
            owned = " + ".join(str(len(p)) for p in x["partitions_owned"])
            lines.append(f"| {x['writers']} | {_fmt(x['records_per_s'])} | {x['seconds']} | "
                         f"{owned} | {'yes' if x['rebalanced'] else 'no'} |")
        if so.get("takeover"):
            from bench.scale_out import takeover_line

            line = takeover_line(so["takeover"])
            lines += ["", line[0].upper() + line[1:] + "."]
    if r.get("replay_verified"):
        lines += _replay_verified(r["replay_verified"])
    if r.get("call_overhead"):
        from bench.call_overhead import markdown as call_overhead

        lines += call_overhead(r["call_overhead"])
    if r.get("cluster"):
        from bench.cluster import markdown as cluster_section

        lines += cluster_section(r["cluster"])
    lines += ["", f"Reproduce: `{r['command']}`", ""]
    return "\n".join(lines)


def _replay_verified(x: dict[str, Any]) -> list[str]:
    """Section 7 (``bench.replay_verified``)."""
    v = x["verified"]
    lines = ["", "## 7. Verified vs unverified replay (same API, alternating rounds)", "",
             f"{x['calls']} calls recorded through the Recorder on `{x['stream']}`, replayed "
             f"once the API served them and a signed checkpoint covered them "
             f"({x['covered']['seconds']} s after the Recorder closed); {x['rounds']} "
             f"rounds, each reading every call once with each "
             f"reader, the order alternating; one read at a time through "
             f"`Replayer.http_client()`. Verified / unverified: **{x['ratio']:.2f}×** the "
             f"reads/s, {x['p50_ratio']:.2f}× the p50; the client-side check's p50 "
             f"{_fmt(v.get('client_check_us_p50'), 0)} µs a read; CPU steal "
             f"{_fmt(x.get('steal_pct'), 1)}%.", "",
             "| reader | reads/s | p50 ms | p99 ms | API round trip p50 ms | API requests / "
             "read | API bytes / read | failed |", "|---|---|---|---|---|---|---|---|"]
    for name, what in (("verified", "verified (bundle, proofs, signed checkpoint)"),
                       ("unverified", "unverified (`verify=False`)")):
        y = x[name]
        lines.append(f"| {what} | {y['rps']:,.0f} | {y['p50_ms']:.2f} | {y['p99_ms']:.2f} | "
                     f"{_fmt(y.get('api_ms_p50'), 2)} | {y['api_requests_per_read']:.2f} | "
                     f"{_fmt(y['api_bytes_per_read'])} | "
                     f"{y['errors']} |")
    return lines


def chart(r: dict[str, Any], path: Path) -> bool:
    """A bar per ratio target, the target as a tick; False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ts = [t for t in r["targets"] if t.get("ratio_value") is not None]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(ts) + 1.5))
    names = [t["name"] for t in ts]
    vals = [t["ratio_value"] for t in ts]
    goals = [t["target_value"] for t in ts]
    ys = range(len(ts))
    ax.barh(ys, vals, color=["tab:green" if t["met"] else "tab:red" for t in ts])
    ax.scatter(goals, ys, marker="|", s=400, color="black", label="target", zorder=3)
    for y, v in zip(ys, vals):
        ax.text(v, y, f" {v:.2f}×", va="center")
    ax.set_yticks(list(ys), names)
    ax.set_xscale("log")
    ax.set_xlabel("same-run ratio (log scale)")
    ax.set_title(f"evidence-store bench {r['started']} ({'QUICK' if r['config']['quick'] else 'full'})")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def write(r: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.json", out_dir / f"{stem}.md"]
    paths[0].write_text(json.dumps(r, indent=2) + "\n")
    paths[1].write_text(markdown(r))
    png = out_dir / f"{stem}.png"
    if chart(r, png):
        paths.append(png)
    return paths
