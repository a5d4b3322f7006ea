"""``evidence projections rebuild|status``.

Exit codes: 0 done, 1 could not run, 2 usage, 3 the rebuilt generation disagrees with the
live one and was not swapped in (both kept; the differences are printed, and which of the
two the log supports: both generations' records are audited against the log,
:func:`audit.run.audit_projections`). ``rebuild --accept-differences --reason TEXT`` swaps
in a rebuilt generation that disagrees if the log supports it, and records the differences,
the verdict, who and why in ``<meta>.accepted_swaps`` (shown by ``status``); the replaced
generation is kept, retired. ``status`` exits 1 when the live projection is not ready: no
projector heartbeat, or one older than ``projections.STALE_HEARTBEAT_S`` (the rule the API's
/readyz applies).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from projections.cli import add_common_arguments
from projections.config import ProjectorConfig

HELP = "rebuild the PostgreSQL projections from offset 0 (blue/green), or show their status"
EXIT_OK, EXIT_NOT_READY, EXIT_USAGE, EXIT_MISMATCH = 0, 1, 2, 3
ACCEPT_FLAG = "--accept-differences"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="projections_command", required=True)
    rb = sub.add_parser("rebuild", help="build a fresh generation from offset 0, check, swap")
    add_common_arguments(rb)
    rb.add_argument("--in-place", action="store_true",
                    help="drop the live generation and rebuild it without blue/green")
    rb.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    rb.add_argument(ACCEPT_FLAG, action="store_true",
                    help="swap in the rebuilt generation even if it disagrees with the live "
                         "one, when the log supports it (its records match the log); records "
                         "the differences, who and why (--reason) in the meta schema")
    rb.add_argument("--reason", metavar="TEXT",
                    help=f"why the differences are accepted (required with {ACCEPT_FLAG}); "
                         "recorded with them")
    st = sub.add_parser("status", help="generations, positions, lag and accepted differences")
    add_common_arguments(st)


def run(args: argparse.Namespace) -> int:
    from server.logs import configure

    configure()  # the rebuild's progress events, as JSON lines on stderr
    cfg = ProjectorConfig.from_env().with_args(args)
    if args.projections_command == "rebuild":
        return _rebuild(cfg, args)
    return _status(cfg)


def _rebuild(cfg: ProjectorConfig, args: argparse.Namespace) -> int:
    from projections.errors import RebuildMismatch
    from cli.progress import Progress
    from projections.rebuild import Acceptance, rebuild

    accept = None
    if args.accept_differences or args.reason is not None:
        problem = (f"{ACCEPT_FLAG} needs --reason TEXT (why; it is recorded)"
                   if not (args.reason or "").strip() else
                   f"--reason goes with {ACCEPT_FLAG}" if not args.accept_differences else
                   f"{ACCEPT_FLAG} swaps blue/green; --in-place compares nothing"
                   if args.in_place else None)
        if problem:
            print(f"evidence projections rebuild: {problem}", file=sys.stderr)
            return EXIT_USAGE
        accept = Acceptance(reason=args.reason.strip(), by=_operator())
    try:
        r = rebuild(cfg, in_place=args.in_place,
                    progress_factory=None if args.no_progress else Progress,
                    judge=None if args.in_place else _judge(cfg), accept=accept)
    except RebuildMismatch as e:
        print(f"rebuild: {e.generation} disagrees with the live generation {e.live}; "
              f"not swapped, both kept:")
        for d in e.differences:
            print(f"  {d}")
        v = e.verdict
        if v is not None:
            head, *rows = v.lines()
            print(f"rebuild: {head}")
            for row in rows:
                print(f"  {row}")
            if v.supports == e.generation and accept is None:
                print(f"rebuild: to swap in the generation the log supports and record these "
                      f"differences: evidence projections rebuild {ACCEPT_FLAG} "
                      f"--reason TEXT")
            elif accept is not None and v.supports != e.generation:
                print(f"rebuild: {ACCEPT_FLAG} swaps only to a generation the log supports; "
                      f"{e.generation} is not one")
        return EXIT_MISMATCH
    rate = r.records / r.seconds if r.seconds else 0.0
    how = ("in place" if args.in_place else
           f"checked {r.checked_streams} streams, differences accepted, swapped" if r.accepted
           else f"checked {r.checked_streams} streams, swapped")
    print(f"rebuild: {r.generation} is live ({how}); {r.records} records in "
          f"{r.seconds:.1f} s ({rate:,.0f} records/s)"
          + (f"; dropped {r.previous}" if r.dropped else ""))
    if r.accepted is not None:
        _print_accepted(r.accepted, prefix="rebuild: ")
        print(f"rebuild: {r.previous} is kept (retired) for inspection; the next rebuild "
              f"drops it")
    if r.phases:
        print("rebuild: steps: " + ", ".join(f"{k} {v:.1f} s" for k, v in r.phases.items()))
    for w in r.warnings:
        print(f"rebuild: warning: {w}", file=sys.stderr)
    return EXIT_OK


def _judge(cfg: ProjectorConfig) -> Any:
    """The rebuild's judge: both generations' records audited against one read of the
    log (:func:`audit.run.audit_projections`)."""
    from audit.errors import AuditError
    from audit.run import audit_projections
    from projections.rebuild import Verdict

    def judge(live: str, rebuilt: str) -> Verdict:
        print(f"rebuild: {rebuilt} disagrees with {live}; reading {cfg.log_topic} to say "
              f"which one the log supports", file=sys.stderr)
        try:
            found = audit_projections(cfg.bootstrap, cfg.topics.names, cfg.database_url,
                                      [live, rebuilt])
        except AuditError as e:
            return Verdict(live, rebuilt, error=str(e))
        return Verdict(live, rebuilt, {g: tuple(_finding(f) for f in fs)
                                       for g, fs in found.items()})

    return judge


def _finding(f: Any) -> str:
    at = f" at {f.partition}/{f.offset}" if f.partition is not None else ""
    return f"{f.kind} stream {f.stream} seq {f.seq}{at}: {f.detail}"


def _operator() -> str:
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name in the environment or the password file
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _print_accepted(a: Any, prefix: str = "  ") -> None:
    print(f"{prefix}accepted differences #{a.id}, {_ts(a.accepted_at)}, by {a.accepted_by} "
          f"(database user {a.db_user}): {a.previous} -> {a.generation}; "
          f"reason: {a.reason}")
    for d in a.differences:
        print(f"    differed: {d}")
    for v in a.verdict:
        print(f"    verdict: {v}")


def _status(cfg: ProjectorConfig) -> int:
    from projections.config import STALE_HEARTBEAT_S
    from projections.store import Store

    with Store(cfg) as store:
        live = store.live_generation(create=False)
        gens = store.generations()
        if not gens:
            print(f"no generations in {cfg.meta_schema}")
            return EXIT_OK
        print(f"{'generation':<24} {'state':<9} {'records':>10} {'lag':>8}  created")
        details, live_age = [], None
        for name, state, created, _swapped in gens:
            count, pos = store.generation_status(name)
            age, ends = store.heartbeat(name)
            rows = position_lags(pos, ends)
            lag = sum(r[4] for r in rows)
            mark = " *" if name == live else ""
            print(f"{name + mark:<24} {state:<9} {count:>10} {lag:>8}  {_ts(created)}")
            details.append((name, rows))
            if name == live:
                live_age = age
        for name, rows in details:
            print(f"\npositions of {name}:")
            print(f"  {'topic':<28} {'part':>4} {'next_offset':>12} {'log_end':>12} "
                  f"{'lag':>8}  updated")
            for topic, part, nxt, end, lag, updated in rows:
                print(f"  {topic:<28} {part:>4} {nxt:>12} {end:>12} {lag:>8}  {_ts(updated)}")
        accepted, latest = store.accepted_swaps(limit=3)
        if accepted:
            print(f"\ndifferences accepted at a swap: {accepted} "
                  f"(the latest {len(latest)}, newest first):")
            for a in latest:
                _print_accepted(a)
    if live is None:
        print("\nnot ready: no generation is live")
        return EXIT_NOT_READY
    if live_age is None:
        print(f"\nnot ready: the projector of {live} has not reported a heartbeat")
        return EXIT_NOT_READY
    if live_age > STALE_HEARTBEAT_S:
        print(f"\nnot ready: the projector's last heartbeat is {live_age:.0f} s old, over "
              f"{STALE_HEARTBEAT_S:.0f} s: it is down or cannot reach Kafka or PostgreSQL")
        return EXIT_NOT_READY
    print(f"\nready: the projector's last heartbeat is {live_age:.1f} s old")
    return EXIT_OK


def position_lags(positions: Iterable[tuple[Any, ...]],
                  ends: Mapping[tuple[str, int], int]) -> list[tuple[Any, ...]]:
    """Each stored position ``(topic, partition, next_offset, high_watermark, updated_at)``
    as ``(topic, partition, next_offset, end, lag, updated_at)``: lag against the end the
    heartbeat last saw in Kafka for that topic and partition (as /readyz measures it), else
    the high watermark stored with the position. By topic and partition: partition 0 of
    the checkpoints topic is not partition 0 of the log."""
    out = []
    for topic, part, nxt, hwm, updated in positions:
        end = ends.get((topic, part), hwm)
        out.append((topic, part, nxt, end, max(0, end - nxt), updated))
    return out


def _ts(t: datetime | None) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ") if t else "-"
