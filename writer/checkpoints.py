"""Signed checkpoints, the writer's pure part: per-stream Merkle trees, staged like the heads.

Each (partition, stream) the writer owns has a :class:`StreamTree`: the stream's
``evidence_contract.merkle.CompactRange`` over its sealed records (leaf index = seq - 1,
leaf = ``merkle.record_leaf_hash(record bytes)``) and its last signed checkpoint. The
:class:`Trees` hold them with a per-transaction overlay, exactly as the
:class:`~writer.core.Sealer` holds the heads: what a transaction appends or signs becomes
real on :meth:`Trees.commit` and vanishes on :meth:`Trees.abort`. A stream's tree only ever
appends and a checkpoint is only signed for a size larger than the last one, so no two
checkpoints of a stream share a size and every one is consistent with the earlier ones.

When a checkpoint is due (:meth:`Trees.due`): the stream grew since its last checkpoint and
either ``interval_s`` has passed since that one (the loop asks on idle too: a timer, not only
new captures) or an intake control message asked for one (:func:`is_checkpoint_request`).

What is persisted per stream, in its WriterHead (:class:`TreeState`): while the writer signs,
the compact range *at the last checkpoint*, so that a restore re-checks those nodes against the
signed root on ``evidence.checkpoints`` and re-hashes the few records sealed since from the
log (:func:`plan_restore`); without a key, the range at the head (nothing to check it against,
and nothing to re-hash).

No Kafka, no clock reads (callers pass monotonic seconds), no file I/O: the signing key is
handed in (``writer.service`` loads it).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from evidence_contract.merkle import CompactRange, compose_leaf_input, leaf_hash
from evidence_contract.note import Checkpoint, SignerKey, format_checkpoint, format_note, sign
from evidence_contract.note import stream_origin
from evidence_contract.tlog import (
    CONTROL_HEADER,
    DEFAULT_LOG_NAME,
    KIND_CHECKPOINT,
    KIND_HEADER,
    SIZE_HEADER,
    STREAM_HEADER,
)
from evidence_contract.tlog import CONTROL_CHECKPOINT as _CONTROL_CHECKPOINT

__all__ = [
    "CONTROL_CHECKPOINT",
    "CONTROL_HEADER",
    "DEFAULT_LOG_NAME",
    "Issued",
    "RestorePlan",
    "StreamTree",
    "TreeState",
    "Trees",
    "checkpoint_headers",
    "is_checkpoint_request",
    "plan_restore",
    "record_leaf",
]

# The names are the contract's (evidence_contract.tlog); header values arrive as bytes.
CONTROL_CHECKPOINT = _CONTROL_CHECKPOINT.encode("ascii")


def record_leaf(record: bytes, record_digest: bytes) -> bytes:
    """``merkle.record_leaf_hash(record)`` for a record the writer has just sealed with
    ``record_digest``: the same leaf, without decoding the record again."""
    return leaf_hash(compose_leaf_input(record_digest, hashlib.sha256(record).digest()))


def is_checkpoint_request(headers: Iterable[tuple[str, bytes | None]] | None) -> bool:
    """Whether an intake message's headers make it a control message asking for a checkpoint
    (header ``evidence-control: checkpoint``): it is never sealed and never rejected."""
    return any(k == CONTROL_HEADER and v == CONTROL_CHECKPOINT for k, v in headers or ())


def checkpoint_headers(stream: str, size: int) -> list[tuple[str, bytes]]:
    """The headers of a ``checkpoint`` message on ``evidence.checkpoints``."""
    return [(KIND_HEADER, KIND_CHECKPOINT.encode("ascii")), (STREAM_HEADER, stream.encode("utf-8")),
            (SIZE_HEADER, str(size).encode("ascii"))]


@dataclass(frozen=True, slots=True)
class TreeState:
    """What a WriterHead persists of a stream's tree (see the module docstring)."""

    tree_size: int = 0
    nodes: tuple[bytes, ...] = ()
    checkpoint_size: int = 0

    def problem(self, seq: int) -> str:
        """Why this cannot be the state of a stream whose head is ``seq`` ("" when it can)."""
        if not 0 <= self.tree_size <= seq:
            return f"tree_size {self.tree_size} is not in [0, seq {seq}]"
        if not 0 <= self.checkpoint_size <= seq:
            return f"checkpoint_size {self.checkpoint_size} is not in [0, seq {seq}]"
        try:
            CompactRange(self.tree_size, self.nodes)
        except ValueError as e:
            return f"tree_nodes: {e}"
        return ""

    def range(self) -> CompactRange:
        return CompactRange(self.tree_size, self.nodes)


@dataclass
class StreamTree:
    """One stream's tree on one partition: the range at its head and its last checkpoint.

    ``refused`` says why this stream's tree could not be trusted on restore: it is then
    never signed (and its persisted state is kept as it was, so the next restore refuses
    again until someone looks).
    """

    range: CompactRange = field(default_factory=CompactRange)
    checkpoint_size: int = 0
    checkpoint_nodes: tuple[bytes, ...] = ()
    checkpoint_at: float | None = None
    """Monotonic seconds of the last checkpoint this process signed; None: none yet."""
    refused: str = ""
    stored: TreeState | None = None
    """For a refused stream: the state restored, persisted unchanged."""

    def copy(self) -> "StreamTree":
        return StreamTree(CompactRange(self.range.size, self.range.nodes), self.checkpoint_size,
                          self.checkpoint_nodes, self.checkpoint_at, self.refused, self.stored)

    def state(self, signing: bool) -> TreeState:
        """What the WriterHead carries for this stream."""
        if self.refused and self.stored is not None:
            return self.stored
        if signing:
            return TreeState(self.checkpoint_size, self.checkpoint_nodes, self.checkpoint_size)
        return TreeState(self.range.size, self.range.nodes, self.checkpoint_size)


@dataclass(frozen=True, slots=True)
class Issued:
    """A checkpoint signed in the open transaction: the note and where it goes."""

    partition: int
    stream: str
    size: int
    root: bytes
    note: bytes
    sign_seconds: float

    @property
    def headers(self) -> list[tuple[str, bytes]]:
        return checkpoint_headers(self.stream, self.size)


class Trees:
    """The trees of the partitions this writer owns, with a per-transaction overlay.

    ``signer`` is the log key (None: checkpoints are off, the trees are still kept so that
    turning them on later costs nothing); ``log_name`` names the log (origins are
    ``<log_name>/<stream>``); ``interval_s`` is the most time between two checkpoints of a
    stream that grew.
    """

    def __init__(self, signer: SignerKey | None = None, log_name: str = DEFAULT_LOG_NAME,
                 interval_s: float = 5.0) -> None:
        if interval_s <= 0:
            raise ValueError("the checkpoint interval must be positive")
        if signer is not None and signer.name != log_name:
            raise ValueError(f"the log key is named {signer.name!r}, the log {log_name!r}")
        self.signer = signer
        self.log_name = log_name
        self.interval_s = interval_s
        self._parts: dict[int, dict[str, StreamTree]] = {}
        self._pending: dict[tuple[int, str], StreamTree] = {}
        self._requests: set[tuple[int, str]] = set()
        self._issued: list[Issued] = []
        self._grown: set[tuple[int, str]] = set()  # committed trees past their checkpoint

    @property
    def signing(self) -> bool:
        return self.signer is not None

    # -- ownership ---------------------------------------------------------------------------
    def assign(self, partition: int, trees: dict[str, StreamTree]) -> None:
        self._parts[partition] = dict(trees)
        for stream, t in trees.items():
            self._note_growth((partition, stream), t)

    def of(self, partition: int) -> dict[str, StreamTree]:
        """The committed trees of an owned partition (to :meth:`assign` again later)."""
        return dict(self._parts.get(partition, {}))

    def revoke(self, partition: int) -> None:
        self._parts.pop(partition, None)
        self._requests = {r for r in self._requests if r[0] != partition}
        self._grown = {k for k in self._grown if k[0] != partition}

    def refused(self) -> dict[tuple[int, str], str]:
        """The owned streams that are never signed, and why."""
        return {(p, s): t.refused for p, streams in self._parts.items()
                for s, t in streams.items() if t.refused}

    def _note_growth(self, key: tuple[int, str], t: StreamTree) -> None:
        if not t.refused and t.range.size > t.checkpoint_size:
            self._grown.add(key)
        else:
            self._grown.discard(key)

    def tree(self, partition: int, stream: str) -> StreamTree:
        """The stream's tree as the open transaction sees it (an empty one if new)."""
        key = (partition, stream)
        t = self._pending.get(key)
        if t is not None:
            return t
        t = self._parts.get(partition, {}).get(stream)
        return t if t is not None else StreamTree()

    def _staged(self, partition: int, stream: str) -> StreamTree:
        key = (partition, stream)
        t = self._pending.get(key)
        if t is None:
            t = self._pending[key] = self.tree(partition, stream).copy()
        return t

    # -- one transaction ---------------------------------------------------------------------
    def append(self, partition: int, stream: str, leaf: bytes, seq: int,
               merge: Callable[[list[bytes], int, bytes], None] | None = None) -> None:
        """Append the leaf of the record sealed with ``seq``; the tree must be at ``seq - 1``.
        ``merge``: the compiled seal path's (``CompactRange.append_with``)."""
        key = (partition, stream)
        t = self._pending.get(key)  # once per sealed record: one lookup when staged already
        if t is None:
            t = self.tree(partition, stream)
            if t.refused:
                return  # not trusted, never signed: its persisted state stays as restored
            t = self._pending[key] = t.copy()
        elif t.refused:
            return
        if t.range.size != seq - 1:
            # Cannot happen: the tree is restored at the head and appended with every seal.
            raise AssertionError(f"stream {stream!r}: tree at {t.range.size}, sealing seq {seq}")
        if merge is None:
            t.range.append(leaf)
        else:
            t.range.append_with(merge, leaf)

    def request(self, partition: int, stream: str) -> None:
        """An intake control message asked for a checkpoint of ``stream`` in this batch."""
        self._requests.add((partition, stream))

    def due(self, now_s: float) -> list[tuple[int, str]]:
        """The (partition, stream)s to checkpoint now, in order: grown since their last
        checkpoint, signable, and asked for or past the interval."""
        if self.signer is None:
            return []
        keys = self._grown | {k for k in self._pending if k[0] in self._parts}
        out = []
        for p, s in sorted(keys):
            t = self.tree(p, s)
            if t.refused or t.range.size <= t.checkpoint_size:
                continue
            if (p, s) in self._requests or t.checkpoint_at is None \
                    or now_s - t.checkpoint_at >= self.interval_s:
                out.append((p, s))
        return out

    def issue(self, partition: int, stream: str, now_s: float) -> Issued:
        """Sign the stream's checkpoint at its current size, in the open transaction."""
        signer = self.signer
        if signer is None:
            raise RuntimeError("checkpoints are off: there is no log key")
        t = self._staged(partition, stream)
        size = t.range.size
        if t.refused or size <= t.checkpoint_size:
            # The rule that keeps every checkpoint consistent with the earlier ones and no two
            # of one size: the range only appends, and only a larger size is signed.
            raise AssertionError(f"stream {stream!r}: no checkpoint at {size} after "
                                 f"{t.checkpoint_size}")
        t0 = time.perf_counter()
        root = t.range.root()
        text = format_checkpoint(Checkpoint(stream_origin(self.log_name, stream), size, root))
        note = format_note(text, [sign(signer, text)])
        took = time.perf_counter() - t0
        t.checkpoint_size, t.checkpoint_nodes, t.checkpoint_at = size, t.range.nodes, now_s
        issued = Issued(partition, stream, size, root, note, took)
        self._issued.append(issued)
        return issued

    def pending(self) -> dict[tuple[int, str], StreamTree]:
        """Every tree changed in the open transaction."""
        return dict(self._pending)

    def issued(self) -> list[Issued]:
        """The checkpoints signed in the open transaction."""
        return list(self._issued)

    def commit(self) -> None:
        for (p, s), t in self._pending.items():
            part = self._parts.get(p)
            if part is not None:
                part[s] = t
                self._note_growth((p, s), t)
        self._pending, self._issued = {}, []
        self._requests.clear()

    def abort(self) -> None:
        """Forget the transaction's appends, checkpoints and requests. A request is lost
        with its batch only if the batch is not consumed again; it is (rewind)."""
        self._pending, self._issued = {}, []
        self._requests.clear()


# -- restore ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RestorePlan:
    """How one stream's tree is restored: start from ``base`` (a range of ``base.size``
    leaves) and append the log's records ``base.size + 1 .. seq``. ``check`` is the
    (size, root) the range must have at that size (the last signed checkpoint), or None.
    ``refused`` (non-empty): the tree cannot be trusted; do not sign this stream."""

    base: CompactRange
    check: tuple[int, bytes] | None
    refused: str = ""

    @property
    def replay_from(self) -> int:
        """The first seq to re-hash from the log."""
        return self.base.size + 1


def plan_restore(stream: str, seq: int, stored: TreeState,
                 last_checkpoint: tuple[int, bytes] | None, signing: bool) -> RestorePlan:
    """Decide how to restore a stream's tree from its WriterHead (``seq``, ``stored``) and
    the last checkpoint of the stream on ``evidence.checkpoints`` (size, root; None when
    there is none). Without a key, nothing is checked: the stored range is taken as it is.

    - The head's ``checkpoint_size`` is the last checkpoint's (0: none), or the two disagree.
    - The stored range at the checkpoint's size: its root must be the signed root.
    - A stored range past the last checkpoint (the writer ran without a key since): the
      checkpoint's root is recomputed from the log's records 1..size, and so the range.
    """
    stored_range = stored.range()
    if not signing:
        return RestorePlan(stored_range, None)
    signed = last_checkpoint[0] if last_checkpoint else 0
    if stored.checkpoint_size != signed:
        return RestorePlan(stored_range, None, refused=(
            f"stream {stream!r}: writer-state says the last checkpoint is at "
            f"{stored.checkpoint_size}, evidence.checkpoints has "
            f"{'none' if last_checkpoint is None else signed}"))
    if last_checkpoint is None:
        return RestorePlan(stored_range, None)
    size, root = last_checkpoint
    if size > seq:
        return RestorePlan(stored_range, None, refused=(
            f"stream {stream!r}: a checkpoint at {size} is past the head (seq {seq})"))
    if stored.tree_size == size:
        if stored_range.root() != root:
            return RestorePlan(stored_range, None, refused=(
                f"stream {stream!r}: the tree writer-state holds at {size} has another root "
                f"than the checkpoint signed at that size"))
        return RestorePlan(stored_range, (size, root))
    return RestorePlan(CompactRange(), (size, root))
