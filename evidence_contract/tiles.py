"""C2SP tlog-tiles: tile paths, entry bundles, and a tree's hashes read back from its tiles. Pure.

A tiled log (https://c2sp.org/tlog-tiles) serves its Merkle tree (RFC 6962 hashing, as in
:mod:`evidence_contract.merkle`) as static resources under a URL *prefix*::

    <prefix>/checkpoint                   the signed checkpoint
    <prefix>/tile/<L>/<N>[.p/<W>]         hash tiles
    <prefix>/tile/entries/<N>[.p/<W>]     entry bundles

Tiles have height 8: the tile ``(L, N)`` holds the hashes of tree level ``8 * L``, positions
``N * 256`` to ``N * 256 + 255``, each the hash of a perfect subtree of ``256**L`` leaves
(the stored node ``(8 * L, N * 256 + i)`` of a ``tree_nodes``-like table). A full tile is
256 hashes (8,192 bytes); the rightmost tile of each level of a tree of ``size`` leaves is
*partial*, ``floor(size / 256**L) mod 256`` hashes wide, named with ``.p/<W>``. The levels in
between are recomputed by hashing a tile's hashes pairwise (:func:`hash_at`).

``<N>`` is written in 3-digit groups, every group but the last prefixed by ``x``
(1234067 is ``x001/x234/067``); ``<L>`` is 0 to 63 and ``<W>`` 1 to 255, both decimal without
leading zeros. :func:`parse_tile_path` accepts exactly the paths :func:`tile_path` writes and
says why it refuses any other (a :class:`TileError`, which is also a ``ValueError``).

An entry bundle holds the entries of the leaves of the level-0 tile with the same ``N`` and
``W``, each as a big-endian uint16 length and its bytes (:func:`encode_entry_bundle`,
:func:`decode_entry_bundle`); entry ``i`` hashes to leaf ``i``: ``leaf_hash(entry)``.

Reading a tree back: :func:`hash_at` and :func:`root_at` compute any perfect subtree's hash
and any size's root from hash tiles, through a ``read_tile(level, index)`` callback;
:class:`TileReader` is that callback over a ``fetch(path) -> bytes`` of one tree size (it asks
for each tile at the width that size gives it, as the spec tells a client to), and reads and
verifies every entry against a root.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import NamedTuple

from .errors import EvidenceError
from .merkle import HASH_SIZE, CompactRange, leaf_hash, node_hash, root_from

__all__ = [
    "ENTRIES",
    "MAX_ENTRY_SIZE",
    "MAX_LEVEL",
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "Fetch",
    "ReadTile",
    "Tile",
    "TileError",
    "TileReader",
    "bundles_for_size",
    "decode_entry_bundle",
    "encode_entry_bundle",
    "hash_at",
    "parse_tile_path",
    "root_at",
    "tile_path",
    "tile_width",
    "tiles_for_size",
]

TILE_HEIGHT = 8
"""Tree levels one tile spans: a tile at level ``L`` holds hashes of tree level ``8 * L``."""

TILE_WIDTH = 1 << TILE_HEIGHT
"""Hashes (or entries) in a full tile: 256."""

ENTRIES = "entries"
"""The ``<L>`` of an entry bundle's path."""

MAX_LEVEL = 63
"""The largest ``<L>`` a tile path may name."""

MAX_ENTRY_SIZE = 0xFFFF
"""The largest entry an entry bundle can hold: its length is a uint16."""

_MAX_SIZE = 1 << 64  # tree sizes are uint64
_PATH_BASE = 1000
_LEVEL = re.compile(r"0|[1-9][0-9]?")
_WIDTH = re.compile(r"[1-9][0-9]{0,2}")
_INNER_GROUP = re.compile(r"x[0-9]{3}")
_LAST_GROUP = re.compile(r"[0-9]{3}")


class TileError(EvidenceError, ValueError):
    """A tile path, a tile or an entry bundle is malformed, or tiles do not prove what they
    should (their hashes do not lead to the checkpoint's root)."""


class Tile(NamedTuple):
    """A tile: ``level`` (0 to 63, or :data:`ENTRIES` for an entry bundle), ``index`` (its
    ``<N>``) and ``width`` (256 for a full tile, 1 to 255 for a partial one)."""

    level: int | str
    index: int
    width: int = TILE_WIDTH

    @property
    def full(self) -> bool:
        return self.width == TILE_WIDTH

    @property
    def path(self) -> str:
        """``tile/<L>/<N>[.p/<W>]``: the tile's path below the log's prefix."""
        return tile_path(self.level, self.index, self.width)

    @property
    def tree_level(self) -> int:
        """The tree level of the tile's hashes (0 for an entry bundle: its entries' leaves)."""
        return 0 if self.level == ENTRIES else TILE_HEIGHT * int(self.level)

    @property
    def positions(self) -> range:
        """The positions at :attr:`tree_level` of what the tile holds, in order: stored
        nodes ``(tree_level, i)`` of a hash tile, entry indexes of a bundle."""
        start = self.index * TILE_WIDTH
        return range(start, start + self.width)


Fetch = Callable[[str], bytes]
"""``fetch(path)`` -> the bytes served at ``<prefix>/<path>`` (path from :func:`tile_path`)."""

ReadTile = Callable[[int, int], bytes]
"""``read_tile(level, index)`` -> the hash tile's bytes, at least as wide as a caller needs."""


def _check_int(name: str, value: object, lowest: int, highest: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lowest <= value <= highest:
        raise TileError(f"{name} must be an int in [{lowest}, {highest}], got {value!r}")
    return value


def _check_level(level: object) -> int | str:
    if level == ENTRIES:
        return ENTRIES
    return _check_int("level", level, 0, MAX_LEVEL)


def tile_path(level: int | str, index: int, width: int = TILE_WIDTH) -> str:
    """The path of tile ``(level, index)`` of ``width`` hashes (or entries):
    ``tile/<L>/<N>`` for a full tile, ``tile/<L>/<N>.p/<W>`` for a partial one."""
    level = _check_level(level)
    index = _check_int("index", index, 0, _MAX_SIZE - 1)
    width = _check_int("width", width, 1, TILE_WIDTH)
    groups = [f"{index % _PATH_BASE:03d}"]
    index //= _PATH_BASE
    while index:
        groups.append(f"x{index % _PATH_BASE:03d}")
        index //= _PATH_BASE
    suffix = "" if width == TILE_WIDTH else f".p/{width}"
    return f"tile/{level}/{'/'.join(reversed(groups))}{suffix}"


def parse_tile_path(path: str) -> Tile:
    """The tile a ``tile/<L>/<N>[.p/<W>]`` path names (``<L>`` may be ``entries``).

    Only the canonical spelling is a tile (what :func:`tile_path` writes): a level or width
    with a leading zero, a group of other than 3 digits, an inner group without its ``x``
    (or a last group with one), a leading ``x000`` group, a width of 0 or of 256 and above
    (a full tile has no ``.p`` suffix) are each a :class:`TileError` saying so.
    """
    if not isinstance(path, str):
        raise TileError("a tile path is a string")
    parts = path.split("/")
    if parts[0] != "tile" or len(parts) < 3:
        raise TileError(f"{path!r} is not a tile path: tile/<L>/<N>[.p/<W>]")
    raw_level, groups = parts[1], parts[2:]
    if raw_level == ENTRIES:
        level: int | str = ENTRIES
    elif _LEVEL.fullmatch(raw_level) and int(raw_level) <= MAX_LEVEL:
        level = int(raw_level)
    else:
        raise TileError(f"tile level {raw_level!r}: a decimal from 0 to {MAX_LEVEL} without "
                        f"leading zeros, or {ENTRIES!r}")
    width = TILE_WIDTH
    if groups[-1].endswith(".p"):
        raise TileError(f"{path!r}: a partial tile's .p is followed by /<W>")
    if len(groups) >= 2 and groups[-2].endswith(".p"):
        raw_width = groups.pop()
        if not _WIDTH.fullmatch(raw_width) or int(raw_width) >= TILE_WIDTH:
            raise TileError(f"partial tile width {raw_width!r}: a decimal from 1 to "
                            f"{TILE_WIDTH - 1} without leading zeros (a full tile has no "
                            f".p suffix)")
        width = int(raw_width)
        groups[-1] = groups[-1][:-2]
    index = 0
    for i, group in enumerate(groups):
        last = i == len(groups) - 1
        if not (_LAST_GROUP if last else _INNER_GROUP).fullmatch(group):
            raise TileError(f"tile index element {group!r}: the index is written in 3-digit "
                            f"groups, each but the last prefixed by x (1234067 is "
                            f"x001/x234/067)")
        index = index * _PATH_BASE + int(group.removeprefix("x"))
    if len(groups) > 1 and groups[0] == "x000":
        raise TileError(f"{path!r}: the tile index has a leading x000 group")
    if index >= _MAX_SIZE:
        raise TileError(f"tile index {index} is beyond any tree (sizes are below 2**64)")
    return Tile(level, index, width)


def tile_width(level: int | str, index: int, size: int) -> int:
    """How many hashes (entries) tile ``(level, index)`` holds in a tree of ``size`` leaves:
    256 when it is full, 1 to 255 when it is that tree's partial tile, 0 when the tree does
    not reach it."""
    level = _check_level(level)
    index = _check_int("index", index, 0, _MAX_SIZE)
    size = _check_int("size", size, 0, _MAX_SIZE - 1)
    shift = 0 if level == ENTRIES else TILE_HEIGHT * int(level)
    return max(0, min(TILE_WIDTH, (size >> shift) - index * TILE_WIDTH))


def tiles_for_size(size: int) -> list[Tile]:
    """Every hash tile of a tree of ``size`` leaves (full and partial), level by level: what a
    log serves for that size (70,000 leaves: 273 full and one partial of width 112 at level
    0, one full and one of width 17 at level 1, one of width 1 at level 2)."""
    size = _check_int("size", size, 0, _MAX_SIZE - 1)
    out, level = [], 0
    while size >> (TILE_HEIGHT * level):
        out += _level_tiles(level, size >> (TILE_HEIGHT * level))
        level += 1
    return out


def bundles_for_size(size: int) -> list[Tile]:
    """Every entry bundle of a tree of ``size`` leaves, in order."""
    return _level_tiles(ENTRIES, _check_int("size", size, 0, _MAX_SIZE - 1))


def _level_tiles(level: int | str, count: int) -> list[Tile]:
    full, rest = divmod(count, TILE_WIDTH)
    return [Tile(level, n) for n in range(full)] + ([Tile(level, full, rest)] if rest else [])


# --- Entry bundles --------------------------------------------------------------------------


def encode_entry_bundle(entries: Iterable[bytes]) -> bytes:
    """The entry bundle of ``entries``: each as a big-endian uint16 length and its bytes."""
    out = bytearray()
    for i, entry in enumerate(entries):
        if not isinstance(entry, (bytes, bytearray, memoryview)):
            raise TileError(f"entry {i} is not bytes")
        if len(entry) > MAX_ENTRY_SIZE:
            raise TileError(f"entry {i} is {len(entry)} bytes; a bundle holds entries of at "
                            f"most {MAX_ENTRY_SIZE}")
        out += len(entry).to_bytes(2, "big")
        out += entry
    return bytes(out)


def decode_entry_bundle(data: bytes, width: int | None = None) -> list[bytes]:
    """The entries of an entry bundle; with ``width``, exactly that many or a TileError."""
    data = bytes(data)
    entries, at = [], 0
    while at < len(data):
        if at + 2 > len(data):
            raise TileError(f"the entry bundle ends inside entry {len(entries)}'s length")
        length = int.from_bytes(data[at:at + 2], "big")
        at += 2
        if at + length > len(data):
            raise TileError(f"the entry bundle ends inside entry {len(entries)} ({length} "
                            f"bytes announced, {len(data) - at} left)")
        entries.append(data[at:at + length])
        at += length
    if width is not None and len(entries) != width:
        raise TileError(f"the entry bundle holds {len(entries)} entries, not {width}")
    return entries


# --- The tree read back from its hash tiles -------------------------------------------------


def hash_at(level: int, index: int, read_tile: ReadTile) -> bytes:
    """The hash of the perfect subtree ``(level, index)`` (leaves ``[index * 2**level,
    (index + 1) * 2**level)``; level 0: a leaf hash), from the hash tile holding it: the
    tile's hashes of tree level ``8 * (level // 8)`` under it, hashed pairwise up to
    ``level``."""
    level = _check_int("level", level, 0, 63)
    index = _check_int("index", index, 0, (_MAX_SIZE >> level) - 1)
    tile_level, height = divmod(level, TILE_HEIGHT)
    first = index << height  # position at tree level 8 * tile_level of its first hash
    tile_index, offset = divmod(first, TILE_WIDTH)
    data = read_tile(tile_level, tile_index)
    if not isinstance(data, (bytes, bytearray)) or len(data) % HASH_SIZE:
        raise TileError(f"tile {tile_level}/{tile_index} is not a sequence of "
                        f"{HASH_SIZE}-byte hashes")
    count = 1 << height
    if len(data) < (offset + count) * HASH_SIZE:
        raise TileError(f"tile {tile_level}/{tile_index} holds {len(data) // HASH_SIZE} "
                        f"hashes; node ({level}, {index}) needs {offset + count}")
    hashes = [bytes(data[(offset + i) * HASH_SIZE:(offset + i + 1) * HASH_SIZE])
              for i in range(count)]
    while len(hashes) > 1:
        hashes = [node_hash(hashes[i], hashes[i + 1]) for i in range(0, len(hashes), 2)]
    return hashes[0]


def root_at(size: int, read_tile: ReadTile) -> bytes:
    """The RFC 6962 root of the first ``size`` leaves, from the hash tiles of a tree at least
    that large: the hashes of ``size``'s perfect subtrees (one per set bit), each from its
    tile (:func:`hash_at`), combined right to left. Each tile is read once."""
    read: dict[tuple[int, int], bytes] = {}

    def once(level: int, index: int) -> bytes:
        if (level, index) not in read:
            read[(level, index)] = read_tile(level, index)
        return read[(level, index)]

    return root_from(size, lambda level, index: hash_at(level, index, once))


class TileReader:
    """A tiled log of ``size`` leaves read through ``fetch(path) -> bytes``.

    Each tile is asked for at the width the tree of ``size`` gives it (full, or that size's
    partial tile), which is what a log serves for a size it has signed, and must come back
    exactly that long. Nothing read is trusted until it is checked against a root the caller
    trusts: :meth:`verify_root` for the hash tiles, :meth:`entries` for the entry bundles.
    The last tiles read are kept (a few hundred at most), so computing roots and subtree
    hashes for many sizes fetches each tile about once.
    """

    _KEEP = 256

    def __init__(self, fetch: Fetch, size: int) -> None:
        self._fetch = fetch
        self.size = _check_int("size", size, 0, _MAX_SIZE - 1)
        self._tiles: dict[tuple[int, int], bytes] = {}

    def read_tile(self, level: int, index: int) -> bytes:
        """Hash tile ``(level, index)`` at this tree size's width (a :data:`ReadTile`)."""
        if (level, index) in self._tiles:
            return self._tiles[(level, index)]
        width = tile_width(level, index, self.size)
        if width == 0:
            raise TileError(f"a tree of {self.size} leaves has no tile {level}/{index}")
        path = tile_path(level, index, width)
        data = self._fetch(path)
        if not isinstance(data, (bytes, bytearray)) or len(data) != width * HASH_SIZE:
            raise TileError(f"{path}: {len(data)} bytes served, a tile of {width} hashes is "
                            f"{width * HASH_SIZE}")
        if len(self._tiles) >= self._KEEP:
            self._tiles.clear()
        self._tiles[(level, index)] = data = bytes(data)
        return data

    def hash_at(self, level: int, index: int) -> bytes:
        """The hash of the perfect subtree ``(level, index)`` (:func:`hash_at`)."""
        return hash_at(level, index, self.read_tile)

    def root(self, size: int | None = None) -> bytes:
        """The root of the first ``size`` leaves (default: all) from the hash tiles."""
        size = self.size if size is None else _check_int("size", size, 0, self.size)
        return root_at(size, self.read_tile)

    def verify_root(self, root: bytes) -> None:
        """Raise :class:`TileError` unless the hash tiles lead to ``root``."""
        if self.root() != bytes(root):
            raise TileError(f"the hash tiles of the tree of {self.size} leaves do not lead "
                            f"to its root")

    def read_bundle(self, index: int) -> list[bytes]:
        """The entries of entry bundle ``index`` at this tree size's width (unverified)."""
        width = tile_width(ENTRIES, index, self.size)
        if width == 0:
            raise TileError(f"a tree of {self.size} leaves has no entry bundle {index}")
        path = tile_path(ENTRIES, index, width)
        try:
            return decode_entry_bundle(self._fetch(path), width)
        except TileError as e:
            raise TileError(f"{path}: {e}") from None

    def entries(self, root: bytes) -> list[bytes]:
        """Every entry of the tree, in order, once they hash to ``root`` (RFC 6962 leaf
        hashes, ``leaf_hash(entry)``); a :class:`TileError` otherwise."""
        frontier = CompactRange()
        out: list[bytes] = []
        for bundle in bundles_for_size(self.size):
            entries = self.read_bundle(bundle.index)
            frontier.extend(leaf_hash(e) for e in entries)
            out += entries
        if frontier.root() != bytes(root):
            raise TileError(f"the {self.size} entries served do not hash to the root")
        return out

