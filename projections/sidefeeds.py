"""The roles of the side topics: ``<prefix>.checkpoints`` (signed stream checkpoints and
their cosignatures, :class:`CheckpointStore`) and ``<prefix>.erasures`` (signed erasure
receipts, :class:`ErasureStore`), and what a rebuild compares of each.

A batch of a side topic takes the steps of a batch of the log (:mod:`projections.store`):
the live row shared, its own positions (in the same ``positions`` table, keyed by topic)
locked and checked (:func:`open_side_batch`), its rows written, its findings stored with
their position in the detail, its positions moved, in one transaction.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, NamedTuple

from evidence_contract.chain import Finding

from . import tlog
from .fold import Folded
from .pg import Connection, bounds_array, errors, insert_findings, lock_positions, move_positions
from .trees import TreeStore

__all__ = ["CheckpointStore", "ErasureStore", "SideBatch", "open_side_batch"]

SideMessages = list[tuple[int, int, list]]
"""A side topic's batch: ``(partition, offset, decoded items)`` per message."""


class SideBatch(NamedTuple):
    """A side topic's batch, opened (:func:`open_side_batch`)."""

    parts: list[int]
    """Its partitions, sorted, their positions locked."""
    findings: list[Finding]
    """The decode findings: fills as ``items`` is iterated, so findings the caller appends
    between items keep the log order."""
    next_offsets: dict[int, int]
    items: Iterator[Any]
    """The decoded items that are not findings, in log order."""


def open_side_batch(db: Connection, gen: str, topic: str, expected: Mapping[int, int],
                    messages: SideMessages, *, follow_live: bool) -> SideBatch:
    """Inside a batch of a side topic, steps 1 and 2: the live generation shared (when
    ``follow_live``), ``topic``'s positions locked and checked."""
    if follow_live:
        db.share_live(gen)
    parts = lock_positions(db.conn, gen, topic, expected)
    ordered = sorted(messages, key=lambda m: (m[0], m[1]))
    next_offsets = {partition: offset + 1 for partition, offset, _items in ordered}
    findings: list[Finding] = []

    def items() -> Iterator[Any]:
        for _partition, _offset, decoded in ordered:
            for item in decoded:
                if isinstance(item, Finding):
                    findings.append(item)
                else:
                    yield item

    return SideBatch(parts, findings, next_offsets, items())


def close_side_batch(db: Connection, gen: str, topic: str, batch: SideBatch,
                     expected: Mapping[int, int], reached: Mapping[int, int],
                     watermarks: Mapping[int, int]) -> Folded:
    """Inside a batch of a side topic, last: its findings stored, its positions moved;
    returns the findings and next offsets (``rows`` and ``heads`` empty)."""
    insert_findings(db.conn, gen, batch.findings, topic)
    nxt = move_positions(db.conn, gen, topic, batch.parts, expected, batch.next_offsets,
                         reached, watermarks)
    return Folded([], {}, batch.findings, nxt)


class CheckpointStore:
    """``<prefix>.checkpoints`` on the shared :class:`~projections.pg.Connection` ``db``; a
    checkpoint is checked against ``trees``."""

    def __init__(self, db: Connection, trees: TreeStore) -> None:
        self.db = db
        self.trees = trees

    def apply_checkpoints(self, gen: str, topic: str, expected: Mapping[int, int],
                          messages: SideMessages, reached: Mapping[int, int],
                          watermarks: Mapping[int, int], *, follow_live: bool) -> Folded:
        """Write one batch of ``evidence.checkpoints`` in one transaction, as
        :meth:`projections.records.RecordStore.apply` does the log's. ``messages`` are
        ``(partition, offset, projections.tlog.decode_checkpoint items)``. A checkpoint is
        checked against the tree at once when the tree has reached its size, else when a
        later batch of records gets it there."""
        with self.db.transaction():
            batch = open_side_batch(self.db, gen, topic, expected, messages,
                                    follow_live=follow_live)
            new_cps: list[tuple] = []
            for item in batch.items:
                if isinstance(item, tlog.CheckpointRow):
                    # Stored unless its size is: a new one is checked below; one of a stored
                    # size with another root is a conflict.
                    stored = self.db.conn.execute(
                        f'insert into "{gen}".checkpoints as c (stream, tree_size, root, '
                        f"note, log_partition, log_offset) values (%s, %s, %s, %s, %s, %s) "
                        f"on conflict (stream, tree_size) do update set stream = c.stream "
                        f"returning root, log_partition, log_offset",
                        (item.stream, item.tree_size, item.root, item.note, item.partition,
                         item.offset)).fetchone()
                    if (stored[1], stored[2]) == (item.partition, item.offset):
                        new_cps.append((item.stream, item.tree_size, item.root,
                                        item.partition, item.offset))
                    elif bytes(stored[0]) != item.root:
                        batch.findings.append(Finding(
                            tlog.CHECKPOINT_CONFLICT, item.stream, item.tree_size,
                            f"two checkpoints of size {item.tree_size} with different "
                            f"roots: {bytes(stored[0]).hex()} (at {stored[1]}/{stored[2]}) "
                            f"and {item.root.hex()}", item.partition, item.offset))
                else:
                    self.db.conn.execute(
                        f'insert into "{gen}".cosignatures (stream, tree_size, witness, '
                        f"key_id, timestamp, line, log_partition, log_offset) "
                        f"values (%s, %s, %s, %s, %s, %s, %s, %s) on conflict do nothing",
                        (item.stream, item.tree_size, item.witness, item.key_id,
                         item.timestamp, item.line, item.partition, item.offset))
            if new_cps:
                sizes = self.trees.sizes(gen, sorted({c[0] for c in new_cps}))
                batch.findings.extend(self.trees.check_roots(
                    gen, [c for c in new_cps if c[1] <= sizes.get(c[0], 0)]))
            return close_side_batch(self.db, gen, topic, batch, expected, reached, watermarks)

    def checkpoint_keys(self, gen: str, bounds: Mapping[int, int]
                        ) -> dict[tuple[str, int], tuple[bytes, bool | None]] | None:
        """The checkpoints below ``bounds`` (of the checkpoints topic):
        (stream, size) -> (root, root_matches); None for a generation without them."""
        with errors("list checkpoints"):
            if not self.db.has_table(gen, "trees"):
                return None
            return {(r[0], r[1]): (bytes(r[2]), r[3]) for r in self.db.conn.execute(
                f'select stream, tree_size, root, root_matches from "{gen}".checkpoints '
                f"where log_offset < (%s::bigint[])[log_partition + 1]",
                (bounds_array(bounds),))}


class ErasureStore:
    """``<prefix>.erasures`` on the shared :class:`~projections.pg.Connection` ``db``."""

    def __init__(self, db: Connection) -> None:
        self.db = db

    def apply_erasures(self, gen: str, topic: str, expected: Mapping[int, int],
                       messages: SideMessages, reached: Mapping[int, int],
                       watermarks: Mapping[int, int], *, follow_live: bool) -> Folded:
        """Write one batch of ``evidence.erasures`` in one transaction, as
        :meth:`CheckpointStore.apply_checkpoints` does. ``messages`` are ``(partition,
        offset, projections.erasures.decode_receipt items)``; a receipt seen again (same
        request and key id) is kept once."""
        with self.db.transaction():
            batch = open_side_batch(self.db, gen, topic, expected, messages,
                                    follow_live=follow_live)
            rows: list[tuple] = []
            for item in batch.items:
                rows += item.rows()
            if rows:
                with self.db.conn.cursor() as cur:
                    cur.executemany(
                        f'insert into "{gen}".erasures (request_id, key_id, erased_at, '
                        f"erased_at_us, note, log_partition, log_offset, reason) values "
                        f"(%s, %s, to_timestamp(%s::float8 / 1e6), %s, %s, %s, %s, %s) "
                        f"on conflict do nothing",
                        [(rid, k, at, at, note, p, o, reason)
                         for rid, k, at, note, p, o, reason in rows])
            return close_side_batch(self.db, gen, topic, batch, expected, reached, watermarks)

    def erasure_keys(self, gen: str, bounds: Mapping[int, int]
                     ) -> set[tuple[str, bytes | None, int]] | None:
        """The erasures below ``bounds`` (of the erasures topic) as (request_id, key_id,
        erased_at_us); None for a generation without the table."""
        with errors("list erasures"):
            if not self.db.has_table(gen, "erasures"):
                return None
            return {(r[0], bytes(r[1]) if r[1] is not None else None, r[2])
                    for r in self.db.conn.execute(
                        f'select request_id, key_id, erased_at_us from "{gen}".erasures '
                        f"where log_offset < (%s::bigint[])[log_partition + 1]",
                        (bounds_array(bounds),))}
