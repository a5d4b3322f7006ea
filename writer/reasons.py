"""Why the writer rejected an intake message: the ``evidence.reason`` header values.

Pure data. The codes are stable strings (they are written into ``<prefix>.rejected``
headers and counted in metrics), listed here in the order validation checks them.
"""

from __future__ import annotations

import enum

__all__ = ["Reason"]


class Reason(str, enum.Enum):
    """Reason codes for rejected intake messages; the value is the header text."""

    OVERSIZED = "OVERSIZED"
    """The value is larger than max_message_bytes - 64 KiB, so its sealed record might not fit."""
    NOT_AVRO = "NOT_AVRO"
    """No value, or not Avro single-object encoding at all (first byte is not 0xC3)."""
    BAD_MARKER = "BAD_MARKER"
    """Starts like a single-object encoding but the marker is not C3 01."""
    TRUNCATED = "TRUNCATED"
    """The bytes end inside the header or the body."""
    UNKNOWN_FINGERPRINT = "UNKNOWN_FINGERPRINT"
    """The 8-byte fingerprint names no schema we know."""
    WRONG_SCHEMA = "WRONG_SCHEMA"
    """A known schema, but not CaptureEvent (e.g. an EvidenceRecord sent to intake)."""
    MALFORMED = "MALFORMED"
    """The body does not decode as a CaptureEvent, or has trailing bytes."""
    UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"
    """schema_version is not one this writer can seal."""
    BAD_STREAM_ID = "BAD_STREAM_ID"
    """stream does not match [A-Za-z0-9._:-]{1,128}."""
    KEY_MISMATCH = "KEY_MISMATCH"
    """The Kafka message key is missing or differs from the capture's stream."""
    WRONG_PARTITION = "WRONG_PARTITION"
    """The capture is on another intake partition than its stream's (Kafka's murmur2 keyed
    partitioner; librdkafka needs ``partitioner=murmur2_random``): sealing it there would start
    a second chain of the same stream."""
    BAD_EVENT_ID = "BAD_EVENT_ID"
    """event_id is not a UUIDv7 in canonical lowercase text."""
    BAD_DIGEST = "BAD_DIGEST"
    """A digest field is not exactly 32 bytes; the text names the field."""
    BAD_SEED = "BAD_SEED"
    """replay.seed is not an integer as decimal text, or deterministic != (seed != null)."""
    BAD_TRUNCATION = "BAD_TRUNCATION"
    """capture.truncated, yet a body is kept (or error_bytes exceed their first 64 KiB)."""
    BAD_TRACE = "BAD_TRACE"
    """``trace`` (record contract 2.2) whose trace_id is not 16 bytes or span_id not 8, or is
    all zero, or a capture with a trace whose schema_version is not 2.2."""
    BAD_TELEMETRY = "BAD_TELEMETRY"
    """A capture mapped from telemetry (``telemetry`` set, record contract 2.2) that breaks a
    rule of one: an unknown dialect, an empty scope or claim name, a ``corroborates`` that is
    no UUIDv7, no ``trace``, request bytes or a request policy other than HASH_ONLY, a
    content_key other than its span_digest, a response body, ``encryption``, or a
    schema_version other than 2.2."""
    MISSING_FIELD = "MISSING_FIELD"
    """A field the capture's own semantics require is null (e.g. COMMITTED without response)."""
    LENGTH_MISMATCH = "LENGTH_MISMATCH"
    """request_length or response_length is negative or not the length of the bytes kept."""
    DIGEST_MISMATCH = "DIGEST_MISMATCH"
    """content_key, response_digest, input_digest, prompt_digest or a chunk_digest does not
    match the bytes it covers."""
    BAD_ENCRYPTION = "BAD_ENCRYPTION"
    """An encrypted capture (``encryption`` set) whose scheme or key id is unknown or
    malformed, a content field that is not an envelope of its key, a plaintext length that
    is not its envelope's less 45 bytes, or a schema_version other than 2.1. Checked instead
    of LENGTH_MISMATCH and DIGEST_MISMATCH: its digests are keyed commitments the writer
    cannot recompute."""
