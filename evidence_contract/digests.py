"""Domain-separated SHA-256 digests of the record contract.

Each digest is ``sha256(prefix || bytes)`` with a one-byte prefix per kind, so a digest of
one kind can never be presented as another (a response can't pass for a request, etc.):

    0x00 content_key       exact HTTP request body bytes, computed before the call
    0x01 response_digest   verbatim response body (streams: raw bytes in arrival order)
    0x02 input_digest      end-user input as received
    0x03 prompt_digest     rendered prompt bytes
    0x04 output_digest     UTF-8 of the extracted output text
    0x05 record_digest     prev_digest || be64(seq) || be64(occurred_at) || avro_binary(body)
    0x06 chunk_digest      a retrieved chunk's bytes as used in the prompt
    0x07 otlp_digest       an OTLP export request body as received, content encoding removed
    0x08 span_digest       one span's (or log record's) deterministic protobuf serialization

The last two are a capture mapped from telemetry's (record contract 2.2, ``telemetry``): such
a capture had no request bytes, and its ``content_key`` equals its ``span_digest``.

All functions return the 32 raw digest bytes (``DIGEST_SIZE``); every digest field of the
record contract holds exactly that many.
"""

from __future__ import annotations

import hashlib
import struct

__all__ = [
    "DIGEST_SIZE",
    "GENESIS",
    "chunk_digest",
    "content_key",
    "input_digest",
    "otlp_digest",
    "output_digest",
    "prompt_digest",
    "record_digest",
    "response_digest",
    "span_digest",
]

DIGEST_SIZE = 32

GENESIS = bytes(DIGEST_SIZE)
"""prev_digest of the first record of every stream: 32 zero bytes."""

_CONTENT_KEY = b"\x00"
_RESPONSE = b"\x01"
_INPUT = b"\x02"
_PROMPT = b"\x03"
_OUTPUT = b"\x04"
_RECORD = b"\x05"
_CHUNK = b"\x06"
_OTLP = b"\x07"
_SPAN = b"\x08"

# seq and occurred_at are unsigned 64-bit big-endian, so their byte order is fixed
# independently of platform and of Avro's zig-zag varints.
_BE64_PAIR = struct.Struct(">QQ")

_BytesLike = bytes | bytearray | memoryview


def _require_bytes(name: str, value: object) -> None:
    # bool/str/int would all hash "something"; refusing them keeps digests unambiguous.
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name} must be bytes, bytearray or memoryview, not {type(value).__name__}")


def _digest(prefix: bytes, data: _BytesLike) -> bytes:
    h = hashlib.sha256(prefix)
    h.update(data)
    return h.digest()


def content_key(request: _BytesLike) -> bytes:
    """Return sha256(0x00 || request): the identity of the exact request body bytes."""
    _require_bytes("request", request)
    return _digest(_CONTENT_KEY, request)


def response_digest(response: _BytesLike) -> bytes:
    """Return sha256(0x01 || response) over the verbatim response body."""
    _require_bytes("response", response)
    return _digest(_RESPONSE, response)


def input_digest(data: _BytesLike) -> bytes:
    """Return sha256(0x02 || data) over the end-user input as received."""
    _require_bytes("data", data)
    return _digest(_INPUT, data)


def prompt_digest(data: _BytesLike) -> bytes:
    """Return sha256(0x03 || data) over the rendered prompt bytes."""
    _require_bytes("data", data)
    return _digest(_PROMPT, data)


def chunk_digest(data: _BytesLike) -> bytes:
    """Return sha256(0x06 || data) over a retrieved chunk's bytes as used in the prompt."""
    _require_bytes("data", data)
    return _digest(_CHUNK, data)


def otlp_digest(body: _BytesLike) -> bytes:
    """Return sha256(0x07 || body) over an OTLP export request body as received, after its
    content encoding (e.g. gzip) was removed: what a mapped capture's item came in."""
    _require_bytes("body", body)
    return _digest(_OTLP, body)


def span_digest(item: _BytesLike) -> bytes:
    """Return sha256(0x08 || item) over one span's own bytes, the deterministic protobuf
    serialization of its Span message (of its LogRecord message for a log event)."""
    _require_bytes("item", item)
    return _digest(_SPAN, item)


def output_digest(text: str) -> bytes:
    """Return sha256(0x04 || text.encode("utf-8")) over the extracted output text."""
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    # "strict" so a lone surrogate fails here rather than hashing a replacement character.
    return _digest(_OUTPUT, text.encode("utf-8"))


def record_digest(prev: _BytesLike, seq: int, occurred_at_micros: int, body: _BytesLike) -> bytes:
    """Return the chain link sha256(0x05 || prev || be64(seq) || be64(occurred_at) || body).

    ``prev`` is the previous record's digest (``GENESIS`` for seq 1), ``body`` the Avro
    binary of the CaptureEvent body without single-object framing.
    """
    _require_bytes("prev", prev)
    _require_bytes("body", body)
    if len(prev) != DIGEST_SIZE:
        raise ValueError(f"prev must be {DIGEST_SIZE} bytes, got {len(prev)}")
    for name, value in (("seq", seq), ("occurred_at_micros", occurred_at_micros)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be int, not {type(value).__name__}")
        if not 0 <= value < 1 << 64:
            raise ValueError(f"{name} must fit in an unsigned 64-bit integer, got {value}")
    h = hashlib.sha256(_RECORD)
    h.update(prev)
    h.update(_BE64_PAIR.pack(seq, occurred_at_micros))
    h.update(body)
    return h.digest()
