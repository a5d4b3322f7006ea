"""``evidence fidelity analyze FILE [--json] [--require LEVEL]``.

Exit codes: 0 analyzed (and at or above ``--require``), 1 the file cannot be read, 2 usage
error or the manifest is not valid JSON or not a valid v1 manifest, 3 below ``--require``.
"""

from __future__ import annotations

import argparse
import json
import sys

HELP = "analyze the replay fidelity of an evidence.replay-runtime manifest"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="fidelity_command", required=True)
    a = sub.add_parser("analyze", help="analyze a manifest (JSON file, or - for stdin)",
                       description="Report the replay-fidelity level of a manifest and every "
                                   "gap in its evidence. Schema: schemas/replay-runtime.schema.json")
    a.add_argument("file", help="manifest JSON file, or - for standard input")
    a.add_argument("--json", action="store_true", help="print the report as JSON")
    a.add_argument("--require", choices=["exact", "controlled", "partial", "unreplayable"],
                   help="exit 3 when the level is below this one")


def run(args: argparse.Namespace) -> int:
    from fidelity.analyze import LEVELS, analyze
    from fidelity.errors import ManifestError

    try:
        text = sys.stdin.read() if args.file == "-" else open(args.file, encoding="utf-8").read()
    except OSError as e:
        print(f"evidence fidelity: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return 1
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as e:
        print(f"evidence fidelity: {args.file} is not JSON: {e}", file=sys.stderr)
        return 2
    try:
        report = analyze(manifest)
    except ManifestError as e:
        print(f"evidence fidelity: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(f"level: {report.level}")
        print(f"manifest_sha256: {report.manifest_sha256}")
        if report.missing_evidence:
            print("missing evidence:")
            for f in report.missing_evidence:
                print(f"  [{f.impact}] {f.path}: {f.reason}")
        else:
            print("missing evidence: none")
    if args.require and LEVELS.index(report.level) < LEVELS.index(args.require):
        return 3
    return 0
