"""Per-stream state a projector keeps between its batches, so that a batch need not read it back.

A live batch used to read each of its streams' head and tree range back from PostgreSQL
(three queries a batch): ~9 ms of a 43 ms batch at 5k/s in the latency bench, as much as the
records' COPY, and a quarter of PostgreSQL's CPU a batch (``python -m bench.projector_batch``).
What a batch wrote is what the next one reads, so the process keeps it.

An entry is a stream's value as a committed batch of this process left it, with the log
partition the stream's records are on. It is used only while that partition's stored position
is where this process's last commit left it. That is enough: a batch locks the positions of
its partitions and finds them where it expects them (:func:`~projections.pg.lock_positions`),
every write of a head or a tree moves its partition's position in the same transaction, and a
stream's records are all on one partition; what a partition's streams hold at a position is a
function of the log up to it. A partition found anywhere else (another projector had it, a
bulk load moved it, a transaction around the batch rolled it back) loses its entries.

A batch stages what it used and made (:meth:`Kept.stage`); only :meth:`Kept.commit` after its
transaction committed makes that current, and :meth:`Kept.clear` (any failed batch) forgets
everything, so an entry is never ahead of, or beside, what PostgreSQL holds.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, Mapping, TypeVar

__all__ = ["KEPT_STREAMS", "Kept"]

KEPT_STREAMS = 4096
"""How many streams a projector keeps each kind of state for (the least recently written go
first past it); a batch of a stream not kept reads it back as before."""

V = TypeVar("V")


class Kept(Generic[V]):
    """One kind of per-stream state (a head, a tree range), kept by generation and stream."""

    def __init__(self, limit: int = KEPT_STREAMS) -> None:
        self.limit = limit
        self._at: dict[tuple[str, int], int] = {}  # (gen, partition): position entries hold at
        self._values: OrderedDict[tuple[str, str], tuple[int, V]] = OrderedDict()
        self._staged: tuple[str, dict[str, tuple[int, V]]] | None = None

    def __len__(self) -> int:
        return len(self._values)

    def get(self, gen: str, partitions: Mapping[str, int],
            expected: Mapping[int, int]) -> dict[str, V]:
        """The kept value of each stream of ``partitions`` (stream: its partition) whose
        partition stands at ``expected`` as this process left it."""
        out = {}
        for stream, p in partitions.items():
            e = self._values.get((gen, stream))
            if (e is not None and e[0] == p and p in expected
                    and self._at.get((gen, p)) == expected[p]):
                out[stream] = e[1]
        return out

    def stage(self, gen: str, values: Mapping[str, tuple[int, V]]) -> None:
        """The values (with their partitions) of the batch in progress."""
        self._staged = (gen, dict(values))

    def commit(self, gen: str, expected: Mapping[int, int], moved: Mapping[int, int]) -> None:
        """The batch committed: its partitions stood at ``expected`` and now stand at
        ``moved``; its staged values become current."""
        staged, self._staged = self._staged, None
        for p, pos in moved.items():
            if self._at.get((gen, p)) != expected.get(p):
                for key in [k for k, (q, _) in self._values.items() if k[0] == gen and q == p]:
                    del self._values[key]
            self._at[(gen, p)] = pos
        if staged is None or staged[0] != gen:
            return
        for stream, entry in staged[1].items():
            key = (gen, stream)
            self._values[key] = entry
            self._values.move_to_end(key)
        while len(self._values) > self.limit:
            self._values.popitem(last=False)

    def clear(self) -> None:
        self._at.clear()
        self._values.clear()
        self._staged = None
