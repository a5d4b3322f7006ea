"""``evidence verify EXPORT_DIR [--log-key FILE] [--witness-key KEY ...] [--json]``.

Checks an export (``evidence export``) with no service at all: the record's digests and
chain link, the log's signature on the checkpoint, the witnesses' cosignatures and the
inclusion proof (:mod:`audit.offline`). A range bundle (``range.json`` in the directory) is
checked record by record the same way, all in its one checkpoint, and the records' chain
(:func:`audit.range_export.verify_range_export`). Give the keys you hold: without ``--log-key`` the
export's own ``log.vkey`` is used, and the output says so.

Exit codes: 0 verified, 1 not verified, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HELP = "verify an export offline: digests, checkpoint signatures, inclusion proof"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("export", type=Path, help="the directory `evidence export` wrote")
    p.add_argument("--log-key", metavar="FILE", help="the log's verifier key you hold")
    p.add_argument("--witness-key", metavar="KEY", action="append", default=None,
                   help="a witness's verifier key, or a file of them (repeatable)")
    p.add_argument("--json", action="store_true", help="print the JSON result only")


def run(args: argparse.Namespace) -> int:
    from audit.offline import verify_export
    from evidence_contract.note import NoteError, parse_vkey

    if not args.export.is_dir():
        print(f"evidence verify: {args.export} is not a directory", file=sys.stderr)
        return 2
    try:
        log_key = (parse_vkey(Path(args.log_key).read_text(encoding="utf-8").strip())
                   if args.log_key else None)
        witness_keys = None
        if args.witness_key is not None:
            witness_keys = []
            for item in args.witness_key:
                texts = ([item] if "+" in item and not os.path.exists(item)
                         else Path(item).read_text(encoding="utf-8").splitlines())
                witness_keys += [parse_vkey(t.strip()) for t in texts if t.strip()]
    except (OSError, UnicodeDecodeError, NoteError) as e:
        print(f"evidence verify: a key you gave: {e}", file=sys.stderr)
        return 2
    files = {p.name: p.read_bytes() for p in args.export.iterdir() if p.is_file()}
    if "range.json" in files:
        from audit.range_export import verify_range_export

        records = args.export / "records"
        dirs = {d.name: {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}
                for d in (records.iterdir() if records.is_dir() else ()) if d.is_dir()}
        result = verify_range_export(files, dirs, log_key, witness_keys)
    else:
        result = verify_export(files, log_key, witness_keys)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        for name, ok, detail in result.checks:
            print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""))
        print("VERIFIED" if result.ok else "NOT VERIFIED")
        if result.summary.get("log_key_source") == "export":
            print("evidence verify: the log key came from the export itself; pass --log-key "
                  "with the key you hold", file=sys.stderr)
    return 0 if result.ok else 1
