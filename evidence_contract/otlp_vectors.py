"""The OTLP side of the contract 2.2 test vectors: a W3C trace context, and the span and export
request of the mapped-capture vector, written as protobuf's deterministic serialization (field
order, minimal lengths) so that implementations without protobuf can check the digests.
:mod:`evidence_contract.vectors` builds the captures from them."""

from __future__ import annotations

import hashlib

__all__ = ["INPUT_MESSAGES", "OUTPUT_HASH", "OUTPUT_TEXT", "SCOPE", "SPAN_ID", "TRACE_ID",
           "mapped_otlp_request", "mapped_span_bytes"]


# A W3C trace context (the example ids of https://www.w3.org/TR/trace-context/).
TRACE_ID = bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736")
SPAN_ID = bytes.fromhex("00f067aa0ba902b7")


def _pb_len(field: int, data: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2); lengths here are under 2^14."""
    n, out = len(data), bytearray([field << 3 | 2])
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + data


def _pb_fixed64(field: int, value: int) -> bytes:
    return bytes([field << 3 | 1]) + value.to_bytes(8, "little")


def _kv(key: str, text: str) -> bytes:
    """An OTLP KeyValue with a string AnyValue."""
    return _pb_len(1, key.encode()) + _pb_len(2, _pb_len(1, text.encode()))


SCOPE = ("bijotel", "2.17.0")
OUTPUT_TEXT = "Hi!"
OUTPUT_HASH = hashlib.sha256(OUTPUT_TEXT.encode()).hexdigest()  # BIJOTEL's: no prefix
INPUT_MESSAGES = b'[{"role":"user","parts":[{"type":"text","content":"Say hi"}]}]'


def mapped_span_bytes(t0: int) -> bytes:
    """The Span of the mapped-capture vector, as its deterministic protobuf serialization:
    trace_id (1), span_id (2), name (5), kind CLIENT (6), start and end times (7, 8, fixed64
    nanoseconds; ``t0`` + 4 s to ``t0`` + 4.6 s, ``t0`` in microseconds) and attributes (9) in
    field order, the way protobuf writes a message."""
    attributes = (("gen_ai.operation.name", "chat"), ("gen_ai.provider.name", "openai"),
                  ("gen_ai.request.model", "gpt-4o-mini"),
                  ("gen_ai.input.messages", INPUT_MESSAGES.decode()),
                  ("gen_ai.output.messages",
                   '[{"role":"assistant","parts":[{"type":"text","content":"Hi!"}],'
                   '"finish_reason":"stop"}]'),
                  ("evidence.event_id", "017f22e2-79b0-7cc3-98c4-dc0c0c07398f"),
                  ("bijotel.replay.output_hash", OUTPUT_HASH),
                  ("bijotel.replay.model_version", "gpt-4o-mini-2024-07-18"))
    return (_pb_len(1, TRACE_ID) + _pb_len(2, SPAN_ID) + _pb_len(5, b"chat gpt-4o-mini")
            + bytes([6 << 3, 3]) + _pb_fixed64(7, (t0 + 4_000_000) * 1000)
            + _pb_fixed64(8, (t0 + 4_600_000) * 1000)
            + b"".join(_pb_len(9, _kv(k, v)) for k, v in attributes))


def mapped_otlp_request(t0: int) -> bytes:
    """The ExportTraceServiceRequest the mapped span came in: one ResourceSpans (1) with one
    ScopeSpans (2) of scope (1: name, version) and the span (2)."""
    scope = _pb_len(1, SCOPE[0].encode()) + _pb_len(2, SCOPE[1].encode())
    return _pb_len(1, _pb_len(2, _pb_len(1, scope) + _pb_len(2, mapped_span_bytes(t0))))
