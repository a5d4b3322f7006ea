"""The verifiable log's projection step, pure: records to tree nodes, checkpoint messages to rows.

**Trees.** Each stream's tree is the RFC 9162 tree of its records in seq order (leaf
``seq - 1``, :mod:`evidence_contract.merkle`). The projection stores every perfect subtree
hash (``tree_nodes``: level 0 the leaf hashes) and, per stream, the size and root
(``trees``). :func:`grow` appends a batch's records to the streams' compact ranges and
returns the nodes they complete. A record becomes leaf ``size`` only if its seq is
``size + 1``: a duplicate, a record after a gap or a late one is a chain finding already
(:mod:`projections.fold`) and does not enter the tree, so the tree is the stream's gapless
prefix, the one the writer's checkpoints sign. (After a gap the tree stops growing; a
checkpoint beyond it is never confirmed, and the audit says why.)

**Checkpoints.** :func:`decode_checkpoint` reads one ``evidence.checkpoints`` message: a
``checkpoint`` (the log's signed note) or a ``cosignature`` (the note with a witness's line);
anything unreadable, unsigned by the log key or naming another stream is a
``checkpoint_invalid`` finding at its position, never an error. A checkpoint whose root is
not the projected tree's root at its size is a ``checkpoint_mismatch`` finding
(:func:`check_root`); two different checkpoints of one size are ``checkpoint_conflict``.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from evidence_contract import note as _note
from evidence_contract.chain import Finding
from evidence_contract.merkle import CompactRange, compose_leaf_input, leaf_hash
from evidence_contract.tlog import (
    KIND_CHECKPOINT,
    KIND_COSIGNATURE,
    KIND_HEADER,
    STREAM_HEADER,
    open_stream_checkpoint,
    stream_of_origin,
)

from . import fastrows
from .rows import RECORD_DIGEST, SEQ, STREAM

__all__ = [
    "CHECKPOINT_CONFLICT",
    "CHECKPOINT_INVALID",
    "CHECKPOINT_MISMATCH",
    "KINDS",
    "CheckpointRow",
    "CosignatureRow",
    "Grown",
    "check_root",
    "decode_checkpoint",
    "grow",
    "row_leaf_hash",
]

CHECKPOINT_MISMATCH = "checkpoint_mismatch"
CHECKPOINT_CONFLICT = "checkpoint_conflict"
CHECKPOINT_INVALID = "checkpoint_invalid"
KINDS = (CHECKPOINT_MISMATCH, CHECKPOINT_CONFLICT, CHECKPOINT_INVALID)
"""The findings of the checkpoint fold, beside the chain's (``evidence_contract.chain.KINDS``)."""

Headers = Sequence[tuple[str, bytes | None]] | None


def row_leaf_hash(row: Sequence) -> bytes:
    """The tree's leaf hash of a ``records`` row: ``merkle.leaf_hash`` of the leaf input over
    its ``record_digest`` and its record bytes (``row[-1]``, the log message verbatim); the
    same as ``merkle.record_leaf_hash(record_bytes)`` without decoding the record again.
    The compiled row path (:mod:`projections.fastrows`) computes it in one call."""
    digest, record = row[RECORD_DIGEST], row[-1]
    if type(digest) is bytes and type(record) is bytes:
        fast = fastrows.leaf_hash(digest, record)
        if fast is not None:
            return fast
    return leaf_hash(compose_leaf_input(bytes(digest), hashlib.sha256(record).digest()))


@dataclass(frozen=True)
class Grown:
    """What one batch adds to the trees."""

    nodes: list[tuple[str, int, int, bytes]]
    """``(stream, level, index, hash)`` of every perfect subtree completed."""
    trees: dict[str, CompactRange]
    """The new compact range of every stream that grew."""


def grow(ranges: Mapping[str, CompactRange], rows: Iterable[Sequence],
         leaves: Iterable[bytes | None] | None = None) -> Grown:
    """Append ``rows`` (``records`` rows in log order) to the trees; ``ranges`` holds the
    current range of each stream in the batch (absent: empty) and is not modified.
    ``leaves``, when given, holds each row's leaf hash where it is known already (the
    compiled row path's ``Record.leaf``; None: computed here)."""
    current: dict[str, CompactRange] = {}
    nodes: list[tuple[str, int, int, bytes]] = []
    for row, leaf in zip(rows, leaves if leaves is not None else itertools.repeat(None)):
        stream = row[STREAM]
        cr = current.get(stream)
        if cr is None:
            before = ranges.get(stream) or CompactRange()
            cr = current[stream] = CompactRange(before.size, before.nodes)
        if row[SEQ] != cr.size + 1:
            continue
        nodes.extend((stream, lv, i, h)
                     for lv, i, h in cr.extend_nodes([leaf or row_leaf_hash(row)]))
    return Grown(nodes, {s: cr for s, cr in current.items()
                         if cr.size != (ranges.get(s) or CompactRange()).size})


@dataclass(frozen=True)
class CheckpointRow:
    """A checkpoint the log signed, at its position on ``evidence.checkpoints``."""

    stream: str
    tree_size: int
    root: bytes
    note: bytes
    partition: int
    offset: int


@dataclass(frozen=True)
class CosignatureRow:
    """One witness's cosignature line of a checkpoint (the line as the note holds it)."""

    stream: str
    tree_size: int
    root: bytes
    witness: str
    key_id: int
    timestamp: int
    line: str
    partition: int
    offset: int


def _header(headers: Headers, name: str) -> str | None:
    for k, v in headers or ():
        if k == name and v is not None:
            try:
                return bytes(v).decode("utf-8")
            except UnicodeDecodeError:
                return None
    return None


def _invalid(reason: str, stream: str | None, partition: int, offset: int) -> Finding:
    return Finding(CHECKPOINT_INVALID, stream, None, reason, partition, offset)


def decode_checkpoint(partition: int, offset: int, value: bytes | None, headers: Headers,
                      log_name: str, log_key: _note.VerifierKey | None
                      ) -> list[CheckpointRow | CosignatureRow | Finding]:
    """Read one ``evidence.checkpoints`` message; never raises for bad bytes.

    With ``log_key`` the log's signature is verified; without (no key configured) the note is
    only parsed, and its origin must still be a stream of ``log_name``. A checkpoint message
    gives one :class:`CheckpointRow`; a cosignature message one :class:`CosignatureRow` per
    signature line other than the log's (the witness's cosignatures were verified by the API
    that took them; they are stored as the lines they are).
    """
    kind = _header(headers, KIND_HEADER)
    named = _header(headers, STREAM_HEADER)
    if value is None:
        return [_invalid("message has no value", named, partition, offset)]
    try:
        if log_key is not None:
            cp, note, stream = open_stream_checkpoint(value, log_key, named)
        else:
            note = _note.parse_note(value)
            cp = _note.parse_checkpoint(note.text)
            stream = stream_of_origin(log_name, cp.origin)
            if stream is None or (named is not None and stream != named):
                raise _note.NoteError(f"checkpoint origin {cp.origin!r} is not a stream of "
                                      f"{log_name!r}" + (f" ({named})" if named else ""))
    except _note.NoteError as e:
        return [_invalid(f"{kind or 'unmarked'} message: {e}", named, partition, offset)]
    if kind == KIND_CHECKPOINT:
        return [CheckpointRow(stream, cp.size, cp.root_hash, bytes(value), partition, offset)]
    if kind == KIND_COSIGNATURE:
        out: list[CheckpointRow | CosignatureRow | Finding] = []
        for sig in note.signatures:
            if log_key is not None and (sig.name, sig.key_id) == (log_key.name, log_key.key_id):
                continue
            if log_key is None and sig.name == log_name:
                continue
            try:
                ts = _note.cosignature_timestamp(sig)
            except _note.NoteError as e:
                out.append(_invalid(f"cosignature of {sig.name}: {e}", stream, partition, offset))
                continue
            out.append(CosignatureRow(stream, cp.size, cp.root_hash, sig.name, sig.key_id, ts,
                                      sig.line(), partition, offset))
        return out
    return [_invalid(f"unknown {KIND_HEADER} {kind!r}", stream, partition, offset)]


def check_root(cp: CheckpointRow | tuple, tree_root: bytes) -> Finding | None:
    """A ``checkpoint_mismatch`` finding if the checkpoint's root is not ``tree_root`` (the
    projected tree's root at the checkpoint's size); None when they agree.

    ``cp`` is a :class:`CheckpointRow` or a ``(stream, tree_size, root, partition, offset)``
    tuple (a stored checkpoint checked later, once the tree has reached its size)."""
    if isinstance(cp, CheckpointRow):
        stream, size, root, partition, offset = (cp.stream, cp.tree_size, cp.root,
                                                 cp.partition, cp.offset)
    else:
        stream, size, root, partition, offset = cp
    if bytes(root) == bytes(tree_root):
        return None
    return Finding(CHECKPOINT_MISMATCH, stream, size,
                   f"the checkpoint of size {size} has root {bytes(root).hex()}, the records "
                   f"projected give {bytes(tree_root).hex()}", partition, offset)
