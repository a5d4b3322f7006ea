"""Manifests derived from a sealed record, for the two ways it can be replayed (pure).

- ``log_replay``: the response is served verbatim from the log. Nothing is executed, so the
  environment, tools and retrieval do not take part, and the record's stream, seq and record
  digest are its provenance. Exact when the request and the response bytes are both kept.
- ``live_reexecution``: the recorded request bytes are sent to the hosted API again. The
  inputs are frozen in those bytes (instructions, retrieved chunks and tool definitions are
  inside them), but a hosted API guarantees no determinism, with or without a seed: at best
  ``controlled``.

A hash-only record (request bytes not kept) cannot reconstruct its input: the analyzer says so
for both. ``record`` is a mapping with the columns of the ``records`` view.

An encrypted record (``key_id`` set) holds envelopes, not values: its input is a ``hash``
(the keyed content key) and its parameters ``unavailable`` to the analyzer, and the log
cannot serve its response verbatim without the subject's key. An *erased* one (``erased``
true: its key destroyed) is the same, for good: nothing of its content is evidence any more
but the commitments and the chain.

A record mapped from telemetry (``mapped`` true, record contract 2.2) was built from an
OpenTelemetry span, not captured at the wire: its capture method is ``mapped`` (the analyzer:
not native runtime evidence), its input a ``hash`` (its content key is the span's digest, there
were no request bytes) and the log holds no response to serve. Its trace context, and any
record's (``trace_id``, ``span_id``), is its provenance.
"""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import Any, Mapping

from fidelity.analyze import analyze
from fidelity.manifest import KIND, VERSION

ABSENT = {"state": "absent"}
UNAVAILABLE = {"state": "unavailable"}


def _value(v: Any) -> dict[str, Any]:
    return {"state": "value", "value": v}


def _bytes_value(b: bytes) -> dict[str, Any]:
    try:
        return _value(bytes(b).decode("utf-8"))
    except UnicodeDecodeError:
        return _value({"base64": base64.b64encode(bytes(b)).decode()})


def _sealed(record: Mapping[str, Any]) -> bool:
    """The record's content is envelopes (encrypted), or gone (erased)."""
    return record.get("key_id") is not None or bool(record.get("erased"))


def _input(record: Mapping[str, Any]) -> dict[str, Any]:
    if record.get("request_bytes") is not None and not _sealed(record):
        return _bytes_value(record["request_bytes"])
    # Hash-only policy: the content key commits to the bytes but cannot give them back.
    return {"state": "hash", "sha256": bytes(record["content_key"]).hex()}


def _seed(v: Any) -> str | None:
    """The seed as decimal text, as the record holds it, exact at any size.

    Not a JSON number: a manifest is hashed as RFC 8785 JSON, whose numbers are IEEE
    doubles, and a seed is often beyond 2**53. The ``records`` column is numeric (a Decimal).
    """
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, str):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    if isinstance(v, Decimal) and v.is_finite() and v == v.to_integral_value():
        return str(int(v))
    raise ValueError(f"seed {v!r} is not an integer")


def _common_model(record: Mapping[str, Any]) -> dict[str, Any]:
    params = None if _sealed(record) else record.get("params")
    seed = _seed(record.get("seed"))
    return {
        "input": _input(record),
        # Instructions travel inside the request body; there is no separate artifact.
        "system_instructions": ABSENT,
        "developer_instructions": ABSENT,
        "provider": _value({"name": record["provider_name"],
                            "endpoint": record.get("provider_endpoint")}),
        "model_name": _value(record["model_id"]) if record.get("model_id") else UNAVAILABLE,
        "parameters": _value(params) if params is not None else UNAVAILABLE,
        "seed": _value(seed) if seed is not None else (ABSENT if params is not None
                                                        else UNAVAILABLE),
    }


_NOT_USED_TOOLS = {"replay_mode": "not_used", "definitions": ABSENT, "calls": ABSENT,
                   "outputs": ABSENT, "ledger_complete": ABSENT, "deterministic": False}
_NOT_USED_RETRIEVAL = {"replay_mode": "not_used", "configuration": ABSENT, "corpus": ABSENT,
                       "outputs": ABSENT, "deterministic": False}
_NOT_APPLICABLE_ENV = {k: ABSENT for k in ("code_version", "runtime_version", "dependency_lock",
                                            "configuration", "container")}


def _manifest(record: Mapping[str, Any], determinism: dict[str, Any],
              isolation: dict[str, str]) -> dict[str, Any]:
    return {
        "kind": KIND,
        "version": VERSION,
        "model": {**_common_model(record), "determinism": determinism},
        "tools": dict(_NOT_USED_TOOLS),
        "retrieval": dict(_NOT_USED_RETRIEVAL),
        "environment": dict(_NOT_APPLICABLE_ENV),
        "isolation": isolation,
        "provenance": _provenance(record),
    }


def _provenance(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record's trace context (contract 2.2; absent before) and how it was captured."""
    ids = {k: ABSENT if record.get(k) is None else _value(bytes(record[k]).hex())
           for k in ("trace_id", "span_id")}
    return {**ids, "capture_method": "mapped" if record.get("mapped") else "native"}


def manifests_for_record(record: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    has_response = record.get("response_bytes") is not None and not record.get("erased")
    if record.get("erased"):
        basis = ("the record's content was erased (its key destroyed): its response can no "
                 "longer be served")
    elif has_response and record.get("key_id") is not None:
        basis = ("the response is sealed under the subject's key: served verbatim from the "
                 "log by a Replayer that holds the key; nothing is re-executed")
    elif has_response:
        basis = "the verbatim response bytes are served from the log; nothing is re-executed"
    elif record.get("mapped"):
        basis = ("mapped from telemetry: the span carried no response bytes, and what it says "
                 "of the call is not native evidence")
    else:
        basis = f"no response bytes were recorded (outcome {record.get('outcome')})"
    log = _manifest(
        record,
        {"guaranteed": has_response, "basis": basis},
        # The replay transport has no network path: every dimension is isolated.
        {"network": "isolated", "filesystem": "isolated", "external_services": "isolated",
         "side_effects": "isolated"},
    )
    seeded = record.get("seed") is not None
    live = _manifest(
        record,
        {"guaranteed": False,
         "basis": "hosted API: no determinism guarantee"
                  + (" (a seed was sent, which is not one)" if seeded else " and no seed was sent")},
        # Only the provider is called; no tool runs, nothing else is reached or written.
        {"network": "isolated", "filesystem": "isolated", "external_services": "isolated",
         "side_effects": "isolated"},
    )
    return {"log_replay": log, "live_reexecution": live}


def analyze_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """Both reports for a sealed record: ``{"log_replay": ..., "live_reexecution": ...}``."""
    out: dict[str, Any] = {"stream": record.get("stream"), "seq": record.get("seq")}
    for mode, manifest in manifests_for_record(record).items():
        out[mode] = {**analyze(manifest).to_dict(), "manifest": manifest}
    return out
