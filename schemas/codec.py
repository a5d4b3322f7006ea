"""Avro single-object encoding of the record contract.

A message is ``0xC3 0x01``, the 8-byte little-endian CRC-64-AVRO fingerprint of the writer
schema's Parsing Canonical Form, then the Avro binary body. The fingerprint names the schema,
so any reader holding ``schemas/`` decodes a message without a registry.

Errors: a record that does not fit its schema raises ``EncodeError``; bytes that are not a
whole message of a known schema raise ``DecodeError``. Both wrap fastavro's error with
``from e``; this module is the one place that translates them.
"""

from __future__ import annotations

import io
from typing import Any

import fastavro
from fastavro.validation import validate

from ._avro import BY_FINGERPRINT, SCHEMA_NAMES, SCHEMAS, _Loaded
from .errors import DecodeError, EncodeError

__all__ = [
    "MARKER",
    "SCHEMA_NAMES",
    "body_bytes",
    "decode",
    "encode",
    "fingerprint",
    "parsing_canonical_form",
    "split_record",
]

MARKER = b"\xc3\x01"
"""The two bytes every single-object-encoded message starts with."""

_HEADER_SIZE = len(MARKER) + 8


def _schema(schema_name: str) -> _Loaded:
    try:
        return SCHEMAS[schema_name]
    except KeyError:
        raise ValueError(f"unknown schema {schema_name!r}; expected one of {SCHEMA_NAMES}") from None


def fingerprint(schema_name: str) -> bytes:
    """Return the 8-byte single-object header fingerprint (CRC-64-AVRO, little-endian)."""
    return _schema(schema_name).fingerprint


def parsing_canonical_form(schema_name: str) -> str:
    """Return the schema's Parsing Canonical Form, the text its fingerprint covers."""
    return _schema(schema_name).canonical


def _avro_binary(schema: _Loaded, record: dict[str, Any]) -> bytes:
    if not isinstance(record, dict):
        raise EncodeError(f"{schema.name} record must be a dict, not {type(record).__name__}")
    try:
        # validate() catches what the writer would silently accept: wrong-size fixed, ints
        # out of range, bool for int. strict=True catches missing and unknown fields, so a
        # nullable field must be given explicitly rather than defaulted.
        validate(record, schema.parsed, raise_errors=True)
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema.parsed, record, strict=True)
    except Exception as e:  # fastavro raises ValidationError, ValueError, TypeError, ...
        raise EncodeError(f"{schema.name} record does not match its schema: {e}") from e
    return out.getvalue()


def encode(schema_name: str, record: dict[str, Any]) -> bytes:
    """Return the single-object encoding of ``record`` under schema ``schema_name``."""
    schema = _schema(schema_name)
    return MARKER + schema.fingerprint + _avro_binary(schema, record)


def body_bytes(body: dict[str, Any]) -> bytes:
    """Return the Avro binary of a CaptureEvent dict, no framing: what record_digest covers."""
    return _avro_binary(SCHEMAS["CaptureEvent"], body)


def _as_bytes(data: object) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"data must be bytes, bytearray or memoryview, not {type(data).__name__}")


def _header(data: bytes) -> _Loaded:
    if len(data) < _HEADER_SIZE:
        raise DecodeError(f"message too short for a single-object header: {len(data)} bytes")
    if data[:2] != MARKER:
        raise DecodeError(f"not a single-object encoding: marker {data[:2].hex()} != c301")
    fp = data[2:_HEADER_SIZE]
    try:
        return BY_FINGERPRINT[fp]
    except KeyError:
        raise DecodeError(f"unknown schema fingerprint {fp.hex()}") from None


def _read(schema: _Loaded, fo: io.BytesIO) -> dict[str, Any]:
    try:
        return fastavro.schemaless_reader(fo, schema.parsed, None)
    except Exception as e:
        # Garbage can make fastavro raise almost anything (EOFError, UnicodeDecodeError,
        # IndexError for a bad union/enum index, ...); all of it means "not a valid body".
        raise DecodeError(f"malformed {schema.name} body: {type(e).__name__}: {e}") from e


def decode(data: bytes) -> tuple[str, dict[str, Any]]:
    """Return ``(schema_name, record)`` for a single-object-encoded message.

    Raises ``DecodeError`` unless ``data`` is exactly one whole message of a known schema.
    """
    data = _as_bytes(data)
    schema = _header(data)
    fo = io.BytesIO(data)
    fo.seek(_HEADER_SIZE)
    record = _read(schema, fo)
    # Avro binary is not self-delimiting; without this check appended bytes would go unseen.
    if fo.tell() != len(data):
        raise DecodeError(f"{len(data) - fo.tell()} trailing bytes after the {schema.name} body")
    return schema.name, record


def split_record(data: bytes) -> tuple[bytes, dict[str, Any]]:
    """Return ``(stored_body_bytes, record)`` for an encoded EvidenceRecord.

    ``stored_body_bytes`` is the Avro binary of the body exactly as it is stored: ``body`` is
    the first field, so it is a byte prefix of the record's Avro binary. Verifiers recompute
    ``record_digest`` over these bytes rather than over a re-encoding, so a body whose stored
    bytes differ from ``body_bytes(record["body"])`` can be detected, not masked.
    """
    data = _as_bytes(data)
    name, record = decode(data)
    if name != "EvidenceRecord":
        raise DecodeError(f"expected an EvidenceRecord, got a {name}")
    fo = io.BytesIO(data)
    fo.seek(_HEADER_SIZE)
    _read(SCHEMAS["CaptureEvent"], fo)
    return data[_HEADER_SIZE : fo.tell()], record
