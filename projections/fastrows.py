"""The row path's selection: compiled (``native/rows``, module ``evidence_rows_native``) or pure.

:func:`decode` answers ``(row, copy, leaf)`` for a log message the compiled path decodes: the
``records`` row exactly as :func:`projections.rows.record_row` gives it, the row as a
PostgreSQL binary COPY tuple for ``RECORD_COLUMNS``/``RECORD_TYPES`` (the bytes psycopg's
``write_row`` writes for that row: framed by :data:`COPY_SIGNATURE` and :data:`COPY_TRAILER`),
and its Merkle leaf hash (``merkle.record_leaf_hash``). It answers None for anything else,
and always on the pure path: the caller then decodes that message with ``record_row``, which
is the reference and words every error, so the two paths never disagree on what a message is.

Which path: ``EVIDENCE_NATIVE=0`` forces the pure one; ``=1`` makes a missing or mismatched
module an error (CI with a Rust toolchain); unset, the compiled path when it is installed.
The choice is logged once, on the first message decoded.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Iterable

from evidence_contract import schema_name_for
from server.logs import event_logger
from server.settings import native_setting

from .columns import RECORD_COLUMNS

__all__ = ["COPY_SIGNATURE", "COPY_TRAILER", "IMPLEMENTATION", "decode", "decode_batch",
           "leaf_hash", "select"]

log = event_logger("evidence.projector")

COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
"""What a binary COPY starts with: the signature, no flags, no header extension."""
COPY_TRAILER = b"\xff\xff"
"""What a binary COPY ends with: a tuple of field count -1."""

Decoded = tuple[tuple[Any, ...], bytes, bytes]


def select(mode: str | None) -> ModuleType | None:
    """The compiled module for ``EVIDENCE_NATIVE=mode``, or None for the pure path.

    Raises ``ImportError`` for ``mode == "1"`` when the module is missing, decodes a schema
    this contract does not have or makes rows of other columns than ``RECORD_COLUMNS`` (a
    stale build)."""
    if mode == "0":
        return None
    try:
        import evidence_rows_native as native
    except ImportError as e:
        if mode == "1":
            raise ImportError("EVIDENCE_NATIVE=1 but evidence_rows_native is not installed "
                              "(make builds it: native/rows/build.sh)") from e
        return None
    # A fingerprint names a schema's canonical form: the module decodes these bytes only if
    # each of its fingerprints is an EvidenceRecord of ours (any other goes the pure way).
    wrong = [fp.hex() for fp in native.FINGERPRINTS if schema_name_for(fp) != "EvidenceRecord"]
    if wrong:
        if mode == "1":
            raise ImportError(f"evidence_rows_native decodes schemas this contract does not "
                              f"have ({', '.join(wrong)}): rebuild native/rows")
        return None
    # Its COPY tuples must have the columns the COPY names (a build from before a column).
    if getattr(native, "COLUMNS", None) != len(RECORD_COLUMNS):
        if mode == "1":
            raise ImportError(f"evidence_rows_native makes rows of "
                              f"{getattr(native, 'COLUMNS', None)} columns, the records table "
                              f"has {len(RECORD_COLUMNS)}: rebuild native/rows")
        return None
    return native


_native = select(native_setting())
IMPLEMENTATION = "native" if _native is not None else "pure"
"""Which row path this process takes: ``"native"`` or ``"pure"``."""


def _pure(value: Any, partition: Any, offset: Any) -> None:
    return None


def _first(value: Any, partition: Any, offset: Any) -> Decoded | None:
    global decode
    log("info", "row_path", implementation=IMPLEMENTATION,
        module=getattr(_native, "__file__", None))
    decode = _native.decode if _native is not None else _pure
    return decode(value, partition, offset)


decode = _first
"""``decode(value, partition, offset)``: ``(row, copy, leaf)`` or None (see the module)."""


def decode_batch(messages: Iterable[tuple[Any, Any, Any]]) -> list[Decoded | None]:
    """:func:`decode` of each ``(value, partition, offset)``, in one call to the module."""
    messages = list(messages)
    if _native is None:
        return [None] * len(messages)
    if decode is _first and messages:
        decode(*messages[0])  # logs the choice
    return _native.decode_batch(messages)


def leaf_hash(record_digest: bytes, record_bytes: bytes) -> bytes | None:
    """The Merkle leaf hash of a record from its ``record_digest`` and bytes (what
    ``merkle.leaf_hash(compose_leaf_input(...))`` gives), or None on the pure path or for a
    digest the pure path refuses."""
    if _native is None:
        return None
    return _native.leaf_hash(record_digest, record_bytes)
