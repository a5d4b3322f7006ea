"""A generation's records summarised as a bulk load writes them, in Python: the summary
``RecordStore.summaries`` computes in SQL, without a second pass over the rows.

A rebuild compares the rebuilt generation with the live one by per-stream summaries
(:mod:`projections.compare`): the count, ``sha256`` of the ``record_digest``s in
``(seq, partition, offset)`` order, ``sha256`` of the ``sha256`` of each row's
``record_bytes`` in that order, and (under one redaction policy) ``sha256`` of each row's
:func:`body_digest` (its masked columns' lengths and bytes, one ``sha256``). In SQL the
rebuilt generation's summary was a scan of every row it had just written, its bodies read
back and decompressed: on a 2-core machine it shared the cores with the live generation's
scan. :class:`RunningSummaries` folds the same digests from the rows the load hands to
``COPY``, in the order they come; the live generation is still read from its tables.

The SQL aggregates each stream's rows in ``(seq, partition, offset)`` order; a load hands
them in ``(partition, offset)`` order, which is the same for every stream whose seqs rise
along the log. A stream whose rows come otherwise (a rogue record: a seq lower than one
before it in the log) cannot be folded incrementally; the summary then says it is not ``usable`` and the
rebuild scans the table as before. Equal inputs give the SQL's bytes exactly: a unit test
and every rebuild's comparison (a difference would stop its swap) check it.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any, Iterable

from .columns import RECORD_COLUMNS
from .redact import MASKED

__all__ = ["RunningSummaries", "body_digest"]

_STREAM, _SEQ, _PART, _OFFSET, _DIGEST, _BYTES = (
    RECORD_COLUMNS.index(c) for c in ("stream", "seq", "log_partition", "log_offset",
                                      "record_digest", "record_bytes"))
_MASKED = tuple(RECORD_COLUMNS.index(c) for c in MASKED)
_TEXT = frozenset(RECORD_COLUMNS.index(c) for c in ("params",))  # text: hashed as UTF-8
_LENGTH = struct.Struct(">q").pack
_NULL = b"\xff" * 8


def body_digest(row: tuple[Any, ...]) -> bytes:
    """A ``records`` row's served bodies as one digest: ``sha256`` of, per masked column in
    order, its length (8 bytes, big-endian) and bytes (``params`` as UTF-8), or 8 bytes of
    ``0xff`` for a null; ``projections.records.body_digest_sql`` computes the same in SQL."""
    h = hashlib.sha256()
    for i in _MASKED:
        v = row[i]
        if v is None:
            h.update(_NULL)
            continue
        if i in _TEXT:
            v = v.encode()
        h.update(_LENGTH(len(v)))
        h.update(v)
    return h.digest()


class _Stream:
    __slots__ = ("count", "last", "chain", "hashes", "bodies")

    def __init__(self) -> None:
        self.count = 0
        self.last: tuple[int, int, int] | None = None
        self.chain, self.hashes, self.bodies = hashlib.sha256(), hashlib.sha256(), hashlib.sha256()


class RunningSummaries:
    """Per stream, what ``RecordStore.summaries(gen, bounds, bodies)`` answers over the rows
    :meth:`add`\\ ed (see the module docstring). ``bodies``: the masked columns' digest too."""

    def __init__(self, bodies: bool) -> None:
        self.bodies = bodies
        self.usable = True
        self._streams: dict[str, _Stream] = {}

    def add(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Fold ``records`` rows, in the order the load writes them."""
        if not self.usable:
            return
        sha256, streams, bodies = hashlib.sha256, self._streams, self.bodies
        for row in rows:
            s = streams.get(row[_STREAM])
            if s is None:
                s = streams[row[_STREAM]] = _Stream()
            key = (row[_SEQ], row[_PART], row[_OFFSET])
            if (s.last is not None and key <= s.last) or row[_DIGEST] is None:
                self.usable = False  # see the module docstring: the caller scans instead
                self._streams.clear()
                return
            s.last = key
            s.count += 1
            s.chain.update(row[_DIGEST])
            s.hashes.update(sha256(row[_BYTES]).digest())
            if bodies:
                s.bodies.update(body_digest(row))

    def result(self) -> tuple[dict[str, tuple[int, bytes, bytes]], dict[str, bytes] | None]:
        """``(summaries, bodies)`` as ``RecordStore.summaries`` returns them; only while
        :attr:`usable`."""
        assert self.usable, "a summary that could not be folded in order"
        sums = {k: (s.count, s.chain.digest(), s.hashes.digest()) for k, s in self._streams.items()}
        body = ({k: s.bodies.digest() for k, s in self._streams.items()} if self.bodies
                else None)
        return sums, body
