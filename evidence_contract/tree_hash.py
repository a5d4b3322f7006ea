"""The hashes of an RFC 9162 (RFC 6962) Merkle tree, SHA-256 (RFC 9162 §2.1.1)::

    leaf_hash(x)    = SHA-256(0x00 || x)
    node_hash(l, r) = SHA-256(0x01 || l || r)
    the empty tree  = SHA-256("")                                            (EMPTY_ROOT)

The one definition of each, for the trees (``evidence_contract.merkle``), the proofs that are
checked against them (``evidence_contract.merkle_verify``) and the tiles. Pure.
"""

from __future__ import annotations

import hashlib

__all__ = ["EMPTY_ROOT", "HASH_SIZE", "MAX_SIZE", "leaf_hash", "node_hash"]

HASH_SIZE = 32
"""Bytes of every tree hash (SHA-256)."""

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""The root of the empty tree (RFC 9162 §2.1.1: the hash of an empty string)."""

MAX_SIZE = 1 << 64
"""Tree sizes are below it: they are uint64 in checkpoints and in every RFC 9162 structure."""


def leaf_hash(leaf_input: bytes) -> bytes:
    """Return SHA-256(0x00 || leaf_input), the RFC 9162 hash of a leaf."""
    return hashlib.sha256(b"\x00" + bytes(leaf_input)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Return SHA-256(0x01 || left || right), the RFC 9162 hash of an interior node."""
    return hashlib.sha256(b"\x01" + left + right).digest()
