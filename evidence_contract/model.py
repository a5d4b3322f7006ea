"""Record model helpers shared by the gateway and the writer: identities, seeds, times, sealing.

Pure functions: no I/O; the only clock reads are ``now_micros`` and ``new_event_id`` (which
also reads ``os.urandom``).
"""

from __future__ import annotations

import os
import re
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from .codec import body_bytes
from .digests import DIGEST_SIZE, record_digest

__all__ = [
    "EVENT_ID_RE",
    "MAX_SEED_DIGITS",
    "SCHEMA_VERSION",
    "SEED_RE",
    "SPAN_ID_SIZE",
    "STREAM_ID_RE",
    "SUPPORTED_SCHEMA_VERSIONS",
    "TELEMETRY_DIALECTS",
    "TRACE_ID_SIZE",
    "TRUNCATED_ERROR_BYTES",
    "iso_micros",
    "new_event_id",
    "now_micros",
    "seal",
    "seed_text",
    "valid_event_id",
    "valid_seed",
    "valid_stream_id",
]

SCHEMA_VERSION = "2.2"
"""The ``schema_version`` this package writes: 2.2 added ``trace`` and ``telemetry``, 2.1
``encryption`` (each with an Avro default, so a 2.0 or 2.1 producer's captures are still
sealed, as records of their own version)."""

SUPPORTED_SCHEMA_VERSIONS = frozenset({"2.0", "2.1", "2.2"})
"""Every ``schema_version`` this package can read and seal. A 1.0 capture never gets as far
as its version: its schema fingerprint is not one of ours (``UNKNOWN_FINGERPRINT``). Only a
2.1 or later capture may be encrypted, only a 2.2 one carry a trace or be mapped from
telemetry."""

TRACE_ID_SIZE = 16
"""Bytes of ``trace.trace_id`` (W3C trace context; never all zero)."""

SPAN_ID_SIZE = 8
"""Bytes of ``trace.span_id`` (W3C trace context; never all zero)."""

TELEMETRY_DIALECTS = ("gen_ai", "gen_ai_1_36", "openllmetry", "openinference", "logfire", "bijotel")
"""The values of ``telemetry.dialect``: the instrumentation conventions a mapped capture came
from (the GenAI semantic conventions, latest and up to v1.36; OpenLLMetry; OpenInference;
Logfire; BIJOTEL)."""

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


_RANDOM_BLOCK = 4096
"""Bytes of ``os.urandom`` read at once for event ids: 512 ids a system call, not one."""


class _EventIds:
    """The state behind :func:`new_event_id`: the last 60-bit time tick handed out, and
    unused random bytes. One lock keeps two threads from sharing a tick or random bytes; a
    forked child starts afresh (else it would hand out its parent's next random bytes)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last_tick = 0
        self.random = b""
        self.at = 0


_ids = _EventIds()


def _fresh_ids_in_child() -> None:
    global _ids
    _ids = _EventIds()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_ids_in_child)


def new_event_id() -> str:
    """Return a fresh UUIDv7 in canonical lowercase text (time-ordered, RFC 9562 §5.7).

    ``unix_ts_ms`` is the wall clock's millisecond; ``rand_a`` (12 bits) the fraction of that
    millisecond, in 1/4096ths (RFC 9562 §6.2, method 3), so ids of one process sort in the
    order they were made: a tick already handed out is followed by the next one (4,096 ids a
    millisecond before the time field runs ahead of the clock). ``rand_b`` is 62 bits from
    ``os.urandom``, read in blocks.
    """
    ns = time.time_ns()
    ms, rest = divmod(ns, 1_000_000)
    tick = (ms << 12) | (rest * 4096 // 1_000_000)
    ids = _ids
    with ids.lock:
        if tick <= ids.last_tick:
            tick = ids.last_tick + 1
        ids.last_tick = tick
        if ids.at + 8 > len(ids.random):
            ids.random, ids.at = os.urandom(_RANDOM_BLOCK), 0
        rand = int.from_bytes(ids.random[ids.at:ids.at + 8], "big")
        ids.at += 8
    v = (((tick >> 12) & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | (tick & 0xFFF) << 64
         | 0b10 << 62 | rand & ((1 << 62) - 1))
    h = f"{v:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def now_micros() -> int:
    """Return the current UTC time in microseconds since the Unix epoch."""
    return time.time_ns() // 1000


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def iso_micros(micros: int) -> str:
    """UTC ``micros`` since the Unix epoch as people read a time: ISO 8601 to the second,
    ``2026-12-03T03:20:00Z``. Fields for machines keep the integer; messages use this."""
    try:
        return (_EPOCH + timedelta(microseconds=micros)).strftime("%Y-%m-%dT%H:%M:%SZ")
    except OverflowError:  # past the year 9999: no calendar date to give
        return f"{micros} µs since the epoch"


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
