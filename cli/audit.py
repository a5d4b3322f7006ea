"""``evidence audit [--stream S] [--json] [--no-projection]``.

Reads the log itself from offset 0 and recomputes every digest and link, compares the chain
tails with the writer's heads, then checks the live projection against the log.

Exit codes: 0 clean, 1 could not run, 2 usage error, 3 found something.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HELP = "verify the log's chains and digests, and the projection against the log"


def _stack_env() -> dict[str, str]:
    from devstack import StackConfig, read_env

    return {**read_env(StackConfig.from_env()), **{k: v for k, v in os.environ.items()
                                                    if k.startswith("EVIDENCE_")}}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stream", help="audit one stream only")
    p.add_argument("--json", metavar="FILE", nargs="?", const="-",
                   help="write the JSON report to FILE (default: standard output)")
    p.add_argument("--no-projection", action="store_true",
                   help="check the log only, not the PostgreSQL projection")
    p.add_argument("--bootstrap", help="Kafka bootstrap (default: $EVIDENCE_KAFKA_BOOTSTRAP)")
    p.add_argument("--database-url", help="PostgreSQL URL (default: $EVIDENCE_DATABASE_URL)")


def run(args: argparse.Namespace) -> int:
    from audit.errors import AuditError
    from audit.run import run_audit
    from cli.progress import Progress
    from evidence_contract import valid_stream_id
    from topics import TopicSettings

    if args.stream is not None and not valid_stream_id(args.stream):
        print(f"evidence audit: {args.stream!r} is not a stream id ([A-Za-z0-9._:-]{{1,128}})",
              file=sys.stderr)
        return 2
    env = _stack_env()
    bootstrap = args.bootstrap or env.get("EVIDENCE_KAFKA_BOOTSTRAP")
    db = None if args.no_projection else (args.database_url or env.get("EVIDENCE_DATABASE_URL"))
    if not bootstrap:
        print("evidence audit: no Kafka to read: pass --bootstrap or run `make up`",
              file=sys.stderr)
        return 1
    settings = TopicSettings.from_env(env)
    bar: list[Progress] = []

    def progress(done: int, total: int) -> None:
        # Offsets read of the log's end offsets (commit markers take offsets too); on a
        # terminal one rewritten line, in a log file a line every few seconds.
        if not bar:
            bar.append(Progress(f"auditing {settings.names.log}", total))
        bar[0].update(done, done)

    try:
        report = run_audit(bootstrap, settings.names, db,
                           views=env.get("EVIDENCE_PG_VIEWS_SCHEMA", "evidence"),
                           stream=args.stream, progress=progress)
    except AuditError as e:
        print(f"evidence audit: cannot run: {e}", file=sys.stderr)
        return 1
    if bar:
        bar[0].records = report.messages
        bar[0].close()
    if args.json is not None:
        text = json.dumps(report.to_dict(), indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w", encoding="utf-8") as f:
                f.write(text + "\n")
    if args.json != "-":
        _print_summary(report)
    return 0 if report.clean else 3


def _print_summary(report) -> None:
    print(f"{'stream':<40} {'records':>9} {'findings':>9}")
    for s, n in sorted(report.streams.items()):
        k = sum(1 for f in report.findings if f.stream == s)
        print(f"{s:<40} {n:>9,} {k:>9,}")
    lag = (f" ({report.projection_lag:,} log records not projected yet, not compared)"
           if report.projection_lag else "")
    print(f"{len(report.streams)} streams, {report.messages:,} log messages, "
          f"projection {'checked' if report.projection_checked else 'not checked'}{lag}")
    if report.clean:
        print("CLEAN: every chain links, every digest recomputes"
              + (", the projection matches the log" if report.projection_checked else ""))
        return
    print("FINDINGS:")
    for kind, n in report.by_kind().items():
        print(f"  {kind:<26} {n:>6,}")
    for f in report.findings[:50]:
        loc = f"{f.stream}#{f.seq}" if f.stream else "?"
        pos = f" @{f.partition}:{f.offset}" if f.partition is not None else ""
        print(f"  - {f.kind} {loc}{pos}: {f.detail}")
    if len(report.findings) > 50:
        print(f"  ... and {len(report.findings) - 50} more (use --json for all)")
