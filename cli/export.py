"""``evidence export --stream S --seq N --out DIR``.

Finds the record's log position in the projection, reads the message from the log itself (the
projection is only the index), and writes the files of :mod:`audit.export`.

Exit codes: 0 written, 1 the record or a service is missing, 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "export one record with the commands that re-verify it using standard tools"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stream", required=True, help="stream id")
    p.add_argument("--seq", required=True, type=int, help="sequence number in the stream")
    p.add_argument("--out", required=True, type=Path, help="directory to write (created)")
    p.add_argument("--bootstrap", help="Kafka bootstrap (default: $EVIDENCE_KAFKA_BOOTSTRAP)")
    p.add_argument("--database-url", help="PostgreSQL URL (default: $EVIDENCE_DATABASE_URL)")


def run(args: argparse.Namespace) -> int:
    from cli.audit import _stack_env
    from audit.errors import AuditError
    from audit.export import build_export
    from audit.kafka_log import fetch_message
    from audit.projection_db import locate
    from evidence_contract import split_record, valid_stream_id
    from topics import TopicSettings

    if not valid_stream_id(args.stream) or args.seq < 1:
        print("evidence export: --stream must be a stream id and --seq a positive integer",
              file=sys.stderr)
        return 2
    if args.out.exists() and any(args.out.iterdir()):
        print(f"evidence export: {args.out} exists and is not empty; choose a new directory",
              file=sys.stderr)
        return 2
    env = _stack_env()
    bootstrap = args.bootstrap or env.get("EVIDENCE_KAFKA_BOOTSTRAP")
    db = args.database_url or env.get("EVIDENCE_DATABASE_URL")
    if not bootstrap or not db:
        print("evidence export: need Kafka and PostgreSQL: pass --bootstrap and --database-url "
              "or run `make up`", file=sys.stderr)
        return 1
    names = TopicSettings.from_env(env).names
    try:
        where = locate(db, args.stream, args.seq, env.get("EVIDENCE_PG_VIEWS_SCHEMA", "evidence"))
        if where is None:
            print(f"evidence export: no record {args.stream} #{args.seq}", file=sys.stderr)
            return 1
        message = fetch_message(bootstrap, names.log, *where)
    except AuditError as e:
        print(f"evidence export: cannot run: {e}", file=sys.stderr)
        return 1
    _body, record = split_record(message)
    if (record["body"]["stream"], record["seal"]["seq"]) != (args.stream, args.seq):
        print(f"evidence export: the log message at {where} is not {args.stream} #{args.seq}: "
              "the projection is stale or altered; run `evidence audit`", file=sys.stderr)
        return 1
    files, checks = build_export(message, *where)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (args.out / name).write_bytes(data)
    print(f"wrote {len(files)} files to {args.out}; {len(checks)} checks in "
          f"{args.out / 'VERIFY.md'}")
    return 0
