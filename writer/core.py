"""The writer's pure core: validate a capture, seal it after its stream head, absorb duplicates.

No Kafka, no clock reads (callers pass ``now``), no I/O: every function takes bytes and values
and returns values, so the rules are unit-tested without a broker (compute, then persist).
``writer.service`` feeds it intake messages and writes what it returns.

- :func:`validate` — intake bytes + key → :class:`Capture` or :class:`Rejection`.
- :func:`seal_capture` — capture + :class:`Head` → (sealed EvidenceRecord bytes, new head).
  (These two, the head encoding and the compiled path's self-check are in
  :mod:`writer.capture`, where :mod:`writer.native` reaches them; re-exported here.)
- :class:`DedupWindow` — recently sealed event_ids, bounded by age and by count.
- :class:`Sealer` — per-partition heads and windows, with a per-transaction overlay that
  becomes real on :meth:`Sealer.commit` and vanishes on :meth:`Sealer.abort`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from evidence_contract.chain import Head
from evidence_contract.topics import partition_for
from writer.capture import (
    HEADROOM_BYTES,
    Capture,
    Rejection,
    decode_head,
    decode_head_state,
    encode_head,
    reject,
    seal_capture,
    self_check,
    validate,
)
from writer.checkpoints import StreamTree, Trees, TreeState, record_leaf
from writer.erasures import Receipts
from writer.native import kernel as native_kernel
from writer.reasons import Reason

__all__ = [
    "HEADROOM_BYTES",
    "Capture",
    "DedupWindow",
    "Duplicate",
    "Head",
    "Rejection",
    "Sealed",
    "Sealer",
    "decode_head",
    "decode_head_state",
    "encode_head",
    "seal_capture",
    "self_check",
    "validate",
]

class DedupWindow:
    """Event ids sealed recently, bounded by age (``max_age_us``) and by count (``max_ids``).

    Ids are kept in insertion order, which is seal order, so expiry pops from the front.
    A capture retried after the window has passed would be sealed again; the window is the
    documented limit of deduplication.
    """

    def __init__(self, max_age_us: int, max_ids: int) -> None:
        if max_age_us <= 0 or max_ids <= 0:
            raise ValueError("dedup window bounds must be positive")
        self.max_age_us = max_age_us
        self.max_ids = max_ids
        self._ids: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, event_id: str) -> bool:
        return event_id in self._ids

    def add(self, event_id: str, at_micros: int) -> None:
        """Remember ``event_id`` as sealed at ``at_micros``; evicts what falls out of bounds."""
        self._ids[event_id] = at_micros
        self._ids.move_to_end(event_id)
        self.expire(at_micros)

    def add_all(self, sealed: Mapping[str, int]) -> None:
        """:meth:`add` each ``event_id -> at_micros`` of ``sealed`` in order (a transaction's
        ids, in seal order), expiring once, at the last one's time. The same ids remain as
        after an ``add`` each when the times do not go down; when they do (a stream whose
        head is ahead of the clock), it keeps ids an ``add`` each would have expired by age,
        never fewer: deduplication errs towards absorbing a retry. The count bound is
        exact either way."""
        ids = self._ids
        last = None
        for event_id, at in sealed.items():
            if event_id in ids:
                ids.move_to_end(event_id)
            ids[event_id] = at
            last = at
        if last is not None:
            self.expire(last)

    def expire(self, now_micros: int) -> None:
        """Drop ids older than the window and the oldest ids beyond the count bound."""
        ids, horizon = self._ids, now_micros - self.max_age_us
        while ids and (len(ids) > self.max_ids or next(iter(ids.values())) < horizon):
            ids.popitem(last=False)


@dataclass(slots=True)
class Sealed:
    """A capture sealed in the open transaction. Treated as immutable, but not ``frozen``:
    one is made per record sealed, and a frozen dataclass costs ~3 us more to make."""

    record: bytes
    head: Head
    reencoded: bool


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A capture whose event_id was already sealed on this partition: absorbed, not sealed."""

    stream: str
    event_id: str


@dataclass
class _Partition:
    heads: dict[str, Head]
    window: DedupWindow


@dataclass
class _Pending:
    heads: dict[tuple[int, str], Head] = field(default_factory=dict)
    ids: dict[int, dict[str, int]] = field(default_factory=dict)


class Sealer:
    """Stream heads and dedup windows of the partitions this writer owns.

    Changes made while a transaction is open live in an overlay: :meth:`commit` applies it
    once Kafka has committed the transaction, :meth:`abort` forgets it, so after an abort
    the state is exactly what the last committed transaction left (no head re-reading).
    """

    def __init__(self, writer: dict[str, str], max_message_bytes: int,
                 dedup_max_age_us: int, dedup_max_ids: int,
                 partitions: int | None = None, trees: Trees | None = None,
                 native: bool | None = None) -> None:
        self.writer = dict(writer)
        self.kernel = native_kernel(self.writer, native)
        """The compiled seal path (``writer.native``; None: the pure path only). ``native``:
        None selects by ``EVIDENCE_NATIVE``, False never, True always (or raises)."""
        self._merge = None if self.kernel is None else self.kernel.append_leaf
        self._limit = max_message_bytes - HEADROOM_BYTES
        self._homes: dict[str, int] = {}  # stream -> its intake partition
        self.trees = trees if trees is not None else Trees()
        """Each stream's Merkle tree and checkpoints, staged with the same transactions."""
        self.receipts = Receipts()
        """The erasure requests receipted per partition, staged with the same transactions."""
        self.max_message_bytes = max_message_bytes
        self.partitions = partitions
        """The intake partition count; when given, a capture must be on its stream's
        partition (``evidence_contract.topics.partition_for``)."""
        self.dedup_max_age_us = dedup_max_age_us
        self.dedup_max_ids = dedup_max_ids
        self._parts: dict[int, _Partition] = {}
        self._pending = _Pending()

    # -- ownership -------------------------------------------------------------------------
    def new_window(self) -> DedupWindow:
        return DedupWindow(self.dedup_max_age_us, self.dedup_max_ids)

    def assign(self, partition: int, heads: dict[str, Head], window: DedupWindow,
               trees: dict[str, StreamTree] | None = None) -> None:
        """Take ownership of ``partition`` with its restored heads, dedup window and trees
        (each at its head; a stream without one is never signed)."""
        trees = dict(trees or {})
        for stream, head in heads.items():
            tree = trees.get(stream)
            if tree is None:
                trees[stream] = StreamTree(refused="no tree was restored", stored=TreeState())
            elif not tree.refused and tree.range.size != head.seq:
                raise ValueError(f"stream {stream!r}: tree of {tree.range.size} leaves, head "
                                 f"at {head.seq}")
        self._parts[partition] = _Partition(dict(heads), window)
        self.trees.assign(partition, trees)

    def revoke(self, partition: int) -> None:
        self._parts.pop(partition, None)
        self.trees.revoke(partition)
        self.receipts.revoke(partition)

    def owns(self, partition: int) -> bool:
        return partition in self._parts

    def owned(self) -> list[int]:
        """The partitions this writer owns, ascending."""
        return sorted(self._parts)

    def head(self, partition: int, stream: str) -> Head:
        h = self._pending.heads.get((partition, stream))
        if h is not None:
            return h
        return self._parts[partition].heads.get(stream) or Head.genesis(stream)

    # -- one message -----------------------------------------------------------------------
    def handle(self, value: bytes | None, key: bytes | None, partition: int, offset: int,
               now_micros: int) -> Sealed | Duplicate | Rejection:
        """Validate and, unless it is bad or a duplicate, seal one intake message."""
        if self.kernel is not None:
            # The compiled path takes what it can prove sealable as it came (nearly every
            # capture); it answers None for the rest, which the pure path below decides.
            got = self.kernel.check(value, key, self._limit, self.partitions or 0, partition)
            if got is not None:
                return self._seal_native(got, value, partition, offset, now_micros)
        checked = validate(value, key, self.max_message_bytes)
        if isinstance(checked, Rejection):
            return checked
        if self.partitions is not None:
            home = self._homes.get(checked.stream)
            if home is None:
                home = self._homes[checked.stream] = partition_for(checked.stream,
                                                                   self.partitions)
            if partition != home:
                return reject(Reason.WRONG_PARTITION,
                               f"stream {checked.stream!r} belongs on intake partition {home} "
                               f"(Kafka's murmur2 keyed partitioner), not {partition}")
        part = self._parts[partition]
        pending_ids = self._pending.ids.setdefault(partition, {})
        if checked.event_id in pending_ids or checked.event_id in part.window:
            return Duplicate(checked.stream, checked.event_id)
        record, head = seal_capture(checked, self.head(partition, checked.stream), now_micros,
                                    self.writer, partition, offset)
        self._pending.heads[(partition, checked.stream)] = head
        pending_ids[checked.event_id] = head.occurred_at
        self.trees.append(partition, checked.stream, record_leaf(record, head.digest), head.seq)
        return Sealed(record, head, checked.reencoded)

    def _seal_native(self, got: tuple[str, str, bytes], value: bytes, partition: int,
                     offset: int, now_micros: int) -> Sealed | Duplicate:
        """The rest of :meth:`handle` for a capture the compiled path accepted: the same
        dedup, head, seal (``seal_capture``'s rule for seq and occurred_at) and tree append."""
        stream, event_id, record_fp = got
        part, pending = self._parts[partition], self._pending
        pending_ids = pending.ids.get(partition)
        if pending_ids is None:
            pending_ids = pending.ids[partition] = {}
        if event_id in pending_ids or event_id in part.window:
            return Duplicate(stream, event_id)
        key = (partition, stream)
        head = pending.heads.get(key) or part.heads.get(stream) or Head.genesis(stream)
        seq = head.seq + 1
        occurred_at = max(now_micros, head.occurred_at)
        record, digest, leaf = self.kernel.seal(value, record_fp, head.digest, seq, occurred_at,
                                                partition, offset)
        # What ``advance`` returns for the link this seal makes (seq = head + 1, prev = the
        # head's digest, so no finding); tests hold the two to the same heads.
        new_head = Head(stream, seq, digest, occurred_at, event_id, head.missing)
        pending.heads[key] = new_head
        pending_ids[event_id] = occurred_at
        self.trees.append(partition, stream, leaf, seq, self._merge)
        return Sealed(record, new_head, False)

    def pending_heads(self) -> dict[tuple[int, str], Head]:
        """The new head of every (partition, stream) sealed in the open transaction."""
        return dict(self._pending.heads)

    def pending_state(self) -> dict[tuple[int, str], tuple[Head, TreeState]]:
        """What writer-state gets for the open transaction: the head and persisted tree of
        every (partition, stream) sealed or checkpointed in it."""
        keys = set(self._pending.heads) | set(self.trees.pending())
        signing = self.trees.signing
        return {(p, s): (self.head(p, s), self.trees.tree(p, s).state(signing))
                for p, s in sorted(keys)}

    def commit(self) -> None:
        """The transaction committed: its heads and event ids become the state."""
        for (partition, stream), head in self._pending.heads.items():
            self._parts[partition].heads[stream] = head
        for partition, ids in self._pending.ids.items():
            self._parts[partition].window.add_all(ids)
        self._pending = _Pending()
        self.trees.commit()
        self.receipts.commit()

    def abort(self) -> None:
        """The transaction aborted: forget everything it sealed."""
        self._pending = _Pending()
        self.trees.abort()
        self.receipts.abort()
