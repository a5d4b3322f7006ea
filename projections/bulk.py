"""A rebuild's bulk load with its writes overlapped: fold the next batch while PostgreSQL
stores the last one.

A batch of :meth:`Store.apply` is decode, fold and tree growth in Python, then the writes,
each waiting for the other: measured on a 2-core machine, a rebuild spent ~3.6 s in Python
and ~2.4 s in PostgreSQL per 50k records, one after the other. In a rebuild's step 2
(:mod:`projections.rebuild`) one writer owns a new generation that nothing reads: what a
batch needs from the database (each stream's head and tree range, the event ids already put
in) is what the batches before it wrote, so :class:`BulkLoad` keeps it in memory and hands
each batch's writes to a thread with its own connection, one batch in flight while the next
is folded.

The same rows, heads, findings, tree nodes and positions as ``Store.apply`` would write, in
one transaction per batch and in order:

- The heads are kept as ``apply`` reads them back (``ProjectedHead.of_row`` of the stored
  row), so the fold sees exactly what it would have read.
- The ``duplicate_event_id`` judgement runs as in ``apply`` (the bulk load's in-memory id
  set); when it must look ids up in the table it waits first for every batch before to
  commit (:meth:`BulkLoad.drain`), so the lookup sees them all.
- A generation that holds checkpoints is refused (``Store.bulk_state``): the checkpoints'
  verdicts need the committed trees, and a rebuild folds them after its records.
- A batch's transaction checks and moves its positions as ``apply``'s does; the positions
  a caller is given back are those of the batches folded, committed by :meth:`close`.

A failed write stops the thread; the next :meth:`apply` or :meth:`close` raises its error,
and the rebuild fails as it would have with ``apply`` (its generation is dropped as a
leftover by the next rebuild).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Iterable, Mapping

from .errors import PositionsMoved, ProjectionError
from .fold import Folded, ProjectedHead, Record, decode_messages, fold
from .store import Store, next_positions
from . import tlog

__all__ = ["BulkLoad"]

DECODE_SLICE = 64
"""Messages decoded in one call to the compiled row path (see ``BulkLoad.apply``)."""

IN_FLIGHT = 1
"""Batches folded and waiting while another is written: one keeps both cores busy, with at
most three batches in memory (one written, one waiting, one being folded)."""


class BulkLoad:
    """Overlapped writes of one generation's bulk load; see the module docstring."""

    def __init__(self, store: Store, gen: str, topic: str) -> None:
        self.store, self.gen, self.topic = store, gen, topic
        self.heads, self.ranges = store.bulk_state(gen)
        self._native = store.copies_natively()
        self._writer = Store(store.cfg).open()  # its connection is the thread's alone
        self._jobs: deque[tuple] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._closing = False
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bulk-writer", daemon=True)
        self._thread.start()

    # -- the main thread ---------------------------------------------------------------------

    def apply(self, expected: Mapping[int, int], messages: Iterable[tuple[int, int, Any]],
              reached: Mapping[int, int], watermarks: Mapping[int, int],
              redaction: Any = None) -> Folded:
        """Fold one polled batch ``(partition, offset, value)`` and queue its writes; returns
        what ``Store.apply`` would (the positions it moves to included)."""
        self._raise_failure()
        # Decoded in slices: the compiled decoder holds the GIL for all of a call, and the
        # writer thread needs it between its socket writes.
        messages = list(messages)
        decoded = [m for i in range(0, len(messages), DECODE_SLICE)
                   for m in decode_messages(messages[i:i + DECODE_SLICE], redaction)]
        folded = fold(self.heads, decoded)
        folded = self.store._judge_event_ids(self.gen, folded, before_lookup=self.drain)
        records = sorted((m for m in decoded if isinstance(m, Record)),
                         key=lambda m: (m.partition, m.offset))
        grown = tlog.grow(self.ranges, [m.row for m in records], [m.leaf for m in records])
        copies = [m.copy for m in decoded if isinstance(m, Record)]
        if self._native and all(c is not None for c in copies):
            tuples, rows = b"".join(copies), []
        else:
            tuples, rows = b"", [m.row for m in decoded if isinstance(m, Record)]
        nxt = next_positions(sorted(expected), expected, folded.next_offsets, reached)
        self._submit((dict(expected), tuples, rows, folded, grown, dict(reached),
                      dict(watermarks)))
        # What the next batch would read back from the tables.
        self.heads.update({s: ProjectedHead.of_row(h.row()) for s, h in folded.heads.items()})
        self.ranges.update(grown.trees)
        return Folded(folded.rows, folded.heads, folded.findings, nxt)

    def drain(self) -> None:
        """Wait until every batch queued is committed; raises a write's failure."""
        with self._cond:
            while (self._jobs or self._busy) and self._failed is None:
                self._cond.wait(0.5)
        self._raise_failure()

    def close(self) -> None:
        """Commit what is queued and stop the thread; raises a write's failure."""
        try:
            self.drain()
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop the thread (what is queued and not written is dropped) and its connection."""
        with self._cond:
            self._closing = True
            self._jobs.clear()
            self._cond.notify_all()
        self._thread.join()
        self._writer.close()

    def _submit(self, job: tuple) -> None:
        with self._cond:
            while len(self._jobs) >= IN_FLIGHT and self._failed is None:
                self._cond.wait(0.5)
            self._raise_failure()
            self._jobs.append(job)
            self._cond.notify_all()

    def _raise_failure(self) -> None:
        e = self._failed
        if e is None:
            return
        if isinstance(e, PositionsMoved):
            raise ProjectionError(f"another writer moved the positions of {self.gen} during "
                                  f"its bulk load (now {e.positions})") from e
        raise e

    # -- the writer thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return
                job = self._jobs.popleft()
                self._busy = True
                self._cond.notify_all()
            try:
                self._writer.write_bulk(self.gen, self.topic, *job)
            except BaseException as e:  # handed to the main thread, which raises it
                with self._cond:
                    self._failed, self._busy = e, False
                    self._cond.notify_all()
                return
            with self._cond:
                self._busy = False
                self._cond.notify_all()
