"""``evidence replay``: verify a re-executed call against its sealed record, via the API.

Calls ``POST /replay/verify`` and prints a verdict block, or the API's JSON with ``--json``.
Never calls a model provider: the caller re-executes elsewhere and hands over the result.

The API's answer is not taken on trust: the record it compared is fetched with its proofs
(``GET /streams/{stream}/records/{seq}/bundle``) and verified here, from its bytes to a
checkpoint signed by the log key you hold (``--log-key``, else the stack's; see
:func:`cli.tlog.add_trust`), and the digest is compared again with the verified record's.
A record that fails that check, or an API whose verdict disagrees with the verified record,
exits 4 and prints no verdict. ``--no-verify`` takes the API's word.

Exit codes: 0 match; 1 the record, the file or the API is missing or unreachable (or the key
is rejected); 2 usage error; 3 mismatch (including a record without the digest compared);
4 the evidence failed its check (tampered, rolled back, unwitnessed, not yet checkpointed).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any

from .settings import SettingsError, add_options, resolve

HELP = "verify a replayed output or response against its sealed record (exit 3 on mismatch)"

EXIT_MATCH, EXIT_MISSING, EXIT_USAGE, EXIT_MISMATCH, EXIT_UNVERIFIED = 0, 1, 2, 3, 4

_EPILOG = """\
Name the record by --stream and --seq, or by --event-id; give the replayed value as
--output TEXT, --output-file F (UTF-8 text, compared verbatim: a trailing newline counts) or
--response-file F (the raw response body, compared with the record's response_digest).

The API and key default to $EVIDENCE_API_URL and $EVIDENCE_API_KEY, else to .stack/env
(written by `make up`).

The record is verified first (its bytes, its inclusion in a checkpoint signed by the log
key you hold, the digest compared): see the verification flags; exit 4 when it fails.

exit codes: 0 match, 1 record/file/API missing or unreachable, 2 usage error, 3 mismatch,
            4 the evidence failed its check (never printed as a verdict)

examples:
  evidence replay --stream acme:support.chat --seq 12 --output "the replayed answer"
  evidence replay --event-id 0190b6d2-7c3e-7a51-9f00-1234567890ab --output-file replay.txt
  evidence replay --stream acme:support.chat --seq 12 --response-file body.json --json
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = _EPILOG
    rec = p.add_argument_group("record (either --stream with --seq, or --event-id)")
    rec.add_argument("--stream", help="stream id of the record, e.g. acme:support.chat")
    rec.add_argument("--seq", type=int, help="seq of the record in --stream (1-based)")
    rec.add_argument("--event-id", help="the capture's event id (UUID) instead of stream/seq")
    val = p.add_argument_group("replayed value (exactly one)")
    val.add_argument("--output", metavar="TEXT", help="the re-executed output text")
    val.add_argument("--output-file", metavar="F",
                     help="file holding the re-executed output text (UTF-8, verbatim)")
    val.add_argument("--response-file", metavar="F",
                     help="file holding the re-executed raw response body (bytes)")
    add_options(p, "api", "api_key")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for the API (default 10)")
    p.add_argument("--json", action="store_true",
                   help="print the API's JSON answer instead of the verdict block")
    from cli.tlog import add_trust

    add_trust(p)


def _fail(code: int, message: str) -> int:
    print(f"evidence replay: {message}", file=sys.stderr)
    return code


def _usage_error(args: argparse.Namespace) -> str | None:
    if args.event_id is not None:
        if args.stream is not None or args.seq is not None:
            return "name the record either by --stream and --seq or by --event-id, not both"
    elif args.seq is not None and args.stream is None:
        return "--seq needs --stream (or use --event-id)"
    elif args.stream is not None and args.seq is None:
        return "--stream needs --seq (or use --event-id)"
    elif args.stream is None:
        return "name the record: --stream S --seq N, or --event-id E"
    if args.seq is not None and args.seq < 1:
        return f"--seq must be 1 or more, got {args.seq}"
    if args.output is not None:
        try:
            args.output.encode("utf-8")
        except UnicodeEncodeError as e:
            # argv bytes that are not UTF-8 reach Python as lone surrogates (PEP 383)
            bad = args.output[e.start:e.end].encode("utf-8", "surrogateescape")
            return (f"--output is not UTF-8 text (byte {bad.hex()} at character {e.start}); "
                    f"pass the exact bytes with --output-file F or --response-file F")
    given = [n for n in ("output", "output_file", "response_file") if getattr(args, n) is not None]
    if len(given) != 1:
        which = "neither" if not given else "more than one"
        return (f"give exactly one of --output TEXT, --output-file F or --response-file F "
                f"({which} given)")
    return None


def _request_body(args: argparse.Namespace) -> dict[str, Any]:
    """The verify body; raises OSError/UnicodeDecodeError for an unreadable file."""
    body: dict[str, Any] = ({"event_id": args.event_id} if args.event_id is not None
                            else {"stream": args.stream, "seq": args.seq})
    if args.output is not None:
        body["replayed_output"] = args.output
    elif args.output_file is not None:
        with open(args.output_file, "rb") as f:
            body["replayed_output"] = f.read().decode("utf-8")
    else:
        with open(args.response_file, "rb") as f:
            body["replayed_response_b64"] = base64.b64encode(f.read()).decode("ascii")
    return body


def _verdict(answer: dict[str, Any]) -> str:
    def show(v: Any) -> str:
        if v is None:
            return "-"
        return str(v).lower() if isinstance(v, bool) else str(v)

    head = "MATCH" if answer.get("match") else "MISMATCH"
    lines = [f"=== Replay {head} (stream={answer.get('stream')} seq={answer.get('seq')}) ==="]
    for label, key in (("compared", "compared"), ("original_hash", "original_hash"),
                       ("replay_hash", "replay_hash"), ("deterministic", "deterministic"),
                       ("model_version", "model_version"), ("reason", "reason")):
        lines.append(f"  {label + ':':<15} {show(answer.get(key))}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    problem = _usage_error(args)
    if problem:
        return _fail(EXIT_USAGE, problem + "; see `evidence replay --help`")
    try:
        settings = resolve(args)
    except SettingsError as e:
        return _fail(EXIT_USAGE, str(e))
    missing = settings.need("api", "api_key")
    if missing:
        return _fail(EXIT_MISSING, missing)
    api, key = str(settings.api), str(settings.api_key)
    try:
        body = _request_body(args)
    except FileNotFoundError as e:
        return _fail(EXIT_MISSING, f"no such file: {e.filename}")
    except UnicodeDecodeError:
        return _fail(EXIT_MISSING, f"{args.output_file} is not UTF-8 text; pass the raw "
                                   f"response body with --response-file instead")
    except OSError as e:
        return _fail(EXIT_MISSING, f"cannot read {e.filename}: {e.strerror}")

    import httpx

    url = api.rstrip("/") + "/replay/verify"
    try:
        r = httpx.post(url, json=body, timeout=args.timeout,
                       headers={"Authorization": f"Bearer {key}"})
    except httpx.HTTPError as e:
        return _fail(EXIT_MISSING, f"cannot reach the API at {api} ({type(e).__name__}: {e}); "
                                   f"is it running? `make up` starts it")
    try:
        answer = r.json()
    except ValueError:
        answer = None
    if r.status_code != 200 or not isinstance(answer, dict) or "match" not in answer:
        message = answer.get("message") if isinstance(answer, dict) else None
        message = message or r.text[:200] or r.reason_phrase
        if args.json and isinstance(answer, dict):
            print(json.dumps(answer, indent=2))
        if r.status_code == 404:
            return _fail(EXIT_MISSING, f"{message}; check the stream/seq or event id, and "
                                       f"that the API key may read that stream")
        if r.status_code == 401:
            return _fail(EXIT_MISSING, f"{message}; pass --api-key or set EVIDENCE_API_KEY")
        if r.status_code == 422:
            return _fail(EXIT_USAGE, f"the API rejected the request: {message}")
        return _fail(EXIT_MISSING, f"the API answered {r.status_code}: {message}")
    if not args.no_verify:
        from cli.tlog import CliError

        try:
            answer = _verified(args, api, key, answer, body)
        except CliError as e:
            return _fail(e.code, str(e))
    print(json.dumps(answer, indent=2) if args.json else _verdict(answer))
    return EXIT_MATCH if answer["match"] else EXIT_MISMATCH


def _verified(args: argparse.Namespace, api: str, key: str, answer: dict[str, Any],
              body: dict[str, Any]) -> dict[str, Any]:
    """The API's verdict, checked against the record verified from its bundle; adds
    ``verified`` (the checkpoint that covers it). Raises CliError(EXIT_UNVERIFIED)."""
    from cli.tlog import ApiClient, CliError, log_verifier, stack_env, verified_record
    from evidence_contract.digests import output_digest, response_digest

    client = ApiClient(api, key, args.timeout)
    stream, seq = answer.get("stream"), answer.get("seq")
    if not isinstance(stream, str) or not isinstance(seq, int):
        raise CliError(EXIT_UNVERIFIED, f"the API's verdict names no record: {answer}")
    verifier = log_verifier(args, stack_env(), client)
    v = verified_record(client, verifier, stream, seq, args.checkpoint_wait)
    cp = v.checkpoint
    out = {**answer, "verified": {"origin": cp.origin, "tree_size": cp.size,
                                  "witnesses": list(v.witnesses)}}
    if v.log is not None:  # --log-witness-key: the deployment checkpoint that covers it
        out["verified"]["log"] = {"origin": v.log.checkpoint.origin,
                                  "tree_size": v.log.checkpoint.size,
                                  "entry_index": v.log.entry_index,
                                  "witnesses": list(v.log.witnesses)}
    if v.body is None:  # withheld by the read side's redaction: only its leaf is proved
        out["verified"]["digests"] = "withheld by redaction: compared by the API only"
        return out
    if v.body.get("encryption") is not None:  # keyed commitments: the API cannot compare
        out["verified"]["digests"] = "encrypted: keyed commitments"
        return out
    if body.get("event_id") is not None and v.body["event_id"] != body["event_id"]:
        raise CliError(EXIT_UNVERIFIED, f"the API compared {stream} #{seq}, whose event id is "
                                        f"{v.body['event_id']}, not {body['event_id']}")
    if "replayed_output" in body:
        sealed, replayed = v.body["output_digest"], output_digest(body["replayed_output"])
    else:
        sealed = v.body["response_digest"]
        replayed = response_digest(base64.b64decode(body["replayed_response_b64"]))
    match = sealed is not None and bytes(sealed) == replayed
    original = None if sealed is None else bytes(sealed).hex()
    if match != bool(answer.get("match")) or (original is not None and answer.get(
            "original_hash") not in (None, original)):
        raise CliError(EXIT_UNVERIFIED, f"the API's verdict on {stream} #{seq} (match "
                                        f"{answer.get('match')}, original "
                                        f"{answer.get('original_hash')}) is not the verified "
                                        f"record's (match {match}, original {original}): the "
                                        f"projection is altered; run `evidence audit`")
    out["verified"]["digests"] = "recomputed from the verified record"
    return out
