"""Read-model rows as the API's JSON: a ``records`` row (with its erasure, trace and, for a
mapped record, its telemetry mapping), a stream head, a finding. Re-exported by
:mod:`api.models`, the bodies these dicts fill."""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime, timedelta, timezone
from typing import Any

from evidence_contract import decode
from evidence_contract.merkle import record_leaf_hash
from evidence_contract.vectors import to_jsonable

from .db import ERASED_COLUMNS, FINDING_COLUMNS, HEAD_COLUMNS, META_COLUMNS

__all__ = ["erased_of", "finding_dict", "head_dict", "head_seq_of", "record_dict"]


def _hex(b: Any) -> str | None:
    return None if b is None else bytes(b).hex()


def _b64(b: Any) -> str | None:
    return None if b is None else base64.b64encode(bytes(b)).decode("ascii")


_DIGESTS = ("content_key", "prev_digest", "record_digest", "response_digest", "output_digest",
            "input_digest", "prompt_digest")


_META = (*META_COLUMNS, *ERASED_COLUMNS)


def erased_of(row: tuple[Any, ...], at: int = len(META_COLUMNS)) -> tuple[int, str] | None:
    """``(erased_at_us, request_id)`` of a row whose ``ERASED_COLUMNS`` start at ``at``."""
    _key_id, erased_at, request_id = row[at:at + len(ERASED_COLUMNS)]
    return None if erased_at is None else (int(erased_at), request_id)


def _micros_iso(us: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=us)).isoformat()


def record_dict(row: tuple[Any, ...], redaction: Any = None) -> dict[str, Any]:
    """A ``records`` row (``META_COLUMNS`` and ``ERASED_COLUMNS``, then optionally
    ``BYTES_COLUMNS``) as JSON. An erased record's bodies are never given, only its log
    message (``record_b64``, ciphertext: what its proofs are over). A plain record of a
    stream ``redaction`` (the live generation's policy) covers gets its masked bodies and,
    instead of its log message (which holds the plaintext), the message's SHA-256 and
    Merkle leaf hash."""
    r = dict(zip(_META, row))
    out: dict[str, Any] = {
        "stream": r["stream"], "seq": r["seq"], "event_id": str(r["event_id"]),
        "schema_version": r["schema_version"], "occurred_at": r["occurred_at"].isoformat(),
        "occurred_at_us": r["occurred_at_us"], "captured_at": r["captured_at"].isoformat(),
        "outcome": r["outcome"],
    }
    for name in _DIGESTS:
        out[name] = _hex(r[name])
    out["provider"] = {"name": r["provider_name"], "endpoint": r["provider_endpoint"],
                       "api_version": r["provider_api_version"]}
    for name in ("model_id", "response_model", "fingerprint", "params", "http_status",
                 "response_content_type"):
        out[name] = r[name]
    # numeric in PostgreSQL (a Decimal here): an integer in JSON, exact at any size.
    seed = None if r["seed"] is None else int(r["seed"])
    out["replay"] = {"seed": seed, "temperature": r["temperature"], "top_p": r["top_p"],
                     "deterministic": r["deterministic"]}
    for name in ("request_policy", "streamed", "closed_early", "truncated", "writer_id",
                 "request_length", "response_length"):
        out[name] = r[name]
    out["log"] = {"partition": r["log_partition"], "offset": r["log_offset"]}
    out.update(_trace_fields(r))
    erased = erased_of(row)
    out["content"] = ("erased" if erased else
                      "plain" if r["key_id"] is None else "encrypted")
    out["key_id"] = _hex(r["key_id"])
    out["erasure"] = None if erased is None else {
        "erased_at": _micros_iso(erased[0]), "erased_at_us": erased[0], "request_id": erased[1]}
    if len(row) > len(_META):
        request, response, error, input_, prompt, record = row[len(_META):]
        if erased:
            request = response = error = input_ = prompt = None
        out.update(request_b64=_b64(request), response_b64=_b64(response),
                   error_b64=_b64(error), input_b64=_b64(input_), prompt_b64=_b64(prompt),
                   record_b64=_b64(record))
        if (record is not None and redaction is not None and r["key_id"] is None
                and redaction.covers(r["stream"])):
            out.update(record_b64=None, record_sha256=hashlib.sha256(bytes(record)).hexdigest(),
                       record_leaf_hash=record_leaf_hash(bytes(record)).hex())
    return out


def _trace_fields(r: dict[str, Any]) -> dict[str, Any]:
    """``capture_method``, ``trace`` and ``telemetry`` of a row (record contract 2.2). The
    mapping is read from the record itself (``telemetry_record``: its log message, selected
    for a mapped record only)."""
    trace = None if r["trace_id"] is None else {"trace_id": bytes(r["trace_id"]).hex(),
                                                "span_id": bytes(r["span_id"]).hex()}
    telemetry = None
    if r["mapped"] and r["telemetry_record"] is not None:
        telemetry = to_jsonable(decode(bytes(r["telemetry_record"]))[1]["body"]["telemetry"])
    return {"capture_method": "mapped from telemetry" if r["mapped"] else "wire",
            "trace": trace, "telemetry": telemetry}


_HEAD_SEQ = HEAD_COLUMNS.index("seq")


def head_seq_of(row: tuple[Any, ...]) -> int:
    """The seq of a ``heads`` row (``HEAD_COLUMNS``)."""
    return row[_HEAD_SEQ]


def head_dict(row: tuple[Any, ...]) -> dict[str, Any]:
    h = dict(zip(HEAD_COLUMNS, row))
    return {"stream": h["stream"], "head_seq": h["seq"], "head_digest": h["record_digest"].hex(),
            "record_count": h["record_count"], "first_at": h["first_at"].isoformat(),
            "last_at": h["last_at"].isoformat()}


def finding_dict(row: tuple[Any, ...]) -> dict[str, Any]:
    f = dict(zip(FINDING_COLUMNS, row))
    f["found_at"] = f["found_at"].isoformat()
    return f
