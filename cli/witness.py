"""``evidence witness``: run a witness that cosigns the log's checkpoints (package ``witness``).

    evidence witness keygen NAME [--out FILE] [--mldsa44]
        a cosignature key named NAME (Ed25519 cosignature/v1; ML-DSA-44 with --mldsa44) in
        FILE (0600; default ./<last part of NAME>.skey)
        and its verifier key in FILE.vkey: give that to the log (EVIDENCE_WITNESS_KEYS) and
        to auditors (evidence audit --witness-key)
    evidence witness run --key FILE --state DIR --log-key FILE --log-url URL --api-key KEY
                         --stream S [--stream S ...] [--listen HOST:PORT] [--interval S] [--once]

``run`` also takes its settings from the environment: ``EVIDENCE_WITNESS_KEY_FILE``,
``EVIDENCE_WITNESS_STATE_DIR``, ``EVIDENCE_LOG_VERIFIER_KEY_FILE``, ``EVIDENCE_WITNESS_LOG_URL``
(else ``EVIDENCE_API_URL``), ``EVIDENCE_WITNESS_API_KEY`` (else ``EVIDENCE_API_KEY``),
``EVIDENCE_WITNESS_STREAMS`` (comma-separated), ``EVIDENCE_WITNESS_LISTEN``. It listens on
127.0.0.1 unless told otherwise and prints one line ``listening <host>:<port>`` when ready.

Exit codes: 0 stopped (or ``--once`` done), 1 cannot run, 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

HELP = "run a witness: cosign the log's consistent checkpoints, refuse the others"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="witness_command", required=True)
    kg = sub.add_parser("keygen", help="make a witness key (cosignature/v1, Ed25519)")
    kg.add_argument("name", help="the key name, e.g. witness.example.org/w1")
    kg.add_argument("--out", type=Path, help="the signer key file (default ./<name>.skey)")
    kg.add_argument("--mldsa44", action="store_true",
                    help="an ML-DSA-44 cosignature key (type 0x06) instead of Ed25519")
    run = sub.add_parser("run", help="poll the log, cosign, serve the witness endpoint")
    run.add_argument("--key", type=Path, help="the witness signer key file "
                                              "(default $EVIDENCE_WITNESS_KEY_FILE)")
    run.add_argument("--state", type=Path, help="the state directory "
                                                "(default $EVIDENCE_WITNESS_STATE_DIR)")
    run.add_argument("--log-key", type=Path, help="the log's verifier key file "
                                                  "(default $EVIDENCE_LOG_VERIFIER_KEY_FILE)")
    run.add_argument("--log-url", help="the log's API (default $EVIDENCE_WITNESS_LOG_URL, "
                                       "else $EVIDENCE_API_URL)")
    run.add_argument("--api-key", help="the API key (default $EVIDENCE_WITNESS_API_KEY, "
                                       "else $EVIDENCE_API_KEY)")
    run.add_argument("--stream", action="append", default=[],
                     help="a stream to follow (repeatable; default $EVIDENCE_WITNESS_STREAMS)")
    run.add_argument("--listen", help="HOST:PORT of the witness endpoint (default "
                                      "$EVIDENCE_WITNESS_LISTEN, else 127.0.0.1:0, any port)")
    run.add_argument("--interval", type=float, default=5.0, help="seconds between polls")
    run.add_argument("--once", action="store_true", help="poll once and exit (no endpoint)")


def _keygen(args: argparse.Namespace) -> int:
    from evidence_contract.note import SIG_COSIGNATURE_V1, SIG_MLDSA44
    from witness import keygen

    out = args.out or Path(args.name.rsplit("/", 1)[-1] + ".skey")
    key = keygen(args.name, out, SIG_MLDSA44 if args.mldsa44 else SIG_COSIGNATURE_V1)
    from evidence_contract.note import format_vkey

    print(format_vkey(key.verifier))
    print(f"evidence witness: wrote {out} (0600) and {out}.vkey", file=sys.stderr)
    return 0


def _listen(text: str) -> tuple[str, int] | None:
    host, _, port = text.rpartition(":")
    try:
        return (host or "127.0.0.1", int(port))
    except ValueError:
        return None


def _run(args: argparse.Namespace) -> int:
    from evidence_contract import valid_stream_id
    from evidence_contract.note import NoteError, parse_vkey
    from server.logs import configure
    from witness import Witness, WitnessConfig, WitnessError, load_key

    env = os.environ
    key_file = args.key or env.get("EVIDENCE_WITNESS_KEY_FILE")
    state = args.state or env.get("EVIDENCE_WITNESS_STATE_DIR")
    log_key_file = args.log_key or env.get("EVIDENCE_LOG_VERIFIER_KEY_FILE")
    url = args.log_url or env.get("EVIDENCE_WITNESS_LOG_URL") or env.get("EVIDENCE_API_URL")
    api_key = args.api_key or env.get("EVIDENCE_WITNESS_API_KEY") or env.get("EVIDENCE_API_KEY")
    streams = args.stream or [s for s in env.get("EVIDENCE_WITNESS_STREAMS", "").split(",") if s]
    listen = _listen(args.listen or env.get("EVIDENCE_WITNESS_LISTEN", "127.0.0.1:0"))
    missing = [n for n, v in (("--key", key_file), ("--state", state), ("--log-key", log_key_file))
               if not v]
    bad = [s for s in streams if not valid_stream_id(s)]
    if missing or bad or listen is None or (streams and not url) or args.interval <= 0:
        print("evidence witness run: " + (f"missing {', '.join(missing)}" if missing else
              f"not stream ids: {bad}" if bad else "--listen is HOST:PORT" if listen is None
              else "--interval is > 0" if args.interval <= 0 else "--stream needs --log-url"),
              file=sys.stderr)
        return 2
    try:
        log_key = parse_vkey(Path(log_key_file).read_text(encoding="utf-8").strip())
    except (OSError, UnicodeDecodeError, NoteError) as e:
        print(f"evidence witness run: the log key {log_key_file}: {e}", file=sys.stderr)
        return 1
    try:
        key = load_key(Path(key_file))
    except WitnessError as e:
        print(f"evidence witness run: {e}", file=sys.stderr)
        return 1
    configure(env.get("EVIDENCE_LOG_LEVEL", "info"))
    w = Witness(WitnessConfig(key=key, log_key=log_key, state_dir=Path(state), log_url=url,
                              api_key=api_key, streams=streams, interval=args.interval,
                              listen=listen))
    try:
        if not args.once:
            host, port = w.serve()
            print(f"listening {host}:{port}", flush=True)
            signal.signal(signal.SIGTERM, lambda *_: w.stop())
        w.run(once=args.once)
    except KeyboardInterrupt:
        pass
    finally:
        w.close()
    return 0


def run(args: argparse.Namespace) -> int:
    return _keygen(args) if args.witness_command == "keygen" else _run(args)
