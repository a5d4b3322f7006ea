"""C2SP tlog-tiles (evidence_contract.tiles): paths as the spec spells them, entry bundles, and
trees read back from their tiles, checked against evidence_contract.merkle."""

import hashlib

import pytest

from evidence_contract.merkle import EMPTY_ROOT, CompactRange, MerkleTree, leaf_hash
from evidence_contract.tiles import (
    ENTRIES,
    Tile,
    TileError,
    TileReader,
    bundles_for_size,
    decode_entry_bundle,
    encode_entry_bundle,
    hash_at,
    parse_tile_path,
    root_at,
    tile_path,
    tile_width,
    tiles_for_size,
)


@pytest.mark.parametrize("level, index, width, path", [
    (0, 0, 256, "tile/0/000"),
    (0, 1234067, 256, "tile/0/x001/x234/067"),  # the spec's example
    (0, 1234067, 7, "tile/0/x001/x234/067.p/7"),
    (3, 999, 255, "tile/3/999.p/255"),
    (63, 1000, 1, "tile/63/x001/000.p/1"),
    (1, 123456789, 256, "tile/1/x123/x456/789"),
    (ENTRIES, 0, 1, "tile/entries/000.p/1"),
    (ENTRIES, 5, 256, "tile/entries/005"),
    (ENTRIES, 1_000_000, 256, "tile/entries/x001/x000/000"),
])
def test_paths_round_trip(level, index, width, path):
    assert tile_path(level, index, width) == path
    assert parse_tile_path(path) == Tile(level, index, width)
    assert Tile(level, index, width).path == path


@pytest.mark.parametrize("path, reason", [
    ("0/000", "not a tile path"),
    ("tile/0", "not a tile path"),
    ("tiles/0/000", "not a tile path"),
    ("tile/00/000", "tile level"),
    ("tile/01/000", "tile level"),
    ("tile/64/000", "tile level"),
    ("tile/-1/000", "tile level"),
    ("tile/data/000", "tile level"),
    ("tile/8/0/000", "tile index element"),  # Go sumdb's tile/<H>/<L>/<N> is not tlog-tiles
    ("tile/0/0", "tile index element"),
    ("tile/0/0000", "tile index element"),
    ("tile/0/x000", "tile index element"),  # the last group has no x
    ("tile/0/001/234", "tile index element"),  # an inner group has one
    ("tile/0/x01/234", "tile index element"),
    ("tile/0/x000/234", "leading x000"),
    ("tile/0/x000/x001/234", "leading x000"),
    ("tile/0/", "tile index element"),
    ("tile/0/000/", "tile index element"),
    ("tile/0/+01", "tile index element"),
    ("tile/0/000.p/0", "partial tile width"),
    ("tile/0/000.p/256", "partial tile width"),
    ("tile/0/000.p/300", "partial tile width"),
    ("tile/0/000.p/07", "partial tile width"),
    ("tile/0/000.p/", "partial tile width"),
    ("tile/0/000.p", "followed by /<W>"),
    ("tile/0/000.p/1/2", "tile index element"),
    ("tile/entries/000.p/x1", "partial tile width"),
    ("tile/0/x018/x446/x744/x073/x709/x551/616", "beyond any tree"),  # 2**64
])
def test_malformed_paths_say_why(path, reason):
    with pytest.raises(TileError, match=reason):
        parse_tile_path(path)
    with pytest.raises(ValueError):  # a TileError is a ValueError too
        parse_tile_path(path)


def test_the_largest_index_parses():
    path = tile_path(0, 2**64 - 1)
    assert path == "tile/0/x018/x446/x744/x073/x709/x551/615"
    assert parse_tile_path(path).index == 2**64 - 1


@pytest.mark.parametrize("args", [(-1, 0), (64, 0), ("data", 0), (0, -1), (0, 0, 0),
                                  (0, 0, 257), (True, 0), (0, 2**64)])
def test_tile_path_refuses_what_no_tile_is(args):
    with pytest.raises(TileError):
        tile_path(*args)


def test_widths_and_tiles_of_a_size_are_the_spec_examples():
    tiles = tiles_for_size(70_000)  # the spec: 273 full + 1 of 112 at level 0, ...
    assert tiles[:273] == [Tile(0, n) for n in range(273)]
    assert tiles[273:] == [Tile(0, 273, 112), Tile(1, 0), Tile(1, 1, 17), Tile(2, 0, 1)]
    assert tiles_for_size(256) == [Tile(0, 0), Tile(1, 0, 1)]
    assert tiles_for_size(0) == [] and bundles_for_size(0) == []
    assert bundles_for_size(513) == [Tile(ENTRIES, 0), Tile(ENTRIES, 1), Tile(ENTRIES, 2, 1)]
    assert tile_width(0, 273, 70_000) == 112 and tile_width(0, 274, 70_000) == 0
    assert tile_width(0, 272, 70_000) == 256 and tile_width(2, 0, 70_000) == 1
    assert tile_width(ENTRIES, 1, 300) == 44 and tile_width(3, 0, 70_000) == 0
    assert Tile(1, 2, 5).positions == range(512, 517) and Tile(1, 2).tree_level == 8


def test_entry_bundles():
    entries = [b"", b"a", b"x" * 300, bytes(range(256)), b"\x00" * 0xFFFF]
    data = encode_entry_bundle(entries)
    assert data[:5] == b"\x00\x00\x00\x01a"
    assert decode_entry_bundle(data) == entries
    assert decode_entry_bundle(data, 5) == entries
    assert decode_entry_bundle(b"") == []
    with pytest.raises(TileError, match="not 4"):
        decode_entry_bundle(data, 4)
    with pytest.raises(TileError, match="inside entry 0's length"):
        decode_entry_bundle(b"\x00")
    with pytest.raises(TileError, match="3 bytes announced, 2 left"):
        decode_entry_bundle(b"\x00\x03ab")
    with pytest.raises(TileError, match="at most 65535"):
        encode_entry_bundle([b"x" * 0x10000])
    with pytest.raises(TileError, match="not bytes"):
        encode_entry_bundle(["text"])


def _entries(n):
    return [b"entry %d " % i + hashlib.sha256(b"%d" % i).digest() for i in range(n)]


class Served:
    """A log as a tlog-tiles server would serve it for one size: every hash tile and bundle
    of that size (full and partial), from the perfect subtree hashes a store keeps."""

    def __init__(self, entries, size=None):
        size = len(entries) if size is None else size
        self.nodes = {(lv, i): h for lv, i, h in CompactRange().extend_nodes(
            leaf_hash(e) for e in entries[:size])}
        self.entries = entries
        self.size = size
        self.fetched = []

    def __call__(self, path):
        self.fetched.append(path)
        tile = parse_tile_path(path)
        if tile.width > tile_width(tile.level, tile.index, self.size):
            raise LookupError(f"404 {path}")
        if tile.level == ENTRIES:
            return encode_entry_bundle(self.entries[i] for i in tile.positions)
        return b"".join(self.nodes[(tile.tree_level, i)] for i in tile.positions)


@pytest.mark.parametrize("size", [0, 1, 2, 3, 255, 256, 257, 511, 512, 1000, 65535, 65536, 65537])
def test_roots_from_tiles_are_the_tree_roots(size):
    entries = _entries(size)
    tree = MerkleTree([leaf_hash(e) for e in entries]) if size else None
    served = Served(entries)
    reader = TileReader(served, size)
    assert reader.root() == (tree.root() if size else EMPTY_ROOT)
    assert reader.entries(reader.root()) == entries
    for smaller in {0, min(1, size), size // 2, max(size - 1, 0), size}:
        assert root_at(smaller, reader.read_tile) == (tree.root(smaller) if smaller else
                                                      EMPTY_ROOT)
    if size:
        last = size - 1
        assert reader.hash_at(0, last) == leaf_hash(entries[last])
        assert hash_at(0, last, reader.read_tile) == leaf_hash(entries[last])
    if size >= 512:
        assert reader.hash_at(9, 0) == tree.root(512)
        assert reader.hash_at(8, 1) == served.nodes[(8, 1)]


def test_a_large_tree_root_and_every_size_near_its_tile_edges():
    entries = _entries(70_000)
    served = Served(entries)
    tree = MerkleTree([leaf_hash(e) for e in entries])
    reader = TileReader(served, 70_000)
    assert reader.root() == tree.root()
    for size in (65535, 65536, 65537, 69887, 69888, 69889, 69999):
        assert reader.root(size) == tree.root(size)
    # Every tile asked for is one the spec says the log serves for this size.
    assert set(served.fetched) <= {t.path for t in tiles_for_size(70_000)}


def test_the_reader_asks_for_the_partial_tiles_of_its_size():
    served = Served(_entries(600))
    TileReader(served, 600).root()
    # 600 = 512 + 64 + 16 + 8: node (9, 0) from two level-1 hashes, the rest from the
    # partial level-0 tile; each tile once.
    assert served.fetched == ["tile/1/000.p/2", "tile/0/002.p/88"]
    served.fetched.clear()
    TileReader(served, 600).entries(TileReader(served, 600).root())
    assert [p for p in served.fetched if "entries" in p] == [
        "tile/entries/000", "tile/entries/001", "tile/entries/002.p/88"]


def test_a_tree_that_is_not_the_root_is_refused():
    entries = _entries(300)
    served = Served(entries)
    reader = TileReader(served, 300)
    root = reader.root()
    reader.verify_root(root)
    with pytest.raises(TileError, match="do not lead to its root"):
        reader.verify_root(bytes(32))
    with pytest.raises(TileError, match="do not hash to the root"):
        reader.entries(bytes(32))

    lying = list(entries)
    lying[299] = b"another entry"
    served.entries = lying
    with pytest.raises(TileError, match="do not hash to the root"):
        TileReader(served, 300).entries(root)


def test_a_tile_of_the_wrong_length_or_beyond_the_tree_is_refused():
    def short(path):
        return bytes(31)

    with pytest.raises(TileError, match="tile/0/000.p/5: 31 bytes served"):
        TileReader(short, 5).root()
    with pytest.raises(TileError, match="has no tile 0/1"):
        TileReader(short, 5).read_tile(0, 1)
    with pytest.raises(TileError, match="has no entry bundle 1"):
        TileReader(short, 5).read_bundle(1)
    with pytest.raises(TileError, match="tile/entries/000.p/5: the entry bundle holds 1"):
        TileReader(lambda path: encode_entry_bundle([b"x"]), 5).read_bundle(0)
    with pytest.raises(TileError, match="holds 2 hashes; node \\(1, 1\\) needs 4"):
        hash_at(1, 1, lambda level, index: bytes(64))
    with pytest.raises(TileError, match="size must be"):
        TileReader(short, 5).root(6)
