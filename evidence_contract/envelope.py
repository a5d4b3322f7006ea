"""The sealed-content format of record contract 2.1: envelopes, associated data, commitments.

Pure and stdlib only (no ``cryptography``): the writer checks an encrypted capture's shape
with this module alone; sealing and opening, which need the AEAD, are in
``evidence_contract.sealing`` (the ``[encrypt]`` extra).

An encrypted capture (``encryption`` not null, scheme :data:`SCHEME`) carries every content
field as an *envelope* under its subject's data key::

    envelope = version (1 byte, 0x01) || key_id (16) || nonce (12) || ciphertext || tag (16)

AES-256-GCM, so ``len(ciphertext) == len(plaintext)`` and an envelope is exactly
:data:`OVERHEAD` (45) bytes longer than what it seals. The content fields (:data:`SEALED_BYTES`,
``retrieval[i].chunk_bytes`` and ``params``) are sealed whenever they are not null; ``params``
is Avro ``string``, so it holds the standard base64 (RFC 4648, padded) of its envelope.

The AEAD's associated data binds an envelope to its place (:func:`associated_data`): the
envelope header, the stream, the event id and the field name (``retrieval[2].chunk_bytes``
with its index). A ciphertext moved to another field, record or stream does not open.

Keys (RFC 5869 HKDF-SHA-256 from the subject's 32-byte data key, empty salt):

    aead key        info ``evidence-store/v2 aead key``          AES-256-GCM
    commitment key  info ``evidence-store/v2 commitment key``    HMAC-SHA-256

For encrypted captures, ``content_key``, ``response_digest``, ``input_digest``,
``prompt_digest``, ``output_digest`` and every ``chunk_digest`` are *keyed commitments*
``HMAC-SHA-256(commitment key, prefix || bytes)``, one prefix per kind
(:data:`COMMITMENT_PREFIXES`, 0x10-0x16). They are disjoint from the plain digests'
0x00-0x06, from RFC 6962's leaf and node prefixes (0x00, 0x01) and from the Merkle leaf label
(``evidence-store/v2 record\\n`` starts with 0x65), and being keyed they cannot be computed at
all without the data key: once it is destroyed, nobody can confirm a guessed plaintext
against a stored commitment. ``record_digest``, the chain and the Merkle leaves stay plain
SHA-256 over the sealed bytes (the ciphertext), so every proof still verifies after erasure.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from typing import Any

__all__ = [
    "AEAD_INFO",
    "COMMITMENT_INFO",
    "COMMITMENT_PREFIXES",
    "HEADER_SIZE",
    "KEY_ID_RE",
    "KEY_ID_SIZE",
    "NONCE_SIZE",
    "OVERHEAD",
    "SCHEME",
    "SEALED_BYTES",
    "TAG_SIZE",
    "VERSION",
    "associated_data",
    "chunk_field",
    "compose",
    "encrypted_body_problem",
    "params_envelope",
    "params_text",
    "parse",
    "valid_key_id",
]

SCHEME = "aes256gcm-hmacsha256/v1"
"""``encryption.scheme`` of this format."""

VERSION = 0x01
"""The envelope's first byte."""

KEY_ID_SIZE = 16
NONCE_SIZE = 12
TAG_SIZE = 16
HEADER_SIZE = 1 + KEY_ID_SIZE + NONCE_SIZE
OVERHEAD = HEADER_SIZE + TAG_SIZE
"""How many bytes longer an envelope is than its plaintext (45)."""

KEY_ID_RE = re.compile(r"[0-9a-f]{32}")
"""``encryption.key_id``: the 16 key id bytes as 32 lowercase hex digits."""

AEAD_INFO = b"evidence-store/v2 aead key"
COMMITMENT_INFO = b"evidence-store/v2 commitment key"

COMMITMENT_PREFIXES = {
    "content_key": b"\x10",
    "response_digest": b"\x11",
    "input_digest": b"\x12",
    "prompt_digest": b"\x13",
    "output_digest": b"\x14",
    "chunk_digest": b"\x16",
}
"""The one-byte prefix of each keyed commitment: 0x10 + the plain digest's prefix."""

SEALED_BYTES = ("request_bytes", "input_bytes", "prompt_bytes", "response_bytes", "error_bytes")
"""Top-level bytes fields sealed in an encrypted capture (besides chunks and ``params``)."""

_AAD_LABEL = b"evidence-store/v2 envelope\n"
_U16 = struct.Struct(">H")


def valid_key_id(s: object) -> bool:
    """Return True if ``s`` is a key id as ``encryption.key_id`` holds it."""
    return isinstance(s, str) and KEY_ID_RE.fullmatch(s) is not None


def chunk_field(index: int) -> str:
    """The field name the associated data of chunk ``index`` binds."""
    return f"retrieval[{index}].chunk_bytes"


def compose(key_id: bytes, nonce: bytes, sealed: bytes) -> bytes:
    """Return the envelope of AES-GCM output ``sealed`` (ciphertext || tag)."""
    if len(key_id) != KEY_ID_SIZE or len(nonce) != NONCE_SIZE or len(sealed) < TAG_SIZE:
        raise ValueError("an envelope needs a 16-byte key id, a 12-byte nonce and a 16-byte tag")
    return bytes([VERSION]) + bytes(key_id) + bytes(nonce) + bytes(sealed)


def parse(envelope: bytes) -> tuple[bytes, bytes, bytes]:
    """Return ``(key_id, nonce, ciphertext || tag)``; ``ValueError`` if not an envelope."""
    if not isinstance(envelope, (bytes, bytearray, memoryview)):
        raise ValueError(f"an envelope is bytes, not {type(envelope).__name__}")
    env = bytes(envelope)
    if len(env) < OVERHEAD:
        raise ValueError(f"{len(env)} bytes are too short for an envelope ({OVERHEAD} at least)")
    if env[0] != VERSION:
        raise ValueError(f"envelope version {env[0]:#04x} is not {VERSION:#04x}")
    return env[1:1 + KEY_ID_SIZE], env[1 + KEY_ID_SIZE:HEADER_SIZE], env[HEADER_SIZE:]


def associated_data(envelope_header: bytes, stream: str, event_id: str, field: str) -> bytes:
    """The AEAD associated data: label, envelope header (version, key id, nonce), then the
    stream, event id and field name, each as a 2-byte big-endian length and its UTF-8."""
    out = [_AAD_LABEL, bytes(envelope_header)]
    for part in (stream, event_id, field):
        b = part.encode("utf-8")
        out.append(_U16.pack(len(b)))
        out.append(b)
    return b"".join(out)


def params_text(envelope: bytes) -> str:
    """``params`` of an encrypted capture: the standard base64 of its envelope."""
    return base64.b64encode(envelope).decode("ascii")


def params_envelope(text: str) -> bytes:
    """The envelope in an encrypted capture's ``params``; ``ValueError`` if it holds none."""
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as e:
        raise ValueError(f"params is not base64: {e}") from None


def _sealed_fields(body: dict[str, Any]) -> list[tuple[str, bytes | None]]:
    fields: list[tuple[str, Any]] = [(name, body[name]) for name in SEALED_BYTES]
    fields += [(chunk_field(i), c["chunk_bytes"]) for i, c in enumerate(body["retrieval"])]
    return fields


def encrypted_body_problem(body: dict[str, Any]) -> str:
    """What is wrong with an encrypted CaptureEvent's shape, or "" (the writer's check).

    Without the data key nobody can open an envelope or recompute a keyed commitment, so
    this checks what can be checked: the scheme, the key id, that each non-null content
    field is an envelope of that key id, and that ``request_length`` / ``response_length``
    are the lengths of the plaintexts (the envelope less :data:`OVERHEAD`). The commitments'
    sizes (32 bytes) are checked with every digest field (``wrong_size_digest``).
    """
    enc = body["encryption"]
    if enc["scheme"] != SCHEME:
        return f"encryption.scheme {enc['scheme'][:60]!r} is not {SCHEME!r}"
    if not valid_key_id(enc["key_id"]):
        return f"encryption.key_id {enc['key_id'][:60]!r} is not 32 lowercase hex digits"
    key_id = bytes.fromhex(enc["key_id"])
    fields = _sealed_fields(body)
    if body["params"] is not None:
        try:
            fields.append(("params", params_envelope(body["params"])))
        except ValueError as e:
            return f"params of an encrypted capture must be the base64 of an envelope: {e}"
    for name, data in fields:
        if data is None:
            continue
        try:
            kid, _, _ = parse(data)
        except ValueError as e:
            return f"{name} is not an envelope: {e}"
        if kid != key_id:
            return f"{name} is sealed under key {kid.hex()}, not encryption.key_id"
    for name, data in (("request_length", body["request_bytes"]),
                       ("response_length", body["response_bytes"])):
        n = body[name]
        if n is not None and n < 0:
            return f"{name} is {n}, a length cannot be negative"
        if data is not None and n != len(data) - OVERHEAD:
            return (f"{name} is {n} but the sealed {name.replace('_length', '_bytes')} hold "
                    f"{len(data) - OVERHEAD} bytes")
    return ""
