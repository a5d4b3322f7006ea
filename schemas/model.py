"""Record model helpers shared by the gateway and the writer: identities, seeds, times, sealing.

Pure functions: no I/O, and the only clock read is ``now_micros``.
"""

from __future__ import annotations

import re
import time
from typing import Any

import uuid6

from .codec import body_bytes
from .digests import DIGEST_SIZE, record_digest

__all__ = [
    "EVENT_ID_RE",
    "MAX_SEED_DIGITS",
    "SCHEMA_VERSION",
    "SEED_RE",
    "STREAM_ID_RE",
    "SUPPORTED_SCHEMA_VERSIONS",
    "TRUNCATED_ERROR_BYTES",
    "new_event_id",
    "now_micros",
    "seal",
    "seed_text",
    "valid_event_id",
    "valid_seed",
    "valid_stream_id",
]

SCHEMA_VERSION = "2.1"
"""The ``schema_version`` this package writes: 2.1 added ``encryption`` (with an Avro default,
so a 2.0 producer's captures are still sealed, as 2.0 records)."""

SUPPORTED_SCHEMA_VERSIONS = frozenset({"2.0", "2.1"})
"""Every ``schema_version`` this package can read and seal. A 1.0 capture never gets as far
as its version: its schema fingerprint is not one of ours (``UNKNOWN_FINGERPRINT``). Only a
2.1 capture may be encrypted."""

STREAM_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
"""A stream id: 1 to 128 of ASCII letters, digits, ``.``, ``_``, ``:`` and ``-``."""

EVENT_ID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
"""Canonical lowercase text of a UUIDv7 (RFC 9562): version 7, variant 10."""


TRUNCATED_ERROR_BYTES = 64 * 1024
"""A capture with ``capture.truncated`` keeps at most this many bytes of ``error_bytes`` (its
first ones); every other body it would carry is null."""

MAX_SEED_DIGITS = 4300
"""Most digits a seed may have: Python's default limit for int <-> decimal text
(``sys.int_info.default_max_str_digits``), so every Python reader can turn it into an int."""

SEED_RE = re.compile(r"-?(?:0|[1-9][0-9]{0,%d})" % (MAX_SEED_DIGITS - 1))
"""``replay.seed``: an integer as decimal text, an optional minus sign, no leading zeros."""


def new_event_id() -> str:
    """Return a fresh UUIDv7 in canonical lowercase text (time-ordered, RFC 9562)."""
    return str(uuid6.uuid7())


def now_micros() -> int:
    """Return the current UTC time in microseconds since the Unix epoch."""
    return time.time_ns() // 1000


def valid_stream_id(s: object) -> bool:
    """Return True if ``s`` is a str matching ``STREAM_ID_RE`` in full."""
    # fullmatch, not match: "$" would also accept a trailing newline.
    return isinstance(s, str) and STREAM_ID_RE.fullmatch(s) is not None


def valid_event_id(s: object) -> bool:
    """Return True if ``s`` is a UUIDv7 in canonical lowercase text."""
    return isinstance(s, str) and EVENT_ID_RE.fullmatch(s) is not None


def valid_seed(s: object) -> bool:
    """Return True if ``s`` is a str matching ``SEED_RE`` in full."""
    return isinstance(s, str) and SEED_RE.fullmatch(s) is not None


def seed_text(value: object) -> str | None:
    """Return an integer seed as ``replay.seed`` holds it (decimal text), or None.

    A JSON ``true`` is not a seed (``bool`` is an ``int`` in Python), nor is ``1.0``; an
    integer of any size is, up to ``MAX_SEED_DIGITS`` digits, and is never clipped to 64 bits.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    try:
        text = str(int(value))
    except ValueError:  # more digits than Python's int/str limit allows
        return None
    return text if valid_seed(text) else None


def seal(
    body: dict[str, Any],
    head_seq: int,
    head_digest: bytes,
    occurred_at_micros: int,
    writer: dict[str, str],
    intake_partition: int,
    intake_offset: int,
) -> dict[str, Any]:
    """Return the EvidenceRecord dict that appends ``body`` after the stream head.

    ``head_seq`` / ``head_digest`` describe the stream's last sealed record (0 and
    ``GENESIS`` for an empty stream). The record gets ``seq = head_seq + 1``,
    ``prev_digest = head_digest`` and a ``record_digest`` over ``body_bytes(body)``.
    Raises ``EncodeError`` if ``body`` is not a valid CaptureEvent.
    """
    if not isinstance(head_seq, int) or isinstance(head_seq, bool) or head_seq < 0:
        raise ValueError(f"head_seq must be a non-negative int, got {head_seq!r}")
    if not isinstance(head_digest, (bytes, bytearray)) or len(head_digest) != DIGEST_SIZE:
        raise ValueError(f"head_digest must be {DIGEST_SIZE} bytes")
    seq = head_seq + 1
    prev = bytes(head_digest)
    return {
        "body": body,
        "seal": {
            "seq": seq,
            "occurred_at": occurred_at_micros,
            "prev_digest": prev,
            "record_digest": record_digest(prev, seq, occurred_at_micros, body_bytes(body)),
            "writer": dict(writer),
            "intake_partition": intake_partition,
            "intake_offset": intake_offset,
        },
    }
