"""Keys of C2SP signed notes (https://c2sp.org/signed-note): signature types, key IDs, and
verifier and signer keys in their text forms. Pure.

::

    key ID          be32(SHA-256(name || 0x0A || type || public key)[:4])
    verifier key    <name>+<hex id>+<base64(type || public key)>
    signer key      PRIVATE+KEY+<name>+<hex id>+<base64(type || seed)>

A key's type is part of its ID, so one Ed25519 key used both as a log's key and as a
cosigner has two IDs, as the specs require. Every private key is a 32-byte seed (an ML-DSA-44
one is FIPS 204's ``ξ``, as Go's ``filippo.io/mldsa`` stores it); an ML-DSA-44 public key is
1312 bytes. A malformed key raises ``NoteError``, the error of every signed-note format
(``evidence_contract.note`` signs and verifies with these keys and re-exports them all).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from .errors import EvidenceError

__all__ = [
    "COSIGNATURE_TYPES",
    "SIG_COSIGNATURE_V1",
    "SIG_ED25519",
    "SIG_MLDSA44",
    "SIG_TYPES",
    "NoteError",
    "SignerKey",
    "VerifierKey",
    "format_skey",
    "format_vkey",
    "generate_signer",
    "key_id",
    "parse_skey",
    "parse_vkey",
    "valid_key_name",
]

SIG_ED25519 = 0x01
"""Signature type of plain Ed25519 note signatures (c2sp.org/signed-note)."""

SIG_COSIGNATURE_V1 = 0x04
"""Signature type of timestamped Ed25519 checkpoint cosignatures (c2sp.org/tlog-cosignature)."""

SIG_MLDSA44 = 0x06
"""Signature type of timestamped ML-DSA-44 (sub)tree cosignatures (c2sp.org/tlog-cosignature)."""

COSIGNATURE_TYPES = (SIG_COSIGNATURE_V1, SIG_MLDSA44)
"""The signature types of a witness's cosignature of a checkpoint."""

SIG_TYPES = (SIG_ED25519, SIG_COSIGNATURE_V1, SIG_MLDSA44)
"""Every signature type a key may have."""

_KEY_SIZE = 32  # an Ed25519 public key, and every type's seed
_PUBLIC_SIZE = {SIG_ED25519: 32, SIG_COSIGNATURE_V1: 32, SIG_MLDSA44: 1312}
_HEX_ID = re.compile(r"[0-9a-f]{8}")


class NoteError(EvidenceError):
    """A signed note, key or checkpoint is malformed, or its signatures do not verify."""


def b64decode(text: str, what: str) -> bytes:
    """The bytes of canonical standard base64 ``text``; ``NoteError`` naming ``what``."""
    # Canonical standard base64 only (padding, zero trailing bits): one text per byte string.
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise NoteError(f"{what} is not base64") from None
    if base64.b64encode(raw).decode("ascii") != text:
        raise NoteError(f"{what} is not canonical base64")
    return raw


def b64(raw: bytes) -> str:
    """Standard base64 text of ``raw``."""
    return base64.b64encode(raw).decode("ascii")


def valid_key_name(name: object) -> bool:
    """A key name: non-empty UTF-8 text without Unicode spaces, ``+`` or control characters."""
    # str.isspace is Unicode White_Space (Go's unicode.IsSpace) plus U+001C-U+001F, which
    # the control-character rule refuses anyway; a lone surrogate is no UTF-8.
    return (isinstance(name, str) and name != ""
            and not any(c.isspace() or c == "+" or c < " " or "\ud800" <= c <= "\udfff"
                        for c in name))


def key_id(name: str, sig_type: int, public_key: bytes) -> int:
    """Return the key ID: the first 4 bytes of SHA-256(name || 0x0A || type || key), big-endian."""
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([sig_type]) + public_key).digest()
    return int.from_bytes(digest[:4], "big")


@dataclass(frozen=True)
class VerifierKey:
    """A public key as a note verifier knows it: name, key ID, signature type and key bytes."""

    name: str
    key_id: int
    sig_type: int
    public_key: bytes


def mldsa():
    # cryptography >= 47 has ML-DSA; importing it only where needed keeps the Ed25519 notes
    # working with older releases.
    try:
        from cryptography.hazmat.primitives.asymmetric import mldsa
    except ImportError:
        raise NoteError("ML-DSA-44 keys need the cryptography package 47 or later") from None
    return mldsa


def mldsa_public(public_key: bytes):
    try:
        return mldsa().MLDSA44PublicKey.from_public_bytes(public_key)
    except ValueError as e:
        raise NoteError(f"not an ML-DSA-44 public key: {e}") from None


@dataclass(frozen=True)
class SignerKey:
    """A private key (its 32-byte seed: Ed25519, or ML-DSA-44's ``ξ``) under a name, for one
    signature type."""

    name: str
    sig_type: int
    seed: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not valid_key_name(self.name):
            raise NoteError(f"invalid key name {self.name!r}")
        if self.sig_type not in SIG_TYPES:
            raise NoteError(f"unsupported signature type {self.sig_type:#04x}")
        if not isinstance(self.seed, bytes) or len(self.seed) != _KEY_SIZE:
            raise NoteError(f"a private key's seed is {_KEY_SIZE} bytes")

    @cached_property
    def _private(self) -> Any:
        if self.sig_type == SIG_MLDSA44:
            return mldsa().MLDSA44PrivateKey.from_seed_bytes(self.seed)
        return Ed25519PrivateKey.from_private_bytes(self.seed)

    @cached_property
    def verifier(self) -> VerifierKey:
        """The matching public key."""
        public = self._private.public_key().public_bytes_raw()
        kid = key_id(self.name, self.sig_type, public)
        return VerifierKey(self.name, kid, self.sig_type, public)


def generate_signer(name: str, sig_type: int = SIG_ED25519) -> SignerKey:
    """Return a fresh signer key of ``sig_type`` (Ed25519 or, for ``SIG_MLDSA44``, ML-DSA-44),
    from the OS's randomness."""
    if sig_type == SIG_MLDSA44:
        seed = mldsa().MLDSA44PrivateKey.generate().private_bytes_raw()
    else:
        seed = Ed25519PrivateKey.generate().private_bytes_raw()
    return SignerKey(name, sig_type, seed)


def format_vkey(key: VerifierKey) -> str:
    """Return ``<name>+<hex id>+<base64(type || public key)>``."""
    return f"{key.name}+{key.key_id:08x}+{b64(bytes([key.sig_type]) + key.public_key)}"


def _parse_key(name: str, hex_id: str, key64: str, what: str,
               sizes: dict[int, int]) -> tuple[int, int, bytes]:
    if not valid_key_name(name) or not _HEX_ID.fullmatch(hex_id):
        raise NoteError(f"malformed {what}")
    raw = b64decode(key64, f"the {what}'s key")
    if not raw or raw[0] not in SIG_TYPES:
        raise NoteError(f"the {what}'s type is not one of "
                        + ", ".join(f"{t:#04x}" for t in SIG_TYPES)
                        + ("" if not raw else f" (it is {raw[0]:#04x})"))
    if len(raw) != 1 + sizes[raw[0]]:
        raise NoteError(f"the {what} of type {raw[0]:#04x} holds {len(raw) - 1} key bytes, "
                        f"not {sizes[raw[0]]}")
    return int(hex_id, 16), raw[0], raw[1:]


def parse_vkey(text: str) -> VerifierKey:
    """Parse a verifier key; its key ID must be the one its name, type and key give."""
    parts = text.split("+", 2)  # base64 has '+' too: only the first two separate fields
    if len(parts) != 3:
        raise NoteError("malformed verifier key")
    kid, sig_type, public = _parse_key(*parts, "verifier key", _PUBLIC_SIZE)
    if kid != key_id(parts[0], sig_type, public):
        raise NoteError("the verifier key's ID does not match its key")
    if sig_type == SIG_MLDSA44:
        mldsa_public(public)
    return VerifierKey(parts[0], kid, sig_type, public)


def format_skey(key: SignerKey) -> str:
    """Return ``PRIVATE+KEY+<name>+<hex id>+<base64(type || seed)>``."""
    material = b64(bytes([key.sig_type]) + key.seed)
    return f"PRIVATE+KEY+{key.name}+{key.verifier.key_id:08x}+{material}"


def parse_skey(text: str) -> SignerKey:
    """Parse a signer key; its key ID must be the one of the public key its seed gives."""
    parts = text.split("+", 4)
    if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
        raise NoteError("malformed signer key")
    kid, sig_type, seed = _parse_key(*parts[2:], "signer key", dict.fromkeys(SIG_TYPES, _KEY_SIZE))
    key = SignerKey(parts[2], sig_type, seed)
    if kid != key.verifier.key_id:
        raise NoteError("the signer key's ID does not match its key")
    return key
