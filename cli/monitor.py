"""``evidence monitor [--log URL] [--log-key FILE] [--witness-key KEY ...] [--min-witnesses K]
[--stream S] [--state-file FILE] [--json [FILE]]``.

Checks the deployment log from its public read API alone, as anyone can (no API key): the
witnessed deployment checkpoint, that it extends the one this monitor checked last (kept in
the state file per origin), that every entry hashes to it, and that every stream's
checkpoints in it are prefixes of one tree (:mod:`audit.monitor`). Run it from cron, or
after every deployment checkpoint: what a witness does for the list, this does inside each
stream.

``--log`` is the log's monitoring prefix (``<API>/log``; default ``$EVIDENCE_API_URL/log``,
else .stack/env's). The log key must be the operator's (``--log-key``, else
``$EVIDENCE_LOG_VERIFIER_KEY_FILE`` or the signer key of ``$EVIDENCE_LOG_SIGNING_KEY_FILE``):
never the log's own ``/log/key``.

Exit codes: 0 consistent, 1 could not run, 2 usage error, 3 found a fork, 4 the log served
something that does not verify (a checkpoint, cosignatures, tiles).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HELP = "check the public deployment log: witnessed, append-only, every stream one tree"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log", metavar="URL",
                   help="the log's monitoring prefix (default $EVIDENCE_API_URL/log)")
    p.add_argument("--log-key", metavar="FILE",
                   help="the log's verifier key (default $EVIDENCE_LOG_VERIFIER_KEY_FILE)")
    p.add_argument("--witness-key", metavar="KEY", action="append", default=[],
                   help="a witness's verifier key, or a file of them (repeatable)")
    p.add_argument("--min-witnesses", type=int, metavar="K",
                   help="cosignatures required of the --witness-key keys (default: all)")
    p.add_argument("--stream", help="check this stream's checkpoints only")
    p.add_argument("--state-file", metavar="FILE",
                   help="the last checkpoint checked per origin (default $XDG_STATE_HOME/"
                        "evidence/monitor.json, else ~/.local/state/evidence/monitor.json)")
    p.add_argument("--json", metavar="FILE", nargs="?", const="-",
                   help="write the JSON report to FILE (default: standard output)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for each answer (default 10)")


def _state_file(args: argparse.Namespace) -> Path:
    if args.state_file:
        return Path(args.state_file)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "evidence" / "monitor.json"


def _read_state(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise ValueError(f"the state file {path} cannot be read: {e}") from e


def _witness_keys(items: list[str]):
    from evidence_contract.note import NoteError, parse_vkey

    out = []
    for item in items:
        try:
            texts = [item] if "+" in item and not os.path.exists(item) else \
                Path(item).read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise ValueError(f"cannot read {item}: {e}") from e
        for t in (t.strip() for t in texts):
            if t and not t.startswith("#"):
                try:
                    out.append(parse_vkey(t.split()[0]))
                except NoteError as e:
                    raise ValueError(f"--witness-key {t[:60]!r} is not a verifier key: {e}") \
                        from e
    return out


def run(args: argparse.Namespace) -> int:
    import httpx

    from audit.monitor import MonitorError, monitor
    from cli.progress import Progress
    from cli.tlog import EXIT_UNVERIFIED, CliError, log_key, stack_env
    from evidence_contract import valid_stream_id

    if args.stream is not None and not valid_stream_id(args.stream):
        print(f"evidence monitor: {args.stream!r} is not a stream id", file=sys.stderr)
        return 2
    if args.min_witnesses is not None and args.min_witnesses < 0:
        print("evidence monitor: --min-witnesses must be 0 or more", file=sys.stderr)
        return 2
    env = stack_env()
    base = args.log or (env["EVIDENCE_API_URL"].rstrip("/") + "/log"
                        if env.get("EVIDENCE_API_URL") else None)
    if not base:
        print("evidence monitor: no log to read: pass --log URL (the API's /log) or run "
              "`make up`", file=sys.stderr)
        return 2
    try:
        key, _source = log_key(args.log_key, env, None)
        witness_keys = _witness_keys(args.witness_key)
    except CliError as e:
        print(f"evidence monitor: {e}", file=sys.stderr)
        return e.code
    except ValueError as e:
        print(f"evidence monitor: {e}", file=sys.stderr)
        return 2
    if key is None:
        print("evidence monitor: no log key of yours: pass --log-key FILE (a monitor never "
              "takes the log's own /log/key)", file=sys.stderr)
        return 2
    if args.min_witnesses is not None and args.min_witnesses > len(witness_keys):
        print(f"evidence monitor: --min-witnesses {args.min_witnesses} needs that many "
              f"--witness-key", file=sys.stderr)
        return 2
    state_path = _state_file(args)
    try:
        state = _read_state(state_path)
    except ValueError as e:
        print(f"evidence monitor: {e}", file=sys.stderr)
        return 1
    held = state.get(key.name)
    known = (int(held["size"]), bytes.fromhex(held["root"])) if held else None

    client = httpx.Client(timeout=args.timeout, follow_redirects=False)

    def fetch(path: str) -> bytes | None:
        url = f"{base.rstrip('/')}/{path}"
        try:
            r = client.get(url)
        except httpx.HTTPError as e:
            raise ConnectionError(f"cannot reach {url} ({type(e).__name__}: {e})") from e
        if r.status_code == 404:
            return None
        if r.status_code != 200:
            raise ConnectionError(f"GET {url} answered {r.status_code}: {r.text[:200]!r}")
        return r.content

    bar: list[Progress] = []

    def progress(done: int, total: int) -> None:
        if not bar:
            bar.append(Progress("checking streams", total))
        bar[0].update(done, done)

    try:
        report = monitor(fetch, key, witness_keys, args.min_witnesses, known, args.stream,
                         progress)
    except ConnectionError as e:
        print(f"evidence monitor: cannot run: {e}", file=sys.stderr)
        return 1
    except MonitorError as e:
        print(f"evidence monitor: UNVERIFIED: {e}", file=sys.stderr)
        return EXIT_UNVERIFIED
    finally:
        client.close()
        if bar:
            bar[0].close()
    if report.clean and args.stream is None:
        state[key.name] = {"size": report.checkpoint.size,
                           "root": report.checkpoint.root_hash.hex()}
        state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, state_path)
    if args.json is not None:
        text = json.dumps(report.to_dict(), indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n", encoding="utf-8")
    if args.json != "-":
        _print(report)
    return 0 if report.clean else 3


def _print(report) -> None:
    cp = report.checkpoint
    by = ", ".join(report.cosigners) or "no witness key given"
    since = (f", extends size {report.known_size} checked before"
             if report.known_size is not None else "")
    print(f"{cp.origin}: size {cp.size}, cosigned by {by}{since}")
    print(f"{report.entries:,} entries (stream checkpoints), {len(report.streams):,} streams")
    if report.clean:
        print("CONSISTENT: the deployment log is append-only and every stream's checkpoints "
              "are prefixes of one tree")
        return
    print("FINDINGS:")
    for f in report.findings[:50]:
        print(f"  - {f.kind} {f.stream or '(deployment log)'}: {f.detail}")
    if len(report.findings) > 50:
        print(f"  ... and {len(report.findings) - 50} more (use --json for all)")
