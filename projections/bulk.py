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

Two connections write each batch of at least :data:`SPLIT_MIN` records: PostgreSQL's side of
a COPY is one backend, one core, and it was what bounded the load (a binary COPY of 200,000
1 KiB records took 6.9-7.6 s on one connection, 4.7-5.0 s split over two, measured here). The
writer thread's transaction holds the first half of the records and everything else (tree
nodes, heads, findings, positions); a side thread COPYs the second half on its own
connection at the same time, in a transaction that commits only once the writer's has
written everything and is about to commit, and the writer's commits only once the side's has
(``Store.write_bulk``'s ``before_commit``). So positions committed mean every row of their
batches is; a batch whose writes fail stores nothing. The one window left (the side's
commit done, the writer's COMMIT itself failing) leaves rows past the positions of a
generation whose rebuild has failed: nothing reads it, and the next rebuild drops it.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Iterable, Mapping

from .errors import PositionsMoved, ProjectionError
from .fold import Folded, ProjectedHead, Record, decode_messages, fold
from .pg import next_positions
from .store import Store
from .summary import RunningSummaries
from . import tlog

__all__ = ["BulkLoad"]

DECODE_SLICE = 64
"""Messages decoded in one call to the compiled row path (see ``BulkLoad.apply``)."""

IN_FLIGHT = 1
"""Batches folded and waiting while another is written: one keeps both cores busy, with at
most three batches in memory (one written, one waiting, one being folded)."""

SPLIT_MIN = 500
"""A batch of fewer records is written on one connection (a second transaction costs more
than it saves)."""


class BulkLoad:
    """Overlapped writes of one generation's bulk load; see the module docstring."""

    def __init__(self, store: Store, gen: str, topic: str,
                 summary: RunningSummaries | None = None) -> None:
        self.store, self.gen, self.topic = store, gen, topic
        self.summary = summary
        """Fed every records row as it is queued (:mod:`projections.summary`), if given."""
        self.heads, self.ranges = store.bulk_state(gen)
        self._native = store.copies_natively()
        self._writer = Store(store.cfg).open()  # its connection is the thread's alone
        self._side = _SideWriter(Store(store.cfg).open(), gen)
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
        folded = self.store.records.judge_event_ids(self.gen, folded, before_lookup=self.drain)
        records = sorted((m for m in decoded if isinstance(m, Record)),
                         key=lambda m: (m.partition, m.offset))
        grown = tlog.grow(self.ranges, [m.row for m in records], [m.leaf for m in records])
        if self.summary is not None:
            self.summary.add(m.row for m in records)
        copies = [m.copy for m in decoded if isinstance(m, Record)]
        half = len(copies) // 2 if len(copies) >= SPLIT_MIN else 0
        if self._native and all(c is not None for c in copies):
            tuples, rows = b"".join(copies[half:]), []
            side = (b"".join(copies[:half]), []) if half else None
        else:
            all_rows = [m.row for m in decoded if isinstance(m, Record)]
            tuples, rows = b"", all_rows[half:]
            side = (b"", all_rows[:half]) if half else None
        nxt = next_positions(sorted(expected), expected, folded.next_offsets, reached)
        self._submit((side, (dict(expected), tuples, rows, folded, grown, dict(reached),
                             dict(watermarks))))
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
        self._side.stop()
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
                job = _next_job(self)
                if job is None:
                    return
                self._busy = True
                self._cond.notify_all()
            side, args = job
            try:
                if side is None:
                    self._writer.write_bulk(self.gen, self.topic, *args)
                else:
                    half = self._side.submit(*side)
                    try:
                        self._writer.write_bulk(self.gen, self.topic, *args,
                                                before_commit=half.commit)
                    finally:
                        half.settle()
            except BaseException as e:  # handed to the main thread, which raises it
                with self._cond:
                    self._failed, self._busy = e, False
                    self._cond.notify_all()
                return
            with self._cond:
                self._busy = False
                self._cond.notify_all()


class _Half:
    """One batch's records written on the side connection, and its commit handshake."""

    def __init__(self, tuples: bytes, rows: list) -> None:
        self.tuples, self.rows = tuples, rows
        self.error: BaseException | None = None
        self._copied = threading.Event()  # the COPY is done (or failed)
        self._decided = threading.Event()  # the writer said commit, or roll back
        self._go = False
        self._done = threading.Event()  # committed or rolled back

    def commit(self) -> None:
        """The writer's ``before_commit``: wait for the COPY, let the side commit, wait for
        that; raises the side's failure, which rolls the writer's transaction back."""
        self._copied.wait()
        if self.error is None:
            self._go = True
            self._decided.set()
            self._done.wait()
        if self.error is not None:
            raise self.error

    def settle(self) -> None:
        """After the writer's transaction, however it ended: a side not told to commit
        rolls back; returns once it has."""
        self._decided.set()
        self._done.wait()

    # the side thread
    def run(self, store: Store, gen: str) -> None:
        try:
            store.copy_records(gen, self.tuples, self.rows, self._wait_for_commit)
        except _RolledBack:
            pass
        except BaseException as e:
            self.error = e
        finally:
            self._copied.set()
            self._done.set()

    def _wait_for_commit(self) -> None:
        self._copied.set()
        self._decided.wait()
        if not self._go:
            raise _RolledBack


class _RolledBack(Exception):
    """The writer's transaction did not commit: the side's rolls back too."""


class _SideWriter:
    """The thread and connection that write the second half of a batch's records."""

    def __init__(self, store: Store, gen: str) -> None:
        self.store, self.gen = store, gen
        self._jobs: deque[_Half] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="bulk-side-writer", daemon=True)
        self._thread.start()

    def submit(self, tuples: bytes, rows: list) -> _Half:
        half = _Half(tuples, rows)
        with self._cond:
            self._jobs.append(half)
            self._cond.notify_all()
        return half

    def stop(self) -> None:
        with self._cond:
            self._closing = True
            for half in self._jobs:  # never started: nothing to roll back
                half.error = ProjectionError("the bulk load stopped")
                half._copied.set()
                half._done.set()
            self._jobs.clear()
            self._cond.notify_all()
        self._thread.join()
        self.store.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                half = _next_job(self)
            if half is None:
                return
            half.run(self.store, self.gen)


def _next_job(owner: BulkLoad | _SideWriter) -> Any:
    """The next of ``owner``'s jobs, waited for under its condition (held by the caller);
    None once it is closing."""
    while not owner._jobs and not owner._closing:
        owner._cond.wait()
    return None if owner._closing else owner._jobs.popleft()
