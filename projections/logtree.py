"""The deployment log's projection step (docs/witnessing.md), pure: ``<prefix>.tree`` messages
to rows, and the deployment tree grown from its entries.

**Entries.** Every ``checkpoint`` message on the tree topic (one partition) is an entry, in
offset order: entry ``i`` is the ``i``-th of them and its leaf hash is RFC 6962's over the
message value verbatim (:func:`entry_leaf_hash`). A note that does not open (a bad signature,
an origin of no stream, unreadable bytes) is a ``checkpoint_invalid`` finding *and still an
entry*: the tree is over what was committed, which every reader of the topic sees alike, so
dropping one would fork our tree from everyone else's. :func:`grow_log` appends a batch's
entries to the tree and returns the rows and the perfect subtree hashes they complete.

**Deployment checkpoints.** A ``log-checkpoint`` message is the log's signed checkpoint of the
deployment tree (origin exactly the log's name); a ``log-cosignature`` message is one with a
witness's cosignature line added. Both give a :class:`LogCheckpointRow` (the cosignature's
from the note's log-signed part, so no cosignature is ever served beside a checkpoint of
another root); the second also one :class:`LogCosignatureRow` per signature line that is not
the log's. A checkpoint whose root is not the projected tree's at its size is a
``checkpoint_mismatch`` finding (:func:`check_root`), stream null: the deployment log is no
stream.

The read side's own helpers (:func:`tree_size`, :func:`read_nodes`, :func:`read_entries`)
take a connection the caller opened (psycopg's, or any DB-API one taking ``%s``) and read
the views schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from evidence_contract import note as _note
from evidence_contract.chain import Finding
from evidence_contract.merkle import CompactRange, leaf_hash
from evidence_contract.tlog import (
    KIND_CHECKPOINT,
    KIND_HEADER,
    KIND_LOG_CHECKPOINT,
    KIND_LOG_COSIGNATURE,
    SIZE_HEADER,
    STREAM_HEADER,
    open_log_checkpoint,
    open_stream_checkpoint,
    stream_of_origin,
)

from .tlog import CHECKPOINT_CONFLICT, CHECKPOINT_INVALID, CHECKPOINT_MISMATCH

__all__ = [
    "CHECKPOINT_CONFLICT",
    "CHECKPOINT_INVALID",
    "CHECKPOINT_MISMATCH",
    "Entry",
    "LogCheckpointRow",
    "LogCosignatureRow",
    "LogGrown",
    "check_root",
    "decode_tree_message",
    "entry_leaf_hash",
    "grow_log",
    "read_entries",
    "read_nodes",
    "tree_size",
]

Headers = Sequence[tuple[str, bytes | None]] | None
PARTITION = 0
"""The tree topic's one partition."""


@dataclass(frozen=True)
class Entry:
    """A ``checkpoint`` message: the deployment tree's next leaf. ``stream`` and
    ``tree_size`` say which stream checkpoint it is (for an entry that does not open, what
    its headers or its text say, else ``''`` and 0)."""

    stream: str
    tree_size: int
    entry: bytes
    offset: int


@dataclass(frozen=True)
class LogCheckpointRow:
    """A deployment checkpoint: size, root, the signed note (verbatim; from a cosignature
    message, its text with the log's signature lines only), its offset on the tree topic."""

    tree_size: int
    root: bytes
    note: bytes
    offset: int


@dataclass(frozen=True)
class LogCosignatureRow:
    """One witness's cosignature line of the deployment checkpoint of ``tree_size``."""

    tree_size: int
    root: bytes
    witness: str
    key_id: int
    timestamp: int
    line: str
    offset: int


Item = Entry | LogCheckpointRow | LogCosignatureRow | Finding


def entry_leaf_hash(entry: bytes) -> bytes:
    """The deployment tree's leaf hash of an entry: ``SHA-256(0x00 || entry)``."""
    return leaf_hash(entry)


def _header(headers: Headers, name: str) -> str | None:
    for k, v in headers or ():
        if k == name and v is not None:
            try:
                return bytes(v).decode("utf-8")
            except UnicodeDecodeError:
                return None
    return None


def _finding(kind: str, stream: str | None, seq: int | None, detail: str, offset: int
             ) -> Finding:
    return Finding(kind, stream, seq, detail, PARTITION, offset)


def _loose_entry(value: bytes, named: str | None, sized: str | None, log_name: str,
                 offset: int) -> Entry:
    """An entry that did not open: its stream and size as far as anything says them."""
    stream, size = named, int(sized) if sized and sized.isdigit() else None
    try:
        cp = _note.parse_checkpoint(_note.parse_note(value).text)
        stream = stream or stream_of_origin(log_name, cp.origin)
        size = cp.size if size is None else size
    except _note.NoteError:
        pass
    return Entry(stream or "", size or 0, value, offset)


def _decode_entry(offset: int, value: bytes, headers: Headers, log_name: str,
                  log_key: _note.VerifierKey | None) -> list[Item]:
    named = _header(headers, STREAM_HEADER)
    try:
        if log_key is not None:
            cp, _n, stream = open_stream_checkpoint(value, log_key, named)
        else:
            cp = _note.parse_checkpoint(_note.parse_note(value).text)
            stream = stream_of_origin(log_name, cp.origin)
            if stream is None or (named is not None and stream != named):
                raise _note.NoteError(f"checkpoint origin {cp.origin!r} is not a stream of "
                                      f"{log_name!r}" + (f" ({named})" if named else ""))
            if cp.extensions:
                raise _note.NoteError("a stream checkpoint has no extension lines")
    except _note.NoteError as e:
        entry = _loose_entry(value, named, _header(headers, SIZE_HEADER), log_name, offset)
        return [entry, _finding(CHECKPOINT_INVALID, entry.stream or None, None,
                                f"entry {KIND_CHECKPOINT} message: {e} (still an entry of "
                                f"the deployment tree: it was committed)", offset)]
    return [Entry(stream, cp.size, value, offset)]


def _is_log(sig: _note.Signature, log_name: str, log_key: _note.VerifierKey | None) -> bool:
    if log_key is not None:
        return (sig.name, sig.key_id) == (log_key.name, log_key.key_id)
    return sig.name == log_name


def _decode_log_checkpoint(kind: str, offset: int, value: bytes, log_name: str,
                           log_key: _note.VerifierKey | None) -> list[Item]:
    try:
        if log_key is not None:
            cp, note = open_log_checkpoint(value, log_key)
        else:
            note = _note.parse_note(value)
            cp = _note.parse_checkpoint(note.text)
            if cp.origin != log_name:
                raise _note.NoteError(f"checkpoint origin {cp.origin!r} is not the log "
                                      f"{log_name!r}")
            if cp.extensions:
                raise _note.NoteError("a deployment checkpoint has no extension lines")
            if not any(_is_log(s, log_name, None) for s in note.signatures):
                raise _note.NoteError(f"the checkpoint has no signature of {log_name}")
    except _note.NoteError as e:
        return [_finding(CHECKPOINT_INVALID, None, None, f"{kind} message: {e}", offset)]
    if kind == KIND_LOG_CHECKPOINT:
        return [LogCheckpointRow(cp.size, cp.root_hash, bytes(value), offset)]
    own = [s for s in note.signatures if _is_log(s, log_name, log_key)]
    out: list[Item] = [LogCheckpointRow(cp.size, cp.root_hash, _note.format_note(note.text, own),
                                        offset)]
    for sig in note.signatures:
        if _is_log(sig, log_name, log_key):
            continue
        try:
            ts = _note.cosignature_timestamp(sig)
        except _note.NoteError as e:
            out.append(_finding(CHECKPOINT_INVALID, None, cp.size,
                                f"{kind} message: the line of {sig.name}: {e}", offset))
            continue
        out.append(LogCosignatureRow(cp.size, cp.root_hash, sig.name, sig.key_id, ts,
                                     sig.line(), offset))
    return out


def decode_tree_message(offset: int, value: bytes | None, headers: Headers, log_name: str,
                        log_key: _note.VerifierKey | None) -> list[Item]:
    """Read one ``<prefix>.tree`` message (at ``offset`` of its one partition); never raises
    for bad bytes.

    With ``log_key`` every log signature is verified; without (no key configured) the notes
    are only parsed. A ``checkpoint`` message always gives one :class:`Entry` (with a
    ``checkpoint_invalid`` finding when it does not open; a message without a value is the
    empty entry); a ``log-checkpoint`` a :class:`LogCheckpointRow`; a ``log-cosignature``
    one of those and a :class:`LogCosignatureRow` per signature line not the log's (a line
    whose timestamp cannot be read is a finding). Anything else is a finding only.
    """
    kind = _header(headers, KIND_HEADER)
    if kind == KIND_CHECKPOINT:
        if value is None:
            return [Entry(_header(headers, STREAM_HEADER) or "", 0, b"", offset),
                    _finding(CHECKPOINT_INVALID, None, None, "entry message has no value "
                             "(the empty entry of the deployment tree)", offset)]
        return _decode_entry(offset, bytes(value), headers, log_name, log_key)
    if kind in (KIND_LOG_CHECKPOINT, KIND_LOG_COSIGNATURE):
        if value is None:
            return [_finding(CHECKPOINT_INVALID, None, None, f"{kind} message has no value",
                             offset)]
        return _decode_log_checkpoint(kind, offset, bytes(value), log_name, log_key)
    return [_finding(CHECKPOINT_INVALID, None, None,
                     f"unknown {KIND_HEADER} {kind!r} (not an entry)", offset)]


@dataclass(frozen=True)
class LogGrown:
    """What one batch of entries adds to the deployment tree."""

    entries: list[tuple[int, str, int, bytes, int]]
    """``log_entries`` rows: ``(idx, stream, tree_size, entry, log_offset)``."""
    nodes: list[tuple[int, int, bytes]]
    """``(level, idx, hash)`` of every perfect subtree completed."""
    tree: CompactRange
    """The tree after them."""


def grow_log(tree: CompactRange, entries: Iterable[Entry]) -> LogGrown:
    """Append ``entries`` (in offset order) to the deployment tree ``tree`` (not modified)."""
    cr = CompactRange(tree.size, tree.nodes)
    rows: list[tuple[int, str, int, bytes, int]] = []
    nodes: list[tuple[int, int, bytes]] = []
    for e in entries:
        rows.append((cr.size, e.stream, e.tree_size, e.entry, e.offset))
        nodes += cr.extend_nodes([entry_leaf_hash(e.entry)])
    return LogGrown(rows, nodes, cr)


def check_root(tree_size: int, root: bytes, offset: int, tree_root: bytes) -> Finding | None:
    """A ``checkpoint_mismatch`` finding if a deployment checkpoint's ``root`` is not
    ``tree_root`` (the projected deployment tree's at ``tree_size``); None when they agree."""
    if bytes(root) == bytes(tree_root):
        return None
    return _finding(CHECKPOINT_MISMATCH, None, tree_size,
                    f"the deployment checkpoint of size {tree_size} has root "
                    f"{bytes(root).hex()}, the entries projected give {bytes(tree_root).hex()}",
                    offset)


# -- the read side (a connection given) ----------------------------------------------------


def tree_size(conn: Any, views_schema: str) -> int:
    """The projected deployment tree's size: its number of entries."""
    row = conn.execute(f'select coalesce(max(idx) + 1, 0) from "{views_schema}".log_entries'
                       ).fetchone()
    return int(row[0])


def read_nodes(conn: Any, views_schema: str, wanted: list[tuple[int, int]]
               ) -> dict[tuple[int, int], bytes]:
    """The stored perfect subtree hashes ``(level, idx)`` of ``wanted`` (those the tree has
    completed; others are absent from the answer), in one query."""
    wanted = list(dict.fromkeys(wanted))
    if not wanted:
        return {}
    rows = conn.execute(
        f'select n.level, n.idx, n.hash from "{views_schema}".log_nodes n '
        f"join unnest(%s::int[], %s::bigint[]) w(level, idx) "
        f"on n.level = w.level and n.idx = w.idx",
        ([w[0] for w in wanted], [w[1] for w in wanted])).fetchall()
    return {(r[0], r[1]): bytes(r[2]) for r in rows}


def read_entries(conn: Any, views_schema: str, start: int, end: int) -> list[bytes]:
    """Entries ``[start, end)`` in order (fewer if the tree is smaller)."""
    rows = conn.execute(
        f'select entry from "{views_schema}".log_entries where idx >= %s and idx < %s '
        f"order by idx", (start, end)).fetchall()
    return [bytes(r[0]) for r in rows]
