"""The rules of record contract 2.2's ``trace`` and ``telemetry`` (pure, stdlib only).

The writer rejects a capture that breaks them (``BAD_TRACE``, ``BAD_TELEMETRY``) and the audit
names a sealed record that does (``bad_trace``, ``bad_telemetry``): one rule, here, for both,
as ``envelope.encrypted_body_problem`` is for encrypted captures. Each is also written in the
``CaptureEvent.avsc`` doc of the field it concerns.

A capture *mapped from telemetry* (``telemetry`` set) was built from an OpenTelemetry span or
log event, not from the bytes sent to and received from the provider: it has no request or
response bytes, its ``content_key`` is the span's own digest (``span_digest``, prefix 0x08,
over the span's deterministic protobuf serialization), not a request's, and it carries the
trace it came from. Without the span's bytes nobody can recompute ``span_digest`` or
``otlp_digest``: what can be checked is that the record says what it is.
"""

from __future__ import annotations

import hmac
from typing import Any

from .model import SPAN_ID_SIZE, TELEMETRY_DIALECTS, TRACE_ID_SIZE, valid_event_id

__all__ = ["is_mapped", "telemetry_problem", "trace_problem"]

_V2_2 = "2.2"


def is_mapped(body: dict[str, Any]) -> bool:
    """Whether ``body`` was mapped from telemetry (a body of 2.0 or 2.1 never was)."""
    return body.get("telemetry") is not None


def trace_problem(body: dict[str, Any]) -> str:
    """Why ``body``'s trace context is not one a span can have (W3C: trace_id 16 bytes,
    span_id 8, neither all zero) or not in a 2.2 capture; "" when it holds or there is none."""
    trace = body.get("trace")  # absent from a 2.0 or 2.1 body
    if trace is None:
        return ""
    version = body["schema_version"]
    if version != _V2_2:
        return f"schema_version {version!r} has no trace; a capture with a trace is 2.2"
    for name, size in (("trace_id", TRACE_ID_SIZE), ("span_id", SPAN_ID_SIZE)):
        value = trace[name]
        if len(value) != size:
            return f"trace.{name} is {len(value)} bytes, not {size}"
        if not any(value):
            return f"trace.{name} is all zero (an invalid W3C id)"
    return ""


def telemetry_problem(body: dict[str, Any]) -> str:
    """Why ``body``, mapped from telemetry, breaks a rule of one; "" when it holds or when
    it is not mapped. Digest sizes are every digest's rule (``codec.wrong_size_digest``)."""
    telemetry = body.get("telemetry")  # absent from a 2.0 or 2.1 body
    if telemetry is None:
        return ""
    version = body["schema_version"]
    if version != _V2_2:
        return f"schema_version {version!r} has no telemetry; a mapped capture is 2.2"
    if telemetry["dialect"] not in TELEMETRY_DIALECTS:
        return (f"telemetry.dialect {telemetry['dialect'][:40]!r} is none of "
                f"{', '.join(TELEMETRY_DIALECTS)}")
    if not telemetry["scope_name"]:
        return "telemetry.scope_name is empty"
    corroborates = telemetry["corroborates"]
    if corroborates is not None and not valid_event_id(corroborates):
        return f"telemetry.corroborates {corroborates[:40]!r} is not a canonical UUIDv7"
    for i, claim in enumerate(telemetry["claims"]):
        if not claim["name"]:
            return f"telemetry.claims[{i}].name is empty"
    if body["trace"] is None:
        return "a capture mapped from telemetry needs the trace it was mapped from"
    if body["capture"]["request_policy"] != "HASH_ONLY" or body["request_bytes"] is not None:
        return ("a capture mapped from telemetry had no request bytes: request_policy is "
                "HASH_ONLY and request_bytes null")
    if not hmac.compare_digest(bytes(body["content_key"]), bytes(telemetry["span_digest"])):
        return "content_key of a capture mapped from telemetry must equal telemetry.span_digest"
    for name in ("response_bytes", "response_digest", "response_length"):
        if body[name] is not None:
            return f"a capture mapped from telemetry had no response body, yet {name} is set"
    if body["encryption"] is not None:
        return "a capture mapped from telemetry cannot be encrypted (not supported yet)"
    return ""
