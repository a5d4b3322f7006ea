"""What produce.py and verify.py share: schema loading, single-object framing, digests, UUIDv7.

Only the official Apache Avro package (``avro`` on PyPI) and the standard library are used.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
import time
import uuid

import avro.io
import avro.schema

MARKER = b"\xc3\x01"
"""Avro single-object encoding: two marker bytes, then the 8-byte fingerprint, then the body."""
HEADER_SIZE = len(MARKER) + 8

GENESIS = bytes(32)
"""prev_digest of the first record of every stream."""

# One-byte domain prefixes of the record contract's SHA-256 digests.
CONTENT_KEY, RESPONSE, INPUT, PROMPT, OUTPUT, RECORD, CHUNK = (bytes([i]) for i in range(7))

LIBRARY = f"avro (Python) {avro.__version__}"


def load_schema(path: str) -> avro.schema.Schema:
    """Parse one self-contained .avsc file."""
    with open(path, encoding="utf-8") as f:
        return avro.schema.parse(f.read())


def fingerprint(schema: avro.schema.Schema) -> bytes:
    """CRC-64-AVRO of the Parsing Canonical Form, as the 8 little-endian bytes of the header."""
    fp = schema.fingerprint("CRC-64-AVRO")  # avro >= 1.11 returns the little-endian bytes
    assert len(fp) == 8
    return fp


def avro_binary(schema: avro.schema.Schema, datum: object) -> bytes:
    """Plain Avro binary encoding of ``datum`` (no framing)."""
    buf = io.BytesIO()
    avro.io.DatumWriter(schema).write(datum, avro.io.BinaryEncoder(buf))
    return buf.getvalue()


def encode_single_object(schema: avro.schema.Schema, datum: object) -> bytes:
    return MARKER + fingerprint(schema) + avro_binary(schema, datum)


def decode_single_object(schema: avro.schema.Schema, data: bytes) -> object:
    """Decode a single-object message written with ``schema``; raise ValueError otherwise."""
    if data[:2] != MARKER:
        raise ValueError("not Avro single-object encoding (no C3 01 marker)")
    if data[2:HEADER_SIZE] != fingerprint(schema):
        raise ValueError(f"unknown schema fingerprint {data[2:HEADER_SIZE].hex()}")
    buf = io.BytesIO(data[HEADER_SIZE:])
    datum = avro.io.DatumReader(schema, schema).read(avro.io.BinaryDecoder(buf))
    if buf.tell() != len(data) - HEADER_SIZE:
        raise ValueError(f"{len(data) - HEADER_SIZE - buf.tell()} trailing bytes after the record")
    return datum


def digest(prefix: bytes, data: bytes) -> bytes:
    """sha256(prefix || data): the contract's domain-separated digest."""
    return hashlib.sha256(prefix + data).digest()


def record_digest(prev: bytes, seq: int, occurred_at: int, body_avro: bytes) -> bytes:
    """sha256(0x05 || prev_digest || be64(seq) || be64(occurred_at) || avro_binary(body))."""
    return hashlib.sha256(RECORD + prev + struct.pack(">QQ", seq, occurred_at) + body_avro).digest()


def uuid7() -> str:
    """A UUIDv7 (RFC 9562) in canonical lowercase text: 48-bit Unix ms, version 7, variant 10."""
    raw = bytearray((time.time_ns() // 1_000_000).to_bytes(6, "big") + os.urandom(10))
    raw[6] = 0x70 | (raw[6] & 0x0F)
    raw[8] = 0x80 | (raw[8] & 0x3F)
    return str(uuid.UUID(bytes=bytes(raw)))


def now_micros() -> int:
    return time.time_ns() // 1000
