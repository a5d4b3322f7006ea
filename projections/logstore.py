"""The deployment log's role: ``<prefix>.tree`` (one partition) folded into ``log_entries``,
``log_nodes``, ``log_checkpoints`` and ``log_cosignatures`` (:mod:`projections.logtree` is
the pure part), and what a rebuild compares of them.

An entry's ``idx`` is its rank in the tree: a batch's entries extend the tree from its stored
size, their nodes by binary COPY; every deployment checkpoint the tree has reached is checked
against the root recomputed from the stored nodes (``root_matches``).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from evidence_contract.chain import Finding
from evidence_contract.merkle import CompactRange, range_nodes, root_from, root_nodes

from . import logtree
from .fold import Folded
from .pg import Connection, errors
from .sidefeeds import SideMessages, close_side_batch, open_side_batch

__all__ = ["DeploymentLogStore"]


class DeploymentLogStore:
    """The deployment log on the shared :class:`~projections.pg.Connection` ``db``."""

    def __init__(self, db: Connection) -> None:
        self.db = db

    def apply_log(self, gen: str, topic: str, expected: Mapping[int, int],
                  messages: SideMessages, reached: Mapping[int, int],
                  watermarks: Mapping[int, int], *, follow_live: bool) -> Folded:
        """Write one batch of ``<prefix>.tree`` in one transaction, as
        :meth:`projections.sidefeeds.CheckpointStore.apply_checkpoints` does. ``messages``
        are ``(partition, offset, projections.logtree.decode_tree_message items)``. The
        entries extend the tree; then the deployment checkpoints and cosignatures are
        stored, and every checkpoint the tree has now reached is checked. A second
        checkpoint of one size with another root is a ``checkpoint_conflict`` finding and
        is not stored, nor are the cosignatures of it."""
        conn = self.db.conn
        with self.db.transaction():
            batch = open_side_batch(self.db, gen, topic, expected, messages,
                                    follow_live=follow_live)
            items = list(batch.items)  # the decode findings are in batch.findings from here
            entries = [i for i in items if isinstance(i, logtree.Entry)]
            size: int | None = None
            if entries:
                grown = logtree.grow_log(self._range(gen), entries)
                self._write(gen, grown)
                size = grown.tree.size
            roots: dict[int, bytes] = {}  # the stored root of each size this batch names
            checked = False
            for item in items:
                if isinstance(item, logtree.LogCheckpointRow):
                    stored = conn.execute(
                        f'insert into "{gen}".log_checkpoints as c (tree_size, root, note, '
                        f"log_offset) values (%s, %s, %s, %s) on conflict (tree_size) do "
                        f"update set tree_size = c.tree_size returning root, log_offset",
                        (item.tree_size, item.root, item.note, item.offset)).fetchone()
                    roots[item.tree_size] = bytes(stored[0])
                    if stored[1] == item.offset:
                        checked = True
                    elif bytes(stored[0]) != item.root:
                        batch.findings.append(Finding(
                            logtree.CHECKPOINT_CONFLICT, None, item.tree_size,
                            f"two deployment checkpoints of size {item.tree_size} with "
                            f"different roots: {bytes(stored[0]).hex()} (at offset "
                            f"{stored[1]}) and {item.root.hex()}", logtree.PARTITION,
                            item.offset))
                elif isinstance(item, logtree.LogCosignatureRow):
                    if roots.get(item.tree_size) != item.root:
                        continue  # of a checkpoint not stored (a conflict, found above)
                    conn.execute(
                        f'insert into "{gen}".log_cosignatures (tree_size, witness, key_id, '
                        f"timestamp, line, log_offset) values (%s, %s, %s, %s, %s, %s) "
                        f"on conflict do nothing",
                        (item.tree_size, item.witness, item.key_id, item.timestamp,
                         item.line, item.offset))
            if entries or checked:
                batch.findings.extend(self._check_roots(gen, size))
            return close_side_batch(self.db, gen, topic, batch, expected, reached, watermarks)

    def _size(self, gen: str) -> int:
        return int(self.db.conn.execute(
            f'select coalesce(max(idx) + 1, 0) from "{gen}".log_entries').fetchone()[0])

    def _nodes(self, gen: str, wanted: Iterable[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        wanted = list(dict.fromkeys(wanted))
        if not wanted:
            return {}
        rows = self.db.conn.execute(
            f'select n.level, n.idx, n.hash from "{gen}".log_nodes n '
            f"join unnest(%s::int[], %s::bigint[]) w(level, idx) "
            f"on n.level = w.level and n.idx = w.idx",
            ([w[0] for w in wanted], [w[1] for w in wanted])).fetchall()
        return {(r[0], r[1]): bytes(r[2]) for r in rows}

    def _range(self, gen: str) -> CompactRange:
        """The deployment tree as stored: its size and the nodes that make up its range."""
        size = self._size(gen)
        nodes = self._nodes(gen, range_nodes(size))
        return CompactRange.from_lookup(size, lambda lv, i: nodes[(lv, i)])

    def _roots_at(self, gen: str, sizes: Iterable[int]) -> dict[int, bytes]:
        """The deployment tree's root at each of ``sizes`` from the stored nodes, in one
        query; a size the stored tree does not reach is left out."""
        sizes = list(dict.fromkeys(sizes))
        nodes = self._nodes(gen, [n for size in sizes for n in root_nodes(size)])
        out = {}
        for size in sizes:
            try:
                out[size] = root_from(size, lambda lv, i: nodes[(lv, i)])
            except KeyError:
                continue
        return out

    def _write(self, gen: str, grown: logtree.LogGrown) -> None:
        """Inside a batch: the entries and the nodes they complete (binary COPY each)."""
        with self.db.conn.cursor() as cur:
            with cur.copy(f'copy "{gen}".log_entries (idx, stream, tree_size, entry, '
                          f"log_offset) from stdin (format binary)") as copy:
                copy.set_types(("int8", "text", "int8", "bytea", "int8"))
                for row in grown.entries:
                    copy.write_row(row)
            with cur.copy(f'copy "{gen}".log_nodes (level, idx, hash) '
                          f"from stdin (format binary)") as copy:
                copy.set_types(("int2", "int8", "bytea"))
                for node in grown.nodes:
                    copy.write_row(node)

    def _check_roots(self, gen: str, size: int | None) -> list[Finding]:
        """Check the stored deployment checkpoints the tree (of ``size`` entries; None: as
        stored) has reached and not yet checked; record the verdicts; return the
        mismatches as findings."""
        if size is None:
            size = self._size(gen)
        pending = self.db.conn.execute(
            f'select tree_size, root, log_offset from "{gen}".log_checkpoints '
            f"where root_matches is null and tree_size <= %s order by tree_size",
            (size,)).fetchall()
        if not pending:
            return []
        roots = self._roots_at(gen, [r[0] for r in pending])
        findings, verdicts = [], []
        for n, root, offset in pending:
            tree_root = roots.get(n)
            if tree_root is None:
                continue
            f = logtree.check_root(n, bytes(root), offset, tree_root)
            verdicts.append((f is None, n))
            if f is not None:
                findings.append(f)
        if verdicts:
            with self.db.conn.cursor() as cur:
                cur.executemany(f'update "{gen}".log_checkpoints set root_matches = %s '
                                f"where tree_size = %s", verdicts)
        return findings

    def log_keys(self, gen: str, bound: int) -> dict[str, Any] | None:
        """What a rebuild compares of ``gen``'s deployment log below offset ``bound`` of the
        tree topic: ``entries`` (count and sha256 over each entry row in order), ``root``
        (the stored tree's root at the count), ``checkpoints`` (size -> (root,
        root_matches)) and ``cosignatures`` (a set of (size, witness, key id, timestamp,
        line)); None for a generation without the tables."""
        conn = self.db.conn
        with errors("list the deployment log"):
            if not self.db.has_table(gen, "log_entries"):
                return None
            count, digest = conn.execute(
                f"select count(*), sha256(coalesce(string_agg(int8send(idx) || "
                f"sha256(convert_to(stream, 'UTF8')) || int8send(tree_size) || "
                f"sha256(entry) || int8send(log_offset), ''::bytea order by idx), ''::bytea)) "
                f'from "{gen}".log_entries where log_offset < %s', (bound,)).fetchone()
            return {
                "entries": (int(count), bytes(digest)),
                "root": self._roots_at(gen, [int(count)]).get(int(count)),
                "checkpoints": {r[0]: (bytes(r[1]), r[2]) for r in conn.execute(
                    f'select tree_size, root, root_matches from "{gen}".log_checkpoints '
                    f"where log_offset < %s", (bound,))},
                "cosignatures": {tuple(r) for r in conn.execute(
                    f"select tree_size, witness, key_id, timestamp, line "
                    f'from "{gen}".log_cosignatures where log_offset < %s', (bound,))},
            }
