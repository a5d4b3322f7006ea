"""The trees role: each stream's Merkle tree (:mod:`projections.tlog`) as stored nodes.

``tree_nodes`` holds every node a stream's tree completed (by binary COPY, about two a
record), ``trees`` each stream's size and root. From the stored nodes a tree's root at any
size it reached is recomputed (:meth:`TreeStore.roots_at`), which is how a checkpoint is
checked when the tree reaches its size and how a rebuild compares two generations' trees.
"""

from __future__ import annotations

import struct
from typing import Iterable, Mapping

from evidence_contract.chain import Finding
from evidence_contract.merkle import CompactRange, range_nodes, root_from, root_nodes

from . import tlog
from .fastrows import COPY_SIGNATURE, COPY_TRAILER
from .fold import Message, Record
from .kept import Kept
from .pg import Connection, errors

__all__ = ["TreeStore", "node_tuples"]

_NODE_FIELDS = struct.Struct(">ihiqi")  # int2 level (length 2), int8 idx (8), bytea length


def node_tuples(nodes: Iterable[tuple[str, int, int, bytes]]) -> bytes:
    """The binary COPY data (signature, tuples, trailer) of ``tree_nodes`` rows
    ``(stream, level, idx, hash)``: per tuple the field count, then each field's length and
    bytes (text as UTF-8, int2 and int8 big-endian), as psycopg's ``write_row`` writes them."""
    out = bytearray(COPY_SIGNATURE)
    heads: dict[str, bytes] = {}
    pack = _NODE_FIELDS.pack
    for stream, level, idx, digest in nodes:
        head = heads.get(stream)
        if head is None:
            b = stream.encode("utf-8")
            head = heads[stream] = b"\x00\x04" + len(b).to_bytes(4, "big") + b
        out += head
        out += pack(2, level, 8, idx, len(digest))
        out += digest
    out += COPY_TRAILER
    return bytes(out)


class TreeStore:
    """The streams' trees on the shared :class:`~projections.pg.Connection` ``db``; the
    ranges a live batch grows are kept between batches (``kept_ranges``,
    :class:`~projections.kept.Kept`)."""

    def __init__(self, db: Connection) -> None:
        self.db = db
        self.kept_ranges: Kept[CompactRange] = Kept()

    def _nodes(self, gen: str, wanted: Iterable[tuple[str, int, int]]
               ) -> dict[tuple[str, int, int], bytes]:
        wanted = list(dict.fromkeys(wanted))
        if not wanted:
            return {}
        rows = self.db.conn.execute(
            f'select n.stream, n.level, n.idx, n.hash from "{gen}".tree_nodes n '
            f"join unnest(%s::text[], %s::int[], %s::bigint[]) w(stream, level, idx) "
            f"on n.stream = w.stream and n.level = w.level and n.idx = w.idx",
            ([w[0] for w in wanted], [w[1] for w in wanted], [w[2] for w in wanted])).fetchall()
        return {(r[0], r[1], r[2]): bytes(r[3]) for r in rows}

    def roots_at(self, gen: str, wants: Iterable[tuple[str, int]]) -> dict[tuple[str, int], bytes]:
        """The tree root of each (stream, size) from the stored nodes, in one query; a size the
        stored tree does not reach is left out."""
        wants = list(dict.fromkeys(wants))
        nodes = self._nodes(gen, [(s, lv, i) for s, n in wants for lv, i in root_nodes(n)])
        out = {}
        for stream, size in wants:
            try:
                out[(stream, size)] = root_from(size, lambda lv, i: nodes[(stream, lv, i)])
            except KeyError:
                continue
        return out

    def ranges(self, gen: str, streams: list[str]) -> dict[str, CompactRange]:
        """Each of ``streams``' tree as stored, as a compact range to grow."""
        sizes = self.sizes(gen, streams)
        nodes = self._nodes(gen, [(s, lv, i) for s, n in sizes.items()
                                  for lv, i in range_nodes(n)])
        return {s: CompactRange.from_lookup(n, lambda lv, i, s=s: nodes[(s, lv, i)])
                for s, n in sizes.items()}

    def grow(self, gen: str, decoded: list[Message],
             expected: Mapping[int, int] | None = None) -> list[Finding]:
        """Inside a batch: append its records to the streams' trees (nodes by binary COPY,
        sizes and roots upserted), then check the checkpoints that were waiting for the
        trees to reach their size. Returns the ``checkpoint_mismatch`` findings.

        ``expected``: where the batch found its partitions (locked); the ranges kept for them
        are used rather than read, and the grown ones staged for :meth:`Kept.commit`."""
        records = sorted((m for m in decoded if isinstance(m, Record)),
                         key=lambda m: (m.partition, m.offset))
        if not records:
            return []
        homes = {m.stream: m.partition for m in records}
        ranges = self.kept_ranges.get(gen, homes, expected) if expected is not None else {}
        missing = sorted(s for s in homes if s not in ranges)
        if missing:
            ranges.update(self.ranges(gen, missing))
        grown = tlog.grow(ranges, [m.row for m in records],
                          [getattr(m, "leaf", None) for m in records])
        if expected is not None:
            after = {**ranges, **grown.trees}
            self.kept_ranges.stage(gen, {s: (homes[s], cr) for s, cr in after.items()})
        if not grown.trees:
            return []
        return self.check_roots(gen, self.write(gen, grown, waiting=True))

    def write(self, gen: str, grown: tlog.Grown, *, waiting: bool = False) -> list[tuple]:
        """Inside a batch: the nodes ``grown`` completes (binary COPY), and the new size and
        root of each stream that grew. ``waiting``: also return the checkpoints of those
        streams that wait for a verdict and that their trees now reach, ``(stream,
        tree_size, root, partition, offset)``, read in the upsert's round trip."""
        if not grown.trees:
            return []
        conn = self.db.conn
        with conn.cursor() as cur:
            with cur.copy(f'copy "{gen}".tree_nodes (stream, level, idx, hash) '
                          f"from stdin (format binary)") as copy:
                copy.set_types(("text", "int2", "int8", "bytea"))
                if self.db.copies_natively():
                    # ~2 nodes a record: their binary COPY tuples made here in one buffer
                    # rather than a write_row each (the same bytes; see node_tuples).
                    copy.write(node_tuples(grown.nodes))
                else:
                    for node in grown.nodes:
                        copy.write_row(node)
        with conn.pipeline(), conn.cursor() as cur:
            cur.executemany(
                f'insert into "{gen}".trees (stream, size, root) values (%s, %s, %s) '
                f"on conflict (stream) do update set size = excluded.size, root = excluded.root",
                [(s, cr.size, cr.root()) for s, cr in grown.trees.items()])
            found = conn.execute(
                f"select c.stream, c.tree_size, c.root, c.log_partition, c.log_offset "
                f'from "{gen}".checkpoints c join "{gen}".trees t on t.stream = c.stream '
                f"where c.root_matches is null and c.stream = any(%s) "
                f"and c.tree_size <= t.size", (sorted(grown.trees),)) if waiting else None
        return [tuple(r) for r in found.fetchall()] if found is not None else []

    def check_roots(self, gen: str, cps: list[tuple]) -> list[Finding]:
        """Check stored checkpoints ``(stream, tree_size, root, partition, offset)`` against
        the tree; records whether each matched; returns the mismatches as findings."""
        if not cps:
            return []
        roots = self.roots_at(gen, [(c[0], c[1]) for c in cps])
        findings, verdicts = [], []
        for cp in cps:
            root = roots.get((cp[0], cp[1]))
            if root is None:
                continue  # the stored tree lacks nodes (an old generation): stays unchecked
            f = tlog.check_root(cp, root)
            verdicts.append((cp[0], cp[1], f is None))
            if f is not None:
                findings.append(f)
        if verdicts:
            with self.db.conn.cursor() as cur:
                cur.executemany(f'update "{gen}".checkpoints set root_matches = %s '
                                f"where stream = %s and tree_size = %s",
                                [(ok, s, n) for s, n, ok in verdicts])
        return findings

    def sizes(self, gen: str, streams: list[str] | None = None) -> dict[str, int]:
        """The stored size of each of ``streams``' trees (None: of every stream's)."""
        if streams is None:
            return dict(self.db.conn.execute(f'select stream, size from "{gen}".trees'))
        return dict(self.db.conn.execute(
            f'select stream, size from "{gen}".trees where stream = any(%s)', (streams,)))

    # -- what a rebuild compares ------------------------------------------------------------

    def tree_sizes(self, gen: str) -> dict[str, int] | None:
        """Every stream's projected tree size; None for a generation without trees."""
        with errors("tree sizes"):
            if not self.db.has_table(gen, "trees"):
                return None
            return self.sizes(gen)

    def tree_roots(self, gen: str, sizes: Mapping[str, int]) -> dict[str, bytes]:
        """Per stream, the root of ``gen``'s tree at ``sizes[stream]`` (absent if it does not
        reach it), from ``gen``'s own stored nodes."""
        with errors("tree roots"):
            if not self.db.has_table(gen, "trees"):
                return {}
            roots = self.roots_at(gen, sizes.items())
        return {s: r for (s, _n), r in roots.items()}
