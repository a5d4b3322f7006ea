"""``evidence inspect``: one record, everything about it, and whether it verifies.

    evidence inspect (--stream S --seq N | --event-id E) [--format text|json] [--max-chars N]

Shows the record as the API serves it (metadata, digests, outcome, model and fingerprint,
replay context, content and erasure, the log position), its request, response and error
bodies shown safely (JSON pretty-printed, SSE as its events, text as text with control
characters escaped, anything else as a hex preview: nothing is passed to the terminal as it
came), its chain neighbours, and its verification step by step as ``evidence replay`` verifies
(:func:`cli.tlog.verified_record`: the record's bytes, its inclusion in a checkpoint signed by
the log key you hold, the witnesses you name), then the projection's fields compared with the
verified record's. The bodies shown are the verified record's where it holds them (a plain
record), else the API's (encrypted or masked by redaction: said so).

Exit codes: 0 shown and verified (or ``--no-verify``), 1 the record or the API missing or
unreachable, 2 usage error, 4 the evidence failed its check (the record is shown, marked NOT
VERIFIED, with the step that failed).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import unicodedata
from typing import Any

from .tlog import (EXIT_UNVERIFIED, ApiClient, CliError, add_common, add_trust, api_client, fail,
                   log_verifier, stack_env, verified_record)

__all__ = ["HELP", "add_arguments", "compare", "render_body", "run", "safe_text"]

HELP = "show one record (metadata, digests, bodies shown safely, chain) and verify it"

EXIT_OK, EXIT_MISSING, EXIT_USAGE = 0, 1, 2
_KEPT = {"\n", "\t"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    rec = p.add_argument_group("record (either --stream with --seq, or --event-id)")
    rec.add_argument("--stream", help="stream id of the record")
    rec.add_argument("--seq", type=int, help="seq of the record in --stream (1-based)")
    rec.add_argument("--event-id", help="the capture's event id (UUID) instead of stream/seq")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (default) or JSON")
    p.add_argument("--max-chars", type=int, default=4000, metavar="N",
                   help="show at most N characters of each body (default 4000)")
    add_common(p)
    add_trust(p)


def safe_text(text: str) -> str:
    """``text`` with every control or format character (terminal escapes, bidi overrides)
    but newline and tab written as ``\\u{XXXX}``."""
    return "".join(c if c in _KEPT or unicodedata.category(c) not in ("Cc", "Cf", "Cs")
                   else f"\\u{{{ord(c):04x}}}" for c in text)


def render_body(data: bytes | None, content_type: str | None, max_chars: int
                ) -> dict[str, Any]:
    """How a body is shown: ``{"kind": json|sse|text|binary|none, "bytes": n, "text": ...}``,
    the text safe for a terminal (:func:`safe_text`) and cut at ``max_chars``."""
    if data is None:
        return {"kind": "none", "bytes": 0, "text": None}
    ctype = (content_type or "").split(";")[0].strip().lower()
    text, kind = None, "binary"
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError:
        decoded = None
    if decoded is not None:
        kind, text = "text", decoded
        if ctype == "text/event-stream" or decoded.startswith(("data:", "event:")):
            from evidence_contract.outputs import parse_sse

            events = []
            for event, payload in parse_sse(data):
                try:
                    payload = json.dumps(json.loads(payload), ensure_ascii=False)
                except ValueError:
                    pass
                events.append(f"[{event or 'message'}] {payload}")
            if events:
                kind, text = "sse", "\n".join(events)
        else:
            try:
                kind, text = "json", json.dumps(json.loads(decoded), indent=2, ensure_ascii=False)
            except ValueError:
                pass
    if text is None:
        preview = data[:max(1, max_chars // 3)]
        text = " ".join(preview[i:i + 16].hex(" ") for i in range(0, len(preview), 16))
        if len(preview) < len(data):
            text += f" … ({len(data) - len(preview)} more bytes)"
        return {"kind": kind, "bytes": len(data), "text": text}
    text = safe_text(text)
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n… ({len(text) - max_chars} more characters)"
    return {"kind": kind, "bytes": len(data), "text": text}


_COMPARED = ("stream", "seq", "event_id", "occurred_at_us", "record_digest", "prev_digest",
             "content_key", "response_digest", "output_digest", "input_digest", "prompt_digest",
             "outcome", "model_id", "response_model", "fingerprint", "request_length",
             "response_length")


def compare(served: dict[str, Any], decoded: dict[str, Any]) -> list[str]:
    """The fields of ``served`` (the API's record) that are not the verified record's
    (``decoded``: ``{"body", "seal"}``), each as "field: served X, sealed Y"."""
    body, seal = decoded["body"], decoded["seal"]
    sealed = {**{k: body.get(k) for k in _COMPARED if k in body},
              "seq": seal["seq"], "occurred_at_us": seal["occurred_at"],
              "record_digest": seal["record_digest"], "prev_digest": seal["prev_digest"]}
    out = []
    for name in _COMPARED:
        want = sealed.get(name)
        if isinstance(want, (bytes, bytearray)):
            want = bytes(want).hex()
        elif name == "event_id" and want is not None:
            want = str(want)
        if served.get(name) != want:
            out.append(f"{name}: served {served.get(name)!r}, sealed {want!r}")
    return out


def _usage(args: argparse.Namespace) -> str | None:
    from evidence_contract import valid_event_id, valid_stream_id

    if args.event_id is not None:
        if args.stream is not None or args.seq is not None:
            return "name the record either by --stream and --seq or by --event-id, not both"
        if not valid_event_id(args.event_id):
            return f"--event-id {args.event_id!r} is not a UUIDv7 in lowercase canonical form"
    elif args.stream is None or args.seq is None:
        return "name the record: --stream S --seq N, or --event-id E"
    elif not valid_stream_id(args.stream):
        return f"--stream {args.stream!r} is not a stream id"
    elif args.seq < 1:
        return f"--seq must be 1 or more, got {args.seq}"
    if args.max_chars < 1:
        return f"--max-chars must be 1 or more, got {args.max_chars}"
    return None


def _record(api: ApiClient, args: argparse.Namespace) -> dict[str, Any]:
    path = (f"/events/{args.event_id}" if args.event_id is not None
            else f"/streams/{args.stream}/records/{args.seq}")
    r = api.get(path, {"include": "bytes"})
    if r.status_code == 404:
        raise CliError(EXIT_MISSING, f"no such record visible to this API key ({path}); check "
                                     f"the stream/seq or event id and the key's streams")
    if r.status_code != 200:
        api.ok(path, {"include": "bytes"})  # raises with the API's reason
    return r.json()


def _neighbours(api: ApiClient, record: dict[str, Any]) -> dict[str, Any]:
    """The records before and after in the stream (the projection's), and whether each
    links: the record's prev_digest is its predecessor's record_digest, and so on."""
    out: dict[str, Any] = {}
    stream, seq = record["stream"], record["seq"]
    for side, other in (("previous", seq - 1), ("next", seq + 1)):
        if other < 1:
            out[side] = {"seq": 0, "record_digest": "00" * 32,
                         "links": record["prev_digest"] == "00" * 32, "note": "genesis"}
            continue
        r = api.get(f"/streams/{stream}/records/{other}")
        if r.status_code == 404:
            out[side] = None
            continue
        if r.status_code != 200:
            api.ok(f"/streams/{stream}/records/{other}")
        n = r.json()
        links = (record["prev_digest"] == n["record_digest"] if side == "previous"
                 else n["prev_digest"] == record["record_digest"])
        out[side] = {"seq": other, "record_digest": n["record_digest"], "links": links}
    return out


def _verify(api: ApiClient, args: argparse.Namespace, env: dict[str, str],
            record: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The verification as steps, and what passed (``Verified``, None when it failed)."""
    stream, seq = record["stream"], record["seq"]
    verifier = log_verifier(args, env, api)
    try:
        v = verified_record(api, verifier, stream, seq, args.checkpoint_wait)
    except CliError as e:
        if e.code != EXIT_UNVERIFIED:
            raise
        return {"verified": False, "reason": str(e),
                "steps": [{"step": "bundle", "ok": False, "detail": str(e)}]}, None
    cp = v.checkpoint
    steps = []
    if v.record is not None:
        steps.append({"step": "record", "ok": True, "detail": (
            f"the log message ({len(v.record)} bytes) decodes, its record_digest recomputes "
            f"from its body, and it hashes to the leaf proved")})
    else:
        steps.append({"step": "record", "ok": True, "detail": (
            "the log message is withheld (redaction): the leaf is proved from the served "
            "record_digest and record_sha256, not the masked bodies")})
    steps.append({"step": "inclusion", "ok": True, "detail": (
        f"leaf {seq - 1} folds with the inclusion proof to the root {cp.root_hash.hex()} of "
        f"the tree of size {cp.size}")})
    steps.append({"step": "checkpoint", "ok": True, "detail": (
        f"{cp.origin} size {cp.size} is signed by the log key {verifier.log_key.name}")})
    steps.append({"step": "witnesses", "ok": True, "detail": (
        f"cosigned by {', '.join(v.witnesses)}" if v.witnesses
        else "no witness key given: none required (--witness-key)")})
    if v.log is not None:
        steps.append({"step": "deployment log", "ok": True, "detail": (
            f"in the deployment checkpoint of size {v.log.checkpoint.size}, entry "
            f"{v.log.entry_index}, cosigned by {', '.join(v.log.witnesses)}")})
    differ = [] if v.decoded is None else compare(record, v.decoded)
    steps.append({"step": "projection", "ok": not differ, "detail": (
        "; ".join(differ) + ": the projection is altered; run `evidence audit`" if differ
        else "the served fields agree with the verified record" if v.decoded is not None
        else "withheld: only record_digest is proved")})
    out = {"verified": not differ, "checkpoint": {"origin": cp.origin, "tree_size": cp.size},
           "witnesses": list(v.witnesses), "steps": steps}
    if differ:
        out["reason"] = "the projection's fields differ from the verified record's"
    return out, v


def _bodies(record: dict[str, Any], verified: Any, max_chars: int) -> dict[str, Any]:
    body = None if verified is None else verified.body
    from_record = body is not None and body.get("encryption") is None
    out: dict[str, Any] = {"source": "the verified record" if from_record else (
        "the API (erased: never served)" if record["content"] == "erased"
        else "the API (encrypted: envelopes)" if record["content"] == "encrypted"
        else "the API (not verified)")}
    for name, ctype in (("request", "application/json"),
                        ("response", record.get("response_content_type")),
                        ("error", None), ("input", None), ("prompt", None)):
        if from_record:
            data = body.get(f"{name}_bytes")
        else:
            b64 = record.get(f"{name}_b64")
            data = None if b64 is None else base64.b64decode(b64)
        out[name] = render_body(None if data is None else bytes(data), ctype, max_chars)
    return out


def run(args: argparse.Namespace) -> int:
    problem = _usage(args)
    if problem:
        return fail("inspect", CliError(EXIT_USAGE, problem + "; see `evidence inspect --help`"))
    env = stack_env()
    try:
        api = api_client(args, env)
        record = _record(api, args)
        chain = _neighbours(api, record)
        if args.no_verify:
            verification: dict[str, Any] = {"verified": None, "steps": [], "reason": (
                "not checked (--no-verify): the API's word")}
            verified = None
        else:
            verification, verified = _verify(api, args, env, record)
    except CliError as e:
        return fail("inspect", e)
    shown = {k: v for k, v in record.items() if not k.endswith("_b64")}
    doc = {"record": shown, "bodies": _bodies(record, verified, args.max_chars),
           "chain": chain, "verification": verification}
    print(json.dumps(doc, indent=2, ensure_ascii=False) if args.format == "json" else text(doc))
    if verification["verified"] is False:
        print(f"evidence inspect: NOT VERIFIED: {verification.get('reason')}", file=sys.stderr)
        return EXIT_UNVERIFIED
    return EXIT_OK


def _show(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    return safe_text(str(v))


def text(doc: dict[str, Any]) -> str:
    """The text form of ``inspect``'s document."""
    r = doc["record"]
    lines = [f"=== Record {r['stream']} #{r['seq']} ==="]

    def field(label: str, value: Any) -> None:
        lines.append(f"  {label + ':':<20} {_show(value)}")

    for name in ("event_id", "schema_version", "occurred_at", "captured_at", "outcome",
                 "http_status", "capture_method", "content", "key_id"):
        field("sealed at" if name == "occurred_at" else name, r.get(name))
    if r.get("erasure"):
        field("erased at", r["erasure"]["erased_at"])
        field("erasure request", r["erasure"]["request_id"])
    p = r.get("provider") or {}
    field("provider", f"{p.get('name')} {p.get('endpoint')} {p.get('api_version') or ''}".strip())
    field("model asked", r.get("model_id"))
    field("model answered", r.get("response_model"))
    field("fingerprint", r.get("fingerprint"))
    rp = r.get("replay") or {}
    field("replay", " ".join(f"{k}={_show(rp.get(k))}"
                             for k in ("seed", "temperature", "top_p", "deterministic")))
    field("params", r.get("params"))
    field("capture", f"policy={r.get('request_policy')} streamed={_show(r.get('streamed'))} "
                     f"closed_early={_show(r.get('closed_early'))} "
                     f"truncated={_show(r.get('truncated'))} writer={r.get('writer_id')}")
    field("lengths", f"request {r.get('request_length')} B, response "
                     f"{_show(r.get('response_length'))} B")
    if r.get("trace"):
        field("trace", f"{r['trace']['trace_id']} span {r['trace']['span_id']}")
    field("log position", f"partition {r['log']['partition']} offset {r['log']['offset']}")
    lines.append("=== Digests ===")
    for name in ("content_key", "prev_digest", "record_digest", "response_digest",
                 "output_digest", "input_digest", "prompt_digest"):
        field(name, r.get(name))
    lines.append("=== Chain (the projection's neighbours) ===")
    for side, n in doc["chain"].items():
        if n is None:
            field(side, "none (yet)")
        else:
            field(side, f"#{n['seq']} {n['record_digest']} "
                        f"{'links' if n['links'] else 'DOES NOT LINK'}")
    v = doc["verification"]
    lines.append("=== Verification ===")
    for s in v["steps"]:
        lines.append(f"  {'ok  ' if s['ok'] else 'FAIL'} {s['step']}: {safe_text(s['detail'])}")
    lines.append("  " + ("VERIFIED" if v["verified"] else "NOT VERIFIED" if v["verified"] is False
                         else "NOT CHECKED") + (f": {v['reason']}" if v.get("reason") else ""))
    bodies = doc["bodies"]
    lines.append(f"=== Bodies (from {bodies['source']}) ===")
    for name in ("request", "response", "error", "input", "prompt"):
        b = bodies[name]
        if b["kind"] == "none":
            continue
        lines.append(f"--- {name} ({b['kind']}, {b['bytes']} bytes) ---")
        lines.append(b["text"])
    return "\n".join(lines)
