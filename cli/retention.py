"""``evidence retention``: retention classes, the scheduled shredder and legal holds.

    evidence retention run [--once] [--interval S] [--dry-run] [--now T]
    evidence retention status [--json] [--now T]
    evidence retention hold --subject ID --reason TEXT [--request-id R]
    evidence retention release --subject ID [--request-id R]

The key store is the one ``EVIDENCE_KEY_STORE`` names (``server.keystore.from_env``); the
classes come from ``EVIDENCE_RETENTION_FILE`` (``cli.settings.PolicyFiles``); receipts go through
Kafka at ``EVIDENCE_KAFKA_BOOTSTRAP`` with ``EVIDENCE_TOPIC_PREFIX`` (the local stack's
``.stack/env`` fills in what the environment does not say: ``make up`` writes the retention
file the shredder runs with there, so ``status`` here reads the shredder's policy).

``run --once`` prints the run's summary as JSON on stdout, each key it shredded (with
``--dry-run``: would shred), held, skipped or failed named by key id. ``--now T`` (ISO 8601
with a UTC offset, e.g. ``2026-12-03T03:20:00Z``, or a date, its midnight UTC) plans as if
it were T: what would expire by then (``run --dry-run --now T``, ``status --now T``); a ``run``
with ``--now`` is one run, and only ``--dry-run`` takes a T in the future (a real run then
would shred keys before their retention ended).

Exit codes: 0 done; 1 could not run (key store or Kafka unreachable, or a run with
failures); 2 usage error (a bad retention file included); 3 from ``run`` when the retention
file is not set (a supervisor does not restart it).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

from server.logs import event_logger
from server.settings import Connection, SettingsError, add_connection_options

from .settings import STACK_ENV, PolicyFiles

HELP = "retention classes: the scheduled shredder (run), status, legal hold and release"

EXIT_NOT_CONFIGURED = 3

log = event_logger("evidence.retention")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="retention_command", required=True)
    run = sub.add_parser("run", help="shred the keys whose retention ended (every --interval)")
    run.add_argument("--once", action="store_true", help="one run, then exit")
    run.add_argument("--interval", type=float, default=3600.0, metavar="S",
                     help="seconds between runs (default 3600)")
    run.add_argument("--dry-run", action="store_true",
                     help="name the keys that are due; destroy nothing")
    run.add_argument("--now", type=_instant, metavar="T",
                     help="plan as if it were T (ISO 8601 UTC, e.g. 2026-12-03T03:20:00Z, or "
                          "a date): one run; a T in the future only with --dry-run")
    add_connection_options(run, "bootstrap", "topic_prefix", fallback=STACK_ENV)
    st = sub.add_parser("status", help="classes, streams and subjects per class, next shred, "
                                       "holds, erased counts")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("--now", type=_instant, metavar="T",
                    help="what is due and next as if it were T (ISO 8601 UTC, or a date)")
    hold = sub.add_parser("hold", help="put a subject under a legal hold (no erasure until "
                                       "released)")
    hold.add_argument("--subject", required=True)
    hold.add_argument("--reason", required=True)
    hold.add_argument("--request-id")
    rel = sub.add_parser("release", help="lift a subject's legal hold")
    rel.add_argument("--subject", required=True)
    rel.add_argument("--request-id")


def _instant(text: str) -> int:
    """``--now``: ISO 8601 with a UTC offset (``Z`` or ``+hh:mm``), or a date (its midnight
    UTC), as UTC µs."""
    from datetime import date, datetime, timedelta, timezone

    try:
        if len(text) == 10:
            t = datetime.combine(date.fromisoformat(text), datetime.min.time(), timezone.utc)
        else:
            t = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time (e.g. 2026-12-03T03:20:00Z) or date") from None
    if t.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no UTC offset: add Z (UTC) or +hh:mm")
    return (t - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1)


def _env() -> dict[str, str]:
    from .tlog import stack_env

    return stack_env()


def _store(env: dict[str, str]) -> Any:
    from server.keystore import from_env

    return from_env(env)


def _policy(env: dict[str, str]) -> Any:
    """The retention policy of the file ``env`` names, None when it names none."""
    from server.retention import load_policy

    path = PolicyFiles.from_env(env).retention
    return load_policy(path) if path else None


def _usage(msg: str) -> int:
    print(f"evidence retention: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from evidence_contract import iso_micros
    from server.retention import RetentionConfigError

    env = _env()
    try:
        if args.retention_command == "run":
            return _run(args, env)
        if args.retention_command == "status":
            return _status(args, env)
        store = _store(env)
        if args.retention_command == "hold":
            h = store.hold(args.subject, args.reason, args.request_id)
            print(f"held {h.subject} since {iso_micros(h.held_at)} ({h.reason})")
            return 0
        h = store.release(args.subject, args.request_id)
        print(f"released {args.subject}" if h else f"{args.subject} was not held")
        return 0
    except RetentionConfigError as e:
        return _usage(str(e))
    except ValueError as e:
        return _usage(str(e))


def _run(args: argparse.Namespace, env: dict[str, str]) -> int:
    from evidence_contract import iso_micros, now_micros
    from server.logs import configure
    from server.retention import serve

    if args.interval <= 0:
        return _usage("--interval must be > 0")
    try:  # the services' default bootstrap, as the shredder make up runs uses
        conn = Connection.from_env(env).with_args(args)
    except SettingsError as e:
        return _usage(str(e))
    if args.now is not None and not args.dry_run and args.now > now_micros():
        return _usage("--now is in the future: a run would shred keys before their retention "
                      "ended; add --dry-run to see what would expire by then")
    once = args.once or args.now is not None
    policy = _policy(env)
    if policy is None:
        print("evidence retention run: EVIDENCE_RETENTION_FILE is not set; nothing to do",
              file=sys.stderr)
        return EXIT_NOT_CONFIGURED
    configure(env.get("EVIDENCE_LOG_LEVEL", "info"))
    store = _store(env)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log("info", "retention_started", policy=policy.source, policy_sha256=policy.digest,
        classes=len(policy.classes), once=once, interval_s=None if once else args.interval,
        now=None if args.now is None else iso_micros(args.now), dry_run=args.dry_run)

    def report(result: Any) -> None:
        if once:
            print(json.dumps(result.summary(keys=True), sort_keys=True))

    bad = serve(store, policy, {"bootstrap.servers": conn.bootstrap}, topics=conn.names,
                interval_s=args.interval, dry_run=args.dry_run, stop=stop, once=once,
                on_run=report, now=args.now)
    return 1 if (once and bad) else 0


def _status(args: argparse.Namespace, env: dict[str, str]) -> int:
    from server.retention import status

    doc = status(_store(env), _policy(env), now=args.now)
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
        return 0
    pol = doc["policy"]
    print(f"policy   {pol['file']} (sha256 {pol['sha256'][:16]}…, default class "
          f"{pol['default'] or 'none: kept'})" if pol else
          "policy   none (EVIDENCE_RETENTION_FILE is set neither here nor in .stack/env): "
          "nothing is shredded")
    k = doc["keys"]
    print(f"keys     {k['live']} live, {k['erased']} erased ({k['erased_by_retention']} by "
          f"retention), {k['epoch_all']} live of epoch 'all' (never shredded by retention)")
    for c in doc["classes"]:
        print(f"class    {c['name']}: keep {c['keep_days']} days; patterns "
              f"{', '.join(c['patterns']) or '-'}; streams {', '.join(c['streams']) or '-'}; "
              f"{c['subjects']} subjects, {c['live_keys']} live keys ({c['due_now']} due, "
              f"{c['held']} held), {c['erased_keys']} erased; next shred "
              f"{c['next_shred'] or '-'}")
    if "kept_forever" in doc:
        print(f"kept     {doc['kept_forever']} live keys in no class (kept)")
    for h in doc["holds"]:
        print(f"hold     {h['subject']}: {h['reason']} (since {h['held_at']}"
              f"{', request ' + h['request_id'] if h['request_id'] else ''})")
    if not doc["holds"]:
        print("holds    none")
    return 0
