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

from .report import LazyProgress, write_json
from .tlog import CliError, fail

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


class _State:
    """The last checkpoint this monitor checked, per origin (the log key's name): a JSON
    file, ``{origin: {"size", "root"}}``, replaced whole when it changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.held = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.held = {}
        except (OSError, ValueError) as e:
            raise CliError(1, f"the state file {path} cannot be read: {e}") from e

    @classmethod
    def of(cls, args: argparse.Namespace) -> "_State":
        if args.state_file:
            return cls(Path(args.state_file))
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        return cls(Path(base) / "evidence" / "monitor.json")

    def known(self, origin: str) -> tuple[int, bytes] | None:
        held = self.held.get(origin)
        return (int(held["size"]), bytes.fromhex(held["root"])) if held else None

    def save(self, origin: str, checkpoint) -> None:
        self.held[origin] = {"size": checkpoint.size, "root": checkpoint.root_hash.hex()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.held, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)


class _PublicLog:
    """The log's monitoring prefix, read without a key: ``fetch(path)`` is the body of a
    200, None for a 404, else a ConnectionError."""

    def __init__(self, base: str, timeout: float) -> None:
        import httpx

        self.base = base.rstrip("/")
        self.client = httpx.Client(timeout=timeout, follow_redirects=False)

    def fetch(self, path: str) -> bytes | None:
        import httpx

        url = f"{self.base}/{path}"
        try:
            r = self.client.get(url)
        except httpx.HTTPError as e:
            raise ConnectionError(f"cannot reach {url} ({type(e).__name__}: {e})") from e
        if r.status_code == 404:
            return None
        if r.status_code != 200:
            raise ConnectionError(f"GET {url} answered {r.status_code}: {r.text[:200]!r}")
        return r.content

    def close(self) -> None:
        self.client.close()


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
    from audit.monitor import MonitorError, monitor
    from evidence_contract import valid_stream_id

    from .tlog import EXIT_UNVERIFIED, stack_env

    if args.stream is not None and not valid_stream_id(args.stream):
        return fail("monitor", CliError(2, f"{args.stream!r} is not a stream id"))
    if args.min_witnesses is not None and args.min_witnesses < 0:
        return fail("monitor", CliError(2, "--min-witnesses must be 0 or more"))
    try:
        env = stack_env()
        log = _log_prefix(args, env)
        key, witness_keys = _keys(args, env)
        state = _State.of(args)
    except CliError as e:
        return fail("monitor", e)
    public = _PublicLog(log, args.timeout)
    progress = LazyProgress("checking streams")
    try:
        report = monitor(public.fetch, key, witness_keys, args.min_witnesses,
                         state.known(key.name), args.stream, progress)
    except ConnectionError as e:
        return fail("monitor", CliError(1, f"cannot run: {e}"))
    except MonitorError as e:
        return fail("monitor", CliError(EXIT_UNVERIFIED, f"UNVERIFIED: {e}"))
    finally:
        public.close()
        progress.close()
    if report.clean and args.stream is None:
        state.save(key.name, report.checkpoint)
    if args.json is not None:
        write_json(report.to_dict(), args.json)
    if args.json != "-":
        _print(report)
    return 0 if report.clean else 3


def _log_prefix(args: argparse.Namespace, env: dict[str, str]) -> str:
    """--log, else the API's /log of the environment or .stack/env."""
    base = args.log or (env["EVIDENCE_API_URL"].rstrip("/") + "/log"
                        if env.get("EVIDENCE_API_URL") else None)
    if not base:
        raise CliError(2, "no log to read: pass --log URL (the API's /log) or run `make up`")
    return base


def _keys(args: argparse.Namespace, env: dict[str, str]):
    """(the operator's log key, the witness keys), never the log's own /log/key."""
    from .tlog import log_key

    try:
        key, _source = log_key(args.log_key, env, None)
        witness_keys = _witness_keys(args.witness_key)
    except ValueError as e:
        raise CliError(2, str(e)) from e
    if key is None:
        raise CliError(2, "no log key of yours: pass --log-key FILE (a monitor never takes "
                          "the log's own /log/key)")
    if args.min_witnesses is not None and args.min_witnesses > len(witness_keys):
        raise CliError(2, f"--min-witnesses {args.min_witnesses} needs that many "
                          f"--witness-key")
    return key, witness_keys


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
