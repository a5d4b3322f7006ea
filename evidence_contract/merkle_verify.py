"""Checking RFC 9162 Merkle proofs: inclusion (§2.1.3.2) and consistency (§2.1.4.2). Pure.

The proofs are those ``evidence_contract.merkle`` makes (RFC 9162 order: inclusion paths from
the leaf up, consistency proofs as §2.1.4.1 builds them), or any RFC 6962 / 9162 log's.
Everything here comes from whoever presents the proof, so every malformed argument is a
:class:`ProofError`, never a TypeError.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import EvidenceError
from .tree_hash import HASH_SIZE, MAX_SIZE, node_hash

__all__ = ["ProofError", "verify_consistency", "verify_inclusion"]


class ProofError(EvidenceError):
    """A Merkle proof does not verify, or its arguments cannot describe a valid proof."""


def _check_size(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < MAX_SIZE:
        raise ProofError(f"{name} must be an int in [0, 2**64), got {value!r}")
    return value


def _check_hash(name: str, value: object) -> bytes:
    if not isinstance(value, (bytes, bytearray)) or len(value) != HASH_SIZE:
        raise ProofError(f"{name} must be {HASH_SIZE} bytes")
    return bytes(value)


def _check_proof(proof: object) -> list[bytes]:
    if proof is None:
        return []
    if isinstance(proof, (bytes, bytearray, str)) or not isinstance(proof, Sequence):
        raise ProofError("a proof is a sequence of hashes")
    return [_check_hash(f"proof[{i}]", p) for i, p in enumerate(proof)]


def verify_inclusion(index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes],
                     root: bytes) -> None:
    """Check that ``leaf_hash`` is leaf ``index`` of the tree of ``size`` leaves with ``root``.

    RFC 9162 §2.1.3.2; raises ``ProofError`` when the proof does not verify.
    """
    fn, sn = _check_size("index", index), _check_size("size", size)
    r, root = _check_hash("leaf_hash", leaf_hash), _check_hash("root", root)
    path = _check_proof(proof)
    if fn >= sn:
        raise ProofError(f"index {fn} is not below the tree size {sn}")
    sn -= 1
    for p in path:
        if sn == 0:
            raise ProofError("the inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while fn and not fn & 1:  # fn == sn, a left child: climb to where fn is a right one
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("the inclusion proof is too short")
    if r != root:
        raise ProofError("the inclusion proof leads to another root")


def verify_consistency(first: int, second: int, proof: Sequence[bytes], first_root: bytes,
                       second_root: bytes) -> None:
    """Check that the tree of ``second`` leaves with ``second_root`` extends ``first``'s.

    RFC 9162 §2.1.4.2 for ``0 < first < second``. Equal sizes are consistent with an empty
    proof and equal roots. A proof from the empty tree is refused: it proves nothing (the
    RFC requires ``0 < first``; transparency-dev/merkle refuses it after v0.0.2 too).
    """
    first, second = _check_size("first", first), _check_size("second", second)
    path = _check_proof(proof)
    first_root = _check_hash("first_root", first_root)
    second_root = _check_hash("second_root", second_root)
    if first == 0:
        raise ProofError("a consistency proof from the empty tree proves nothing")
    if second < first:
        raise ProofError(f"second ({second}) is smaller than first ({first})")
    if first == second:
        if path:
            raise ProofError("equal sizes take an empty consistency proof")
        if first_root != second_root:
            raise ProofError("equal sizes with different roots")
        return
    if not path:
        raise ProofError("the consistency proof is empty")
    if first & (first - 1) == 0:  # step 2: the old tree is a perfect subtree, its root is implied
        path = [first_root] + path
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the consistency proof is too long")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("the consistency proof is too short")
    if fr != first_root:
        raise ProofError("the consistency proof does not lead to the first root")
    if sr != second_root:
        raise ProofError("the consistency proof does not lead to the second root")
