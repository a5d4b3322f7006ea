"""A :class:`otlp.model.MappedCall` as the CaptureEvent of record contract 2.2, labelled as
mapped from telemetry.

Pure: a call, the export request's body and the receiver's settings in, the capture dict out.
What the contract asks of a capture mapped from telemetry (``telemetry`` set):

- ``content_key`` is ``telemetry.span_digest``, sha256(0x08 || the span's (or log record's)
  deterministic protobuf bytes), and ``request_length`` their length: there were no request
  bytes, so nothing claims to be one. ``telemetry.otlp_digest`` is sha256(0x07 || the export
  request's body, gzip removed).
- ``request_policy`` HASH_ONLY; no request, response or prompt bytes; ``response_digest`` and
  ``response_length`` null also when the call succeeded.
- ``input_bytes`` / ``input_digest``: the input messages exactly as one attribute carried them
  (``Content.raw``), never rebuilt messages; ``output_digest`` of the output text carried.
- ``trace``: the span's W3C ids (a log event's span's), which must be valid.

The ``event_id`` is derived from the item (:func:`event_id`): a resent span gets the same id
and the writer absorbs it; a span id sent again with other bytes gets another id, so the
conflict is sealed beside the first, never dropped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from evidence_contract.digests import input_digest, otlp_digest, output_digest, span_digest
from evidence_contract.model import valid_event_id, valid_seed, valid_stream_id
from otlp.attributes import Attributes
from otlp.bijotel import claims
from otlp.dialects import map_log_event, map_span
from otlp.errors import UnmappableError
from otlp.model import Content, MappedCall, Params

__all__ = ["DEFAULT_STREAM", "LIBRARY", "SCHEMA_VERSION", "Mapped", "Streams", "build_capture",
           "captures_in_logs", "captures_in_traces", "event_id"]

SCHEMA_VERSION = "2.2"
"""The record contract a mapped capture follows (the first with ``trace`` and ``telemetry``);
pinned here, not taken from the contract's current version, which may move on."""

LIBRARY = "evidence-store-otlp"
"""``capture.library`` starts with this, then ``/<version>`` and what it was mapped from."""

DEFAULT_STREAM = "otel"

_TRACE_ID_SIZE, _SPAN_ID_SIZE = 16, 8
_EVENT_ID_DOMAIN = b"evidence-store otlp event_id\x00"


@dataclass(frozen=True)
class Streams:
    """Which stream a capture is chained in: ``stream`` for every call, or, with
    ``by_service``, ``<stream>.<service.name>`` of the resource that sent it (``<stream>``
    alone when the resource names no service)."""

    stream: str = DEFAULT_STREAM
    by_service: bool = False

    def __post_init__(self) -> None:
        if not valid_stream_id(self.stream):
            raise ValueError(f"the OTLP stream {self.stream!r} is not a stream id "
                             f"([A-Za-z0-9._:-], 1 to 128 characters)")

    def of(self, resource: Resource) -> str:
        """The stream of a resource's calls; :class:`UnmappableError` when its service name
        does not make a stream id."""
        if not self.by_service:
            return self.stream
        service = Attributes(resource.attributes).str("service.name")
        if not service:
            return self.stream
        stream = f"{self.stream}.{service}"
        if not valid_stream_id(stream):
            raise UnmappableError(f"service.name {service[:60]!r} does not make a stream id: "
                                  f"{stream[:80]!r} is not [A-Za-z0-9._:-]{{1,128}}")
        return stream


def event_id(call: MappedCall, digest: bytes) -> str:
    """A UUIDv7 for the item: its time field the span's start millisecond, its 74 other bits
    from sha256 of (trace id, span id, ``digest``, the item's span digest).

    The same span sent again (a resend, whatever request carries it) gets the same id; the same
    trace and span id with other bytes get another, so a conflicting resend is a second record.
    """
    h = hashlib.sha256(_EVENT_ID_DOMAIN + call.trace_id + call.span_id + digest).digest()
    ms = (call.start_time_ns // 1_000_000) & 0xFFFF_FFFF_FFFF
    bits = int.from_bytes(h[:10], "big")
    rand_a, rand_b = bits >> 68 & 0xFFF, bits & ((1 << 62) - 1)
    v = ms << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    x = f"{v:032x}"
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


def _check(call: MappedCall) -> None:
    for name, value, size in (("trace id", call.trace_id, _TRACE_ID_SIZE),
                              ("span id", call.span_id, _SPAN_ID_SIZE)):
        if len(value) != size or not any(value):
            raise UnmappableError(
                f"a GenAI {call.source.replace('_', ' ')} whose {name} {value.hex()!r} is not a "
                f"W3C {name} ({size} bytes, not all zero)")
    if not call.scope_name:
        raise UnmappableError("a GenAI item without an instrumentation scope name")
    if call.evidence_event_id is not None and not valid_event_id(call.evidence_event_id):
        raise UnmappableError(f"evidence.event_id {call.evidence_event_id[:40]!r} is not a "
                              f"UUIDv7 in canonical lowercase text")


def _params(params: Params) -> str | None:
    """The request parameters carried, as JSON text (null ones left out); a seed that is an
    integer's decimal text as that integer, exactly, else as the text carried."""
    out: dict[str, Any] = {}
    for f in fields(params):
        value = getattr(params, f.name)
        if value is None:
            continue
        if f.name == "seed" and valid_seed(value):
            value = int(value)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return json.dumps(out, sort_keys=True, separators=(",", ":")) if out else None


def _content(call: MappedCall) -> list[Content]:
    return [c for c in (call.input_messages, call.system_instructions, call.output_messages)
            if c is not None]


def build_capture(call: MappedCall, body: bytes, stream: str, version: str) -> dict[str, Any]:
    """The CaptureEvent (record contract 2.2) of one mapped call, in ``stream``.

    ``body`` is the export request as received, content encoding removed; ``version`` the
    receiver's. Raises :class:`UnmappableError` for an item the contract cannot hold.
    """
    _check(call)
    item = span_digest(call.span_bytes)
    inputs = call.input_messages
    kept = inputs.raw if inputs is not None and not inputs.rebuilt else None
    seed = call.params.seed if call.params.seed is not None and valid_seed(call.params.seed) \
        else None
    started = call.start_time_ns // 1000
    ended = call.end_time_ns // 1000 if call.end_time_ns else started
    failed = call.status == "error"
    return {
        "schema_version": SCHEMA_VERSION,
        "event_id": event_id(call, item),
        "stream": stream,
        "captured_at": ended,
        "content_key": item,
        "request_bytes": None,
        "request_length": len(call.span_bytes),
        "input_digest": input_digest(kept) if kept is not None else None,
        "input_bytes": kept,
        "prompt_digest": None,
        "prompt_bytes": None,
        "retrieval": [],
        "provider": _provider(call),
        "model_id": call.request_model,
        "params": _params(call.params),
        "fingerprint": None,
        "response_model": call.response_model,
        "http_status": None,
        "response_content_type": None,
        "response_bytes": None,
        "response_length": None,
        "response_digest": None,
        "output_digest": output_digest(call.output_text) if call.output_text is not None
        else None,
        # What the telemetry said of the failure (error.type, else the status message): no
        # provider error body reached the receiver.
        "error_bytes": (call.error_type or "error").encode("utf-8") if failed else None,
        "outcome": "FAILED" if failed else "COMMITTED",
        "replay": {"seed": seed, "temperature": call.params.temperature,
                   "top_p": call.params.top_p, "deterministic": seed is not None},
        "capture": _provenance(call, version, started, ended),
        "encryption": None,
        "trace": {"trace_id": call.trace_id, "span_id": call.span_id},
        "telemetry": _telemetry(call, body, item),
    }


def _provider(call: MappedCall) -> dict[str, Any]:
    """Who the call went to, as the telemetry names it: server.address[:port], else the
    instrumentation scope (``otlp:<scope>``) when the span does not say."""
    if call.server_address:
        endpoint = (f"{call.server_address}:{call.server_port}" if call.server_port
                    else call.server_address)
    else:
        endpoint = f"otlp:{call.scope_name}"
    return {"name": call.provider or "unknown", "endpoint": endpoint, "api_version": None}


def _provenance(call: MappedCall, version: str, started: int, ended: int) -> dict[str, Any]:
    """The capture's provenance: this receiver, the dialect and scope it mapped, hash only."""
    scope = f"{call.scope_name} {call.scope_version}".strip()
    return {
        "library": f"{LIBRARY}/{version} (mapped from telemetry: {call.dialect} {scope})",
        "host": None,
        "request_policy": "HASH_ONLY",
        "streamed": bool(call.params.stream),
        "closed_early": False,
        "truncated": False,
        "started_at": started,
        "duration_us": ended - started if call.end_time_ns >= call.start_time_ns else None,
    }


def _telemetry(call: MappedCall, body: bytes, item: bytes) -> dict[str, Any]:
    """The TelemetryMapping: where the item came from, the digests of the export request and
    of the item's own bytes, where its messages were read, and its claims with verdicts."""
    content = _content(call)
    return {
        "dialect": call.dialect,
        "scope_name": call.scope_name,
        "scope_version": call.scope_version or None,
        "source": "SPAN" if call.source == "span" else "LOG_EVENT",
        "otlp_digest": otlp_digest(body),
        "span_digest": item,
        "content_from": list(dict.fromkeys(a for c in content for a in c.attributes)),
        "rebuilt": any(c.rebuilt for c in content),
        "corroborates": call.evidence_event_id,
        "claims": [{"name": c.name, "value": c.value, "verdict": c.verdict.upper()}
                   for c in claims(call)],
    }


@dataclass
class Mapped:
    """What one export request gives: the captures, and the GenAI items that could not be
    captures (``rejected``, with the first few reasons). Items that are not GenAI inference
    calls are neither: they are not evidence, and not an error either."""

    captures: list[dict[str, Any]]
    rejected: int = 0
    reasons: list[str] | None = None

    def reject(self, error: UnmappableError) -> None:
        self.rejected += 1
        self.reasons = (self.reasons or [])
        if len(self.reasons) < _REASONS_KEPT:
            self.reasons.append(str(error))

    @property
    def error_message(self) -> str:
        """``partial_success.error_message``: why items were rejected (empty when none)."""
        if not self.rejected:
            return ""
        more = self.rejected - len(self.reasons or ())
        return "; ".join((self.reasons or []) + ([f"and {more} more"] if more > 0 else []))


_REASONS_KEPT = 3


def captures_in_traces(request: ExportTraceServiceRequest, body: bytes, streams: Streams,
                       version: str) -> Mapped:
    """The captures of every GenAI inference span of a trace export, in the order sent."""
    out = Mapped([])
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                call = map_span(span, scope_spans.scope)
                if call is not None:
                    _add(out, call, body, streams, resource_spans.resource, version)
    return out


def captures_in_logs(request: ExportLogsServiceRequest, body: bytes, streams: Streams,
                     version: str) -> Mapped:
    """The captures of every ``gen_ai.client.inference.operation.details`` event of a logs
    export, in the order sent."""
    out = Mapped([])
    for resource_logs in request.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                call = map_log_event(record, scope_logs.scope)
                if call is not None:
                    _add(out, call, body, streams, resource_logs.resource, version)
    return out


def _add(out: Mapped, call: MappedCall, body: bytes, streams: Streams, resource: Resource,
         version: str) -> None:
    try:
        out.captures.append(build_capture(call, body, streams.of(resource), version))
    except UnmappableError as e:
        out.reject(e)
