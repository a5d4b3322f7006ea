"""Build the CaptureEvent of one HTTP exchange. Pure: values in, a dict out.

The transport fills an :class:`Exchange` while the call runs (``content_key`` first, before
any byte is sent); :func:`build_event` turns it into the ``CaptureEvent`` dict that
``schemas.encode("CaptureEvent", ...)`` accepts. How a call ended decides the outcome:

    no response at all (connect error, timeout, cancel)  UNKNOWN   error_bytes = the exception
    HTTP status >= 400                                   FAILED    error_bytes = verbatim body
    body cut by a transport error                        UNKNOWN   response_bytes = bytes so far
    closed by the application before the body was whole  UNKNOWN   closed_early = True
    otherwise                                            COMMITTED output_digest from the adapter

``output_digest`` is only set for COMMITTED: a partial text is not what a re-execution is
compared against.

``digests`` is what computes the record's digests: the plain SHA-256 functions of
``evidence_contract.digests`` by default, or a subject's ``SubjectKeys`` (keyed commitments)
for a capture the Recorder then seals (content policy ``encrypt``).
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field
from typing import Any

from evidence_contract import SCHEMA_VERSION
from evidence_contract import digests as plain_digests

from . import adapters

__all__ = ["HASH_ONLY", "VALUE", "Exchange", "build_event", "decode_body", "outcome"]

VALUE = "VALUE"
HASH_ONLY = "HASH_ONLY"


@dataclass
class Exchange:
    """One HTTP request/response as the transport saw it."""

    stream: str
    request_policy: str
    content_key: bytes
    request_bytes: bytes
    url: str
    host: str
    path: str
    started_at: int
    request_headers: dict[str, str] = field(default_factory=dict)  # lowercase names
    query: dict[str, str] = field(default_factory=dict)
    finished_at: int | None = None
    duration_us: int | None = None
    status: int | None = None
    content_type: str | None = None
    content_encoding: str | None = None
    content_length: int | None = None
    chunks: list[bytes] = field(default_factory=list)
    eof: bool = False               # the body was read to its end
    closed_by_app: bool = False     # the application closed the response first
    error: str | None = None        # transport failure, as "ExcType: message"
    call: Any = None                # the application's context.CallContext, if any
    event_id: str | None = None     # fixed when the call begins, so its span can name it
    # The span the call ran in (evidence_client.otel), as OpenTelemetry's raw ids: 16 and 8
    # bytes, None when no recording span covered the call. Not in the CaptureEvent yet: the
    # record contract's trace context is a minor version of its own (see build_event).
    trace_id: bytes | None = None
    span_id: bytes | None = None

    @property
    def streamed(self) -> bool:
        return (self.content_type or "").split(";")[0].strip().lower() == "text/event-stream"


def decode_body(raw: bytes, content_encoding: str | None) -> bytes:
    """Undo gzip/deflate content coding, so the record holds the body the application read.

    Raises ``ValueError`` for a coding it cannot undo (the caller keeps the raw bytes).
    """
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    data = raw
    for coding in reversed(codings):  # applied in listed order, so undone in reverse
        if coding == "identity":
            continue
        if coding in ("gzip", "x-gzip"):
            data = gzip.decompress(data)
        elif coding == "deflate":
            try:
                data = zlib.decompress(data)
            except zlib.error:
                data = zlib.decompress(data, -zlib.MAX_WBITS)
        else:
            raise ValueError(f"content coding {coding!r} is not supported")
    return data


def _body(ex: Exchange) -> bytes:
    raw = b"".join(ex.chunks)
    if not ex.content_encoding:
        return raw
    try:
        return decode_body(raw, ex.content_encoding)
    except (ValueError, OSError, EOFError, zlib.error):
        return raw  # a truncated or unknown coding: keep what came off the wire


def _complete(ex: Exchange, kind: str | None, body: bytes) -> bool:
    if ex.eof:
        return True
    if ex.content_length is not None and sum(map(len, ex.chunks)) >= ex.content_length:
        return True
    return ex.streamed and adapters.stream_complete(kind, body)


def _call_context(call: Any, keep: bool, d: Any) -> dict[str, Any]:
    """The record's fields from the application's :class:`~.context.CallContext`: digests
    always, the bytes only when the request policy keeps values."""
    if call is None:
        return {"input_digest": None, "input_bytes": None, "prompt_digest": None,
                "prompt_bytes": None, "retrieval": []}
    return {
        "input_digest": d.input_digest(call.input) if call.input is not None else None,
        "input_bytes": call.input if keep else None,
        "prompt_digest": d.prompt_digest(call.prompt) if call.prompt is not None else None,
        "prompt_bytes": call.prompt if keep else None,
        "retrieval": [{"doc_id": c.doc_id, "doc_version": c.doc_version,
                       "chunk_digest": d.chunk_digest(c.data),
                       "chunk_bytes": c.data if keep else None} for c in call.retrieval],
    }


def outcome(ex: Exchange, kind: str | None) -> tuple[str, bytes | None, bytes | None, bool]:
    """What became of the finished call ``ex`` of wire format ``kind``: (outcome, response
    bytes, error bytes, closed early), as the record states them."""
    if ex.status is None:
        no_response = ex.error or "no response"
        return "UNKNOWN", None, no_response.encode("utf-8", errors="replace"), False
    body = _body(ex)
    if ex.status >= 400:
        return "FAILED", None, body, False
    if ex.error is not None:
        cut = f"response body cut after {len(body)} bytes: {ex.error}"
        return "UNKNOWN", body, cut.encode("utf-8", errors="replace"), False
    if ex.closed_by_app and not _complete(ex, kind, body):
        early = f"closed early by the application after {len(body)} bytes"
        return "UNKNOWN", body, early.encode(), True
    return "COMMITTED", body, None, False


def trace_context(ex: Exchange) -> dict[str, bytes] | None:
    """The capture's ``trace`` (contract 2.2): the span the call ran in (the application's
    GenAI span it joined, or the one the client started), so a trace finds its record and
    the record its trace; None when no span recorded the call."""
    if ex.trace_id is None or ex.span_id is None:
        return None
    return {"trace_id": ex.trace_id, "span_id": ex.span_id}


def build_event(ex: Exchange, event_id: str, library: str, host: str | None,
                digests: Any = None) -> dict[str, Any]:
    """Return the CaptureEvent dict for ``ex``; ``ex`` must be finished (``finished_at`` set).

    ``digests``: the digest functions (module docstring); ``ex.content_key`` is the plain
    one, computed before the call, and is replaced by ``digests.content_key`` when given.
    """
    d = plain_digests if digests is None else digests
    route = adapters.detect(ex.host, ex.path, ex.request_headers, ex.query)
    req = adapters.parse_request(route.kind, ex.request_bytes)
    result, response_bytes, error_bytes, closed_early = outcome(ex, route.kind)
    facts = adapters.ResponseFacts()
    out_digest = None
    if response_bytes is not None:
        facts = adapters.parse_response(route.kind, response_bytes, ex.streamed)
    if result == "COMMITTED" and facts.output_text is not None:
        out_digest = d.output_digest(facts.output_text)
    finished = ex.finished_at if ex.finished_at is not None else ex.started_at
    return {
        "schema_version": SCHEMA_VERSION,
        "event_id": event_id,
        "stream": ex.stream,
        "captured_at": finished,
        "content_key": ex.content_key if digests is None else d.content_key(ex.request_bytes),
        "request_bytes": ex.request_bytes if ex.request_policy == VALUE else None,
        "request_length": len(ex.request_bytes),
        **_call_context(ex.call, keep=ex.request_policy == VALUE, d=d),
        "provider": {"name": route.provider, "endpoint": ex.url, "api_version": route.api_version},
        "model_id": req.model_id,
        "params": req.params,
        "fingerprint": facts.fingerprint,
        "response_model": facts.response_model,
        "http_status": ex.status,
        "response_content_type": ex.content_type,
        "response_bytes": response_bytes,
        "response_length": len(response_bytes) if response_bytes is not None else None,
        "response_digest": d.response_digest(response_bytes) if response_bytes is not None else None,
        "output_digest": out_digest,
        "error_bytes": error_bytes,
        "outcome": result,
        "replay": {
            "seed": req.seed,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "deterministic": req.seed is not None,
        },
        "capture": {
            "library": library,
            "host": host,
            "request_policy": ex.request_policy,
            "streamed": ex.streamed,
            "closed_early": closed_early,
            "truncated": False,  # every body is kept here; a size policy may drop them later
            "started_at": ex.started_at,
            "duration_us": ex.duration_us,
        },
        "encryption": None,  # the recorder's encrypt policy seals the capture afterwards
        "trace": trace_context(ex),
        "telemetry": None,  # contract 2.2: only a capture mapped from telemetry has one
    }
