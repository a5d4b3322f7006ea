"""``evidence harness [--stream S] [--sample N | --all] [--live-cmd CMD] [--report FILE]``.

The divergence harness (see :mod:`audit.harness`): reads records from ``evidence.log`` itself,
asserts the API serves each byte for byte (reconstruction, must pass), and with ``--live-cmd``
re-executes each recorded request to measure live divergence (information only).

The live command runs under ``sh -c`` once per record with the request body on standard input;
it must write the response body to standard output and exit 0. Its environment names the
record: EVIDENCE_STREAM, EVIDENCE_SEQ, EVIDENCE_CONTENT_KEY, EVIDENCE_MODEL_ID,
EVIDENCE_PROVIDER_ENDPOINT.

Exit codes: 0 reconstruction passed (whatever the live divergence), 1 could not run, 2 usage
error, 3 reconstruction failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone

from .settings import SettingsError, add_options, resolve

HELP = "re-check that the API serves the log byte for byte; measure live divergence"

_NOT_PROJECTED_GRACE_S = 10.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stream", help="only this stream (default: every stream)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--sample", type=int, metavar="N", default=100,
                       help="check N records chosen at random from the log (default 100)")
    which.add_argument("--all", action="store_true", help="check every record")
    p.add_argument("--seed", type=int, help="seed of the sample, to repeat a run")
    p.add_argument("--live-cmd", metavar="CMD",
                   help="re-executor: request bytes on stdin, response bytes on stdout")
    p.add_argument("--live-timeout", type=float, default=120.0, metavar="SECONDS",
                   help="time limit per live run (default 120)")
    p.add_argument("--report", metavar="FILE",
                   help="write the JSON report to FILE (- for standard output)")
    add_options(p, "api", "api_key", "bootstrap", "topic_prefix",
                note={"api_key": "one allowed to read the streams checked"})


def _fail(msg: str, code: int) -> int:
    print(f"evidence harness: {msg}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    from evidence_contract import valid_stream_id

    if args.stream is not None and not valid_stream_id(args.stream):
        return _fail(f"{args.stream!r} is not a stream id", 2)
    if not args.all and args.sample < 1:
        return _fail("--sample must be at least 1 (or use --all)", 2)
    if args.live_timeout <= 0:
        return _fail("--live-timeout must be positive", 2)

    try:
        s = resolve(args)
    except SettingsError as e:
        return _fail(str(e), 2)
    missing = s.need("bootstrap", "api", "api_key")
    if missing:
        return _fail(f"need Kafka, the API and an API key: {missing}", 1)
    try:
        report = _harness(args, s.connection.names, str(s.bootstrap), str(s.api),
                          str(s.api_key))
    except _CannotRun as e:
        return _fail(f"cannot run: {e}", 1)

    from audit.harness import summary

    text = json.dumps(report, indent=2)
    if args.report == "-":
        print(text)
    elif args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    out = sys.stderr if args.report == "-" else sys.stdout
    for line in summary(report):
        print(line, file=out)
    return 0 if report["reconstruction"]["failed"] == 0 else 3


class _CannotRun(Exception):
    pass


def _read_sample(args, names, bootstrap):
    from audit.errors import AuditError
    from audit.harness import Sampler
    from audit.kafka_log import read_topic
    from evidence_contract import DecodeError, split_record

    sampler = Sampler(None if args.all else args.sample, args.seed)
    undecodable = 0
    try:
        for _p, _o, _k, value in read_topic(bootstrap, names.log):
            try:
                stored, record = split_record(value or b"")
            except DecodeError:
                undecodable += 1  # `evidence audit` names these
                continue
            if args.stream is None or record["body"]["stream"] == args.stream:
                sampler.offer((bytes(value), stored, record))
    except AuditError as e:
        raise _CannotRun(str(e)) from e
    return sampler, undecodable


def _harness(args, names, bootstrap, api, key) -> dict:
    import httpx

    from audit.harness import LiveTally, Served, check_reconstruction, replay_expected

    started = datetime.now(timezone.utc)
    sampler, undecodable = _read_sample(args, names, bootstrap)
    sample = sorted(sampler.kept, key=lambda x: (x[2]["body"]["stream"], x[2]["seal"]["seq"]))
    failures = []
    live = LiveTally() if args.live_cmd else None
    grace_until = time.monotonic() + _NOT_PROJECTED_GRACE_S
    with httpx.Client(base_url=api.rstrip("/"), timeout=30,
                      headers={"Authorization": f"Bearer {key}"}) as client:
        def get(path: str, **params) -> httpx.Response:
            # A record just sealed may not be projected yet: 404s get a short grace.
            while True:
                try:
                    r = client.get(path, params=params)
                except httpx.HTTPError as e:
                    raise _CannotRun(f"cannot reach the API at {api}: {e}") from e
                if r.status_code == 401:
                    raise _CannotRun("the API refused the key (401): check EVIDENCE_API_KEY")
                if r.status_code == 503:
                    raise _CannotRun(f"the API is unavailable: {r.text[:200]}")
                if r.status_code != 404 or time.monotonic() >= grace_until:
                    return r
                time.sleep(0.5)

        for message, stored, record in sample:
            body, seal = record["body"], record["seal"]
            stream, seq = body["stream"], seal["seq"]
            if replay_expected(body):
                rr = get(f"/replay/{bytes(body['content_key']).hex()}", stream=stream, seq=seq)
                replay = (rr.status_code, rr.content, dict(rr.headers))
            else:
                replay = (None, None, {})
            rec = get(f"/streams/{stream}/records/{seq}", include="bytes")
            served = Served(*replay, rec.status_code,
                            rec.json() if rec.status_code == 200 else None)
            problems = check_reconstruction(message, stored, record, served)
            if problems:
                failures.append({"stream": stream, "seq": seq, "event_id": body["event_id"],
                                 "problems": problems})
            if live is not None:
                _live_run(args, live, body, seq)
    report = {
        "started_at": started.isoformat(),
        "finished_at": datetime.now(timezone.utc).isoformat(),
        "stream": args.stream, "api": api,
        "log_records": sampler.seen, "undecodable_messages": undecodable,
        "sampled": len(sample), "sample": "all" if args.all else args.sample,
        "seed": args.seed,
        "reconstruction": {"checked": len(sample), "failed": len(failures),
                           "failures": failures},
        "live": live.to_dict() if live is not None else None,
    }
    report["ok"] = not failures
    return report


def _live_run(args, live, body, seq) -> None:
    if body["request_bytes"] is None:
        live.add(body, seq, None, "the request bytes were not kept (hash-only capture)")
        return
    child_env = {**os.environ,
                 "EVIDENCE_STREAM": body["stream"], "EVIDENCE_SEQ": str(seq),
                 "EVIDENCE_CONTENT_KEY": bytes(body["content_key"]).hex(),
                 "EVIDENCE_MODEL_ID": body["model_id"] or "",
                 "EVIDENCE_PROVIDER_ENDPOINT": body["provider"]["endpoint"]}
    try:
        p = subprocess.run(["sh", "-c", args.live_cmd], input=bytes(body["request_bytes"]),
                           capture_output=True, timeout=args.live_timeout, env=child_env)
    except subprocess.TimeoutExpired:
        live.add(body, seq, None, f"timed out after {args.live_timeout:g} s")
        return
    if p.returncode != 0:
        err = p.stderr.decode("utf-8", "replace").strip()[-300:]
        live.add(body, seq, None, f"exit {p.returncode}: {err}")
        return
    live.add(body, seq, p.stdout)
