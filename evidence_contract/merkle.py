"""RFC 9162 (RFC 6962) Merkle trees over a stream's sealed records. Pure.

Hashing is RFC 9162 §2.1.1 with SHA-256, so any RFC 6962 / 9162 library (Go's
``github.com/transparency-dev/merkle``, for one) checks our tree heads and proofs::

    leaf_hash(x)    = SHA-256(0x00 || x)
    node_hash(l, r) = SHA-256(0x01 || l || r)
    the empty tree  = SHA-256("")                                            (EMPTY_ROOT)

The leaf of a sealed record is ``leaf_input(record_bytes)`` (89 bytes)::

    "evidence-store/v2 record\\n" || record_digest || SHA-256(record_bytes)

``record_bytes`` is the whole single-object-encoded EvidenceRecord as it is on the log, so
the leaf binds every sealed byte: the body, the whole seal (including the writer identity and
the intake position that ``record_digest`` does not cover) and the schema fingerprint.
``record_digest`` is repeated in clear so that the tree and the hash chain can be matched
leaf by leaf from the two digests alone; a proof for a record can be checked from
``(record_digest, SHA-256(record_bytes))`` without the record's content, and the second is
what ``sha256sum`` prints for an exported record file.

Domain separation. The contract's digests are ``SHA-256(p || ...)`` with ``p`` in 0x00–0x06
(``schemas.digests``); the tree's hash inputs begin with 0x00 or 0x01 because RFC 6962 fixes
those bytes. So:

- ``record_digest`` (0x05) and the 0x02, 0x03, 0x04, 0x06 digests can never equal a tree
  hash: their SHA-256 inputs start with another byte than every leaf or node input.
- ``SHA-256(record_bytes)`` carries no prefix, yet it is disjoint from all of them too: a
  single-object message starts with the marker byte 0xC3 (``leaf_input`` decodes the record,
  so nothing else gets in), which is none of 0x00–0x06.
- ``content_key`` (0x00) and ``response_digest`` (0x01) hash *arbitrary* outside bytes, a
  request and a response, so their input sets contain every leaf and node input; no choice of
  leaf can make those sets disjoint. What keeps them apart is that no verifier takes a value
  of one kind where the other belongs: a leaf hash is always recomputed from the record bytes
  through ``leaf_input``, a node only ever comes out of ``node_hash``, and a content key or
  response digest is only ever compared with a hash its verifier computed over request or
  response bytes. To pass for a leaf or node of another record, a value would need the same
  SHA-256 preimage, i.e. a second preimage.
- Inside the tree, a leaf input is always 89 bytes starting with the fixed ASCII label and a
  node input always 65 bytes, so the tree's own leaf (0x00) and node (0x01) domains stay
  apart by their prefixes, as RFC 6962 intends. The label holds no newline except its last
  byte, so it ends unambiguously; it names the record contract's major version, so a leaf of
  any later composition ("evidence-store/v3 ...") can never equal a v2 leaf.

Proofs are in RFC 9162 order (§2.1.3.1 inclusion paths from the leaf up, §2.1.4.1
consistency proofs) and verified with the algorithms of §2.1.3.2 and §2.1.4.2, which fail
with ``ProofError`` (``evidence_contract.merkle_verify``; the hashes are
``evidence_contract.tree_hash``; both importable from here). :class:`MerkleTree` holds every
perfect subtree hash (2n hashes) and answers the root, inclusion and consistency proofs of
any size up to its own in O(log n) hashes each; :class:`CompactRange` is the writer's
O(log n) state: append leaves, read the root.

Stored trees. A reader that keeps every perfect subtree hash in a table (the projections'
``tree_nodes``: ``(level, index) -> hash``, level 0 the leaf hashes, ``(h, i)`` covering
leaves ``[i * 2**h, (i + 1) * 2**h)``) answers with :func:`root_from`,
:func:`inclusion_proof_from` and :func:`consistency_proof_from` over a ``lookup(level,
index)`` callback: O(log n) lookups for a perfect range, O(log^2 n) at most for the ragged
right edge. Which nodes a call reads depends on the sizes only, never on the hashes, so
:func:`root_nodes`, :func:`inclusion_nodes` and :func:`consistency_nodes` say beforehand what
to fetch in one query; :meth:`CompactRange.extend_nodes` returns the nodes an append
completes, which is what such a table gains per batch. :class:`MerkleTree` is the same
functions over its own levels.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

from .codec import decode
from .digests import DIGEST_SIZE
from .errors import DecodeError
from .merkle_verify import ProofError, verify_consistency, verify_inclusion
from .tree_hash import EMPTY_ROOT, HASH_SIZE, MAX_SIZE, leaf_hash, node_hash

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "LEAF_LABEL",
    "CompactRange",
    "Lookup",
    "MerkleTree",
    "Node",
    "ProofError",
    "compose_leaf_input",
    "consistency_nodes",
    "consistency_proof_from",
    "inclusion_nodes",
    "inclusion_proof_from",
    "leaf_hash",
    "leaf_input",
    "node_hash",
    "range_nodes",
    "record_leaf_hash",
    "root_from",
    "root_nodes",
    "tree_root",
    "verify_consistency",
    "verify_inclusion",
]

LEAF_LABEL = b"evidence-store/v2 record\n"
"""The fixed first bytes of every leaf input (see the module docstring)."""


def compose_leaf_input(record_digest: bytes, record_sha256: bytes) -> bytes:
    """Return ``LEAF_LABEL || record_digest || record_sha256``: a record's leaf input.

    For a caller that already holds both digests (the writer right after sealing; an auditor
    holding an export). ``leaf_input`` is the same over the record bytes themselves.
    """
    for name, value in (("record_digest", record_digest), ("record_sha256", record_sha256)):
        if not isinstance(value, (bytes, bytearray)) or len(value) != DIGEST_SIZE:
            raise ValueError(f"{name} must be {DIGEST_SIZE} bytes")
    return LEAF_LABEL + bytes(record_digest) + bytes(record_sha256)


def leaf_input(record_bytes: bytes) -> bytes:
    """Return the leaf input of a whole single-object-encoded EvidenceRecord.

    Raises ``DecodeError`` unless the bytes are exactly one valid EvidenceRecord, so a leaf
    never covers bytes that are not a sealed record of ours.
    """
    data = bytes(record_bytes)
    name, record = decode(data)
    if name != "EvidenceRecord":
        raise DecodeError(f"a tree leaf is a sealed EvidenceRecord, got a {name}")
    return compose_leaf_input(record["seal"]["record_digest"], hashlib.sha256(data).digest())


def record_leaf_hash(record_bytes: bytes) -> bytes:
    """Return ``leaf_hash(leaf_input(record_bytes))``: what the tree holds for a record."""
    return leaf_hash(leaf_input(record_bytes))


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n >= 2): where RFC 9162 splits D[n]."""
    return 1 << ((n - 1).bit_length() - 1)


def tree_root(leaf_hashes: Iterable[bytes]) -> bytes:
    """Return the root (RFC 9162 MTH) of the tree whose leaves have these hashes."""
    frontier = CompactRange()
    frontier.extend(leaf_hashes)
    return frontier.root()


class MerkleTree:
    """Every perfect subtree hash of a list of leaf hashes; roots and proofs of any size.

    ``levels[h][i]`` is the hash of leaves ``[i * 2**h, (i + 1) * 2**h)``; an imperfect
    subtree (the right edge of a tree whose size is not a power of two) is combined from at
    most log2(n) of those on demand. Building costs n - 1 node hashes.
    """

    def __init__(self, leaf_hashes: Iterable[bytes]) -> None:
        level = [bytes(h) for h in leaf_hashes]
        if any(len(h) != HASH_SIZE for h in level):
            raise ValueError(f"every leaf hash must be {HASH_SIZE} bytes")
        self._levels = [level]
        while len(level) > 1:
            # An odd last node is no perfect subtree of the next level: it is left out here and
            # combined by _subtree when a size needs it.
            level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
            self._levels.append(level)

    @property
    def size(self) -> int:
        """The number of leaves."""
        return len(self._levels[0])

    def leaf_hash(self, index: int) -> bytes:
        """The hash of leaf ``index``."""
        return self._levels[0][index]

    def _lookup(self, level: int, index: int) -> bytes:
        return self._levels[level][index]

    def root(self, size: int | None = None) -> bytes:
        """The root of the first ``size`` leaves (default: all); ``EMPTY_ROOT`` for 0."""
        return root_from(self.size if size is None else _bounded("size", size, 0, self.size),
                         self._lookup)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """The RFC 9162 inclusion path of leaf ``index`` in the tree of ``size`` leaves."""
        size = self.size if size is None else _bounded("size", size, 1, self.size)
        return inclusion_proof_from(index, size, self._lookup)

    def consistency_proof(self, first: int, second: int | None = None) -> list[bytes]:
        """The RFC 9162 consistency proof from the tree of ``first`` leaves to ``second``.

        ``0 < first <= second``: a proof from the empty tree proves nothing, and verifiers
        (RFC 9162 §2.1.4.2, transparency-dev/merkle) reject it.
        """
        second = self.size if second is None else _bounded("size", second, 1, self.size)
        return consistency_proof_from(first, second, self._lookup)


# --- Roots and proofs over stored perfect subtrees ------------------------------------------

Node = tuple[int, int]
"""A perfect subtree's position: ``(level, index)``, covering leaves
``[index * 2**level, (index + 1) * 2**level)``."""

Lookup = Callable[[int, int], bytes]
"""``lookup(level, index)`` -> the hash of that perfect subtree (level 0: the leaf hash)."""


def _bounded(name: str, value: object, lowest: int, highest: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lowest <= value <= highest:
        raise ValueError(f"{name} must be an int in [{lowest}, {highest}], got {value!r}")
    return value


def _subtree(lookup: Lookup, lo: int, hi: int) -> bytes:
    # Every range asked for starts at a multiple of the power of two at or above its length
    # (true of [0, size) and kept by each split), so a power-of-two range is one stored node
    # and any other is split into at most log2(n) of them.
    n = hi - lo
    if n & (n - 1) == 0:
        height = n.bit_length() - 1
        return lookup(height, lo >> height)
    k = _split(n)
    return node_hash(_subtree(lookup, lo, lo + k), _subtree(lookup, lo + k, hi))


def root_from(size: int, lookup: Lookup) -> bytes:
    """The root (RFC 9162 MTH) of the first ``size`` leaves; ``EMPTY_ROOT`` for 0."""
    size = _bounded("size", size, 0, MAX_SIZE - 1)
    return EMPTY_ROOT if size == 0 else _subtree(lookup, 0, size)


def inclusion_proof_from(index: int, size: int, lookup: Lookup) -> list[bytes]:
    """The RFC 9162 inclusion path (leaf up) of leaf ``index`` in the tree of ``size`` leaves."""
    size = _bounded("size", size, 1, MAX_SIZE - 1)
    index = _bounded("index", index, 0, size - 1)
    path = []
    lo, hi = 0, size
    while hi - lo > 1:  # top-down; RFC 9162 lists the path bottom-up, hence the reverse
        k = _split(hi - lo)
        if index < lo + k:
            path.append(_subtree(lookup, lo + k, hi))
            hi = lo + k
        else:
            path.append(_subtree(lookup, lo, lo + k))
            lo += k
    path.reverse()
    return path


def consistency_proof_from(first: int, second: int, lookup: Lookup) -> list[bytes]:
    """The RFC 9162 consistency proof from the tree of ``first`` leaves to ``second``.

    ``0 < first <= second`` (equal sizes: the empty proof).
    """
    second = _bounded("second", second, 1, MAX_SIZE - 1)
    first = _bounded("first", first, 1, second)
    proof = []
    lo, hi, whole = 0, second, True  # whole: SUBPROOF's b, "D[lo:hi] is the whole tree"
    while first - lo != hi - lo:
        k = _split(hi - lo)
        if first - lo <= k:
            proof.append(_subtree(lookup, lo + k, hi))
            hi = lo + k
        else:
            proof.append(_subtree(lookup, lo, lo + k))
            lo += k
            whole = False
    if not whole:  # SUBPROOF(m, D[m], false) = {MTH(D[m])}
        proof.append(_subtree(lookup, lo, hi))
    proof.reverse()
    return proof


def _recorded(compute: Callable[[Lookup], object]) -> list[Node]:
    seen: dict[Node, None] = {}

    def record(level: int, index: int) -> bytes:
        seen[(level, index)] = None
        return EMPTY_ROOT  # any 32 bytes: which nodes are read never depends on their hashes

    compute(record)
    return list(seen)


def root_nodes(size: int) -> list[Node]:
    """The nodes :func:`root_from` reads for ``size`` (those of :func:`range_nodes`)."""
    return _recorded(lambda lookup: root_from(size, lookup))


def inclusion_nodes(index: int, size: int) -> list[Node]:
    """The nodes :func:`inclusion_proof_from` reads, in the order it first reads them."""
    return _recorded(lambda lookup: inclusion_proof_from(index, size, lookup))


def consistency_nodes(first: int, second: int) -> list[Node]:
    """The nodes :func:`consistency_proof_from` reads, in the order it first reads them."""
    return _recorded(lambda lookup: consistency_proof_from(first, second, lookup))


def range_nodes(size: int) -> list[Node]:
    """The perfect subtrees that make up leaves ``[0, size)``, largest first: one per set bit
    of ``size``, the positions of :attr:`CompactRange.nodes`."""
    size = _bounded("size", size, 0, MAX_SIZE - 1)
    out, lo = [], 0
    for level in range(size.bit_length() - 1, -1, -1):
        if size >> level & 1:
            out.append((level, lo >> level))
            lo += 1 << level
    return out


class CompactRange:
    """The roots of the perfect subtrees that make up leaves ``[0, size)``, largest first.

    One node per set bit of ``size``, so a writer keeps O(log n) hashes per stream, appends
    each sealed record's leaf hash and reads the root for its next checkpoint. ``nodes`` and
    ``size`` are all there is to persist; ``CompactRange(size, nodes)`` restores them.
    """

    def __init__(self, size: int = 0, nodes: Sequence[bytes] = ()) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size < MAX_SIZE:
            raise ValueError(f"size must be an int in [0, 2**64), got {size!r}")
        nodes = [bytes(n) for n in nodes]
        if len(nodes) != size.bit_count() or any(len(n) != HASH_SIZE for n in nodes):
            raise ValueError(f"a range of {size} leaves has {size.bit_count()} nodes of "
                             f"{HASH_SIZE} bytes")
        self._size = size
        self._nodes = nodes

    @property
    def size(self) -> int:
        """The number of leaves appended so far."""
        return self._size

    @property
    def nodes(self) -> tuple[bytes, ...]:
        """The perfect subtree roots, largest (leftmost) first."""
        return tuple(self._nodes)

    @classmethod
    def from_lookup(cls, size: int, lookup: Lookup) -> "CompactRange":
        """The range of ``size`` leaves read from stored perfect subtrees (:func:`range_nodes`)."""
        return cls(size, [lookup(level, index) for level, index in range_nodes(size)])

    def _append(self, leaf_hash: bytes, made: list[tuple[int, int, bytes]] | None) -> None:
        if not isinstance(leaf_hash, (bytes, bytearray)) or len(leaf_hash) != HASH_SIZE:
            raise ValueError(f"a leaf hash is {HASH_SIZE} bytes")
        if self._size + 1 >= MAX_SIZE:
            raise ValueError("a tree holds fewer than 2**64 leaves")
        node, size, level = bytes(leaf_hash), self._size, 0
        if made is not None:
            made.append((0, self._size, node))
        while size & 1:  # each trailing set bit is a subtree of the new node's height: merge
            node = node_hash(self._nodes.pop(), node)
            size >>= 1
            level += 1
            if made is not None:
                made.append((level, self._size >> level, node))
        self._nodes.append(node)
        self._size += 1

    def append(self, leaf_hash: bytes) -> None:
        """Append one leaf by its hash (``leaf_hash(leaf_input)``)."""
        self._append(leaf_hash, None)

    def append_with(self, merge: Callable[[list[bytes], int, bytes], None],
                    leaf_hash: bytes) -> None:
        """:meth:`append`, its merges made by ``merge(nodes, size, leaf_hash)`` on this range's
        node list in place: a compiled twin of them (``evidence_seal_native.append_leaf``,
        held to the same ranges by the writer's self-check and its tests)."""
        if self._size + 1 >= MAX_SIZE:
            raise ValueError("a tree holds fewer than 2**64 leaves")
        merge(self._nodes, self._size, leaf_hash)
        self._size += 1

    def extend(self, leaf_hashes: Iterable[bytes]) -> None:
        """Append several leaves in order."""
        for h in leaf_hashes:
            self._append(h, None)

    def extend_nodes(self, leaf_hashes: Iterable[bytes]) -> list[tuple[int, int, bytes]]:
        """Append leaves in order; return every perfect subtree they complete, as
        ``(level, index, hash)`` (each leaf itself at level 0): what a table of all perfect
        subtree hashes gains."""
        made: list[tuple[int, int, bytes]] = []
        for h in leaf_hashes:
            self._append(h, made)
        return made

    def root(self) -> bytes:
        """The tree head of the leaves so far (``EMPTY_ROOT`` when there are none)."""
        if not self._nodes:
            return EMPTY_ROOT
        root = self._nodes[-1]
        for node in reversed(self._nodes[:-1]):
            root = node_hash(node, root)
        return root
