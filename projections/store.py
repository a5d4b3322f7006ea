"""PostgreSQL side of the projections: :class:`Store`, the front over the role stores.

The role stores share one connection (:class:`projections.pg.Connection`, autocommit; every
change in an explicit ``transaction()``, and a batch nested in a longer transaction, a
rebuild's final catch-up under the live lock, becomes a savepoint), as ``eventsourcing``'s
recorders share one datastore; psycopg errors become :class:`StoreError` in one place
(:func:`projections.pg.errors`). Each role is one module, and one contract suite in the
tests (``tests/fixtures/projection_stores.py``) run against the real PostgreSQL:

- ``gens``: generations, the live one, swaps and their acceptance, redaction policies
  (:mod:`projections.generations`);
- ``liveness``: following a generation, heartbeats, head notices (:mod:`projections.liveness`);
- ``records``: the log's batches, records, heads and findings (:mod:`projections.records`);
- ``trees``: each stream's Merkle tree (:mod:`projections.trees`);
- ``checkpoints`` and ``erasures``: ``<prefix>.checkpoints`` and ``<prefix>.erasures``
  (:mod:`projections.sidefeeds`);
- ``log``: ``<prefix>.tree``, the deployment log (:mod:`projections.logstore`).

:class:`Store` keeps the methods other code calls (the projector's writers, the CLI, the
tests), each handing over to its role; code that works with one role takes that role.

A batch (:meth:`Store.apply`) is one transaction, in this order:

1. ``select generation from <meta>.live for share`` (projector only): a swap takes the row
   ``FOR UPDATE``, so it waits for this batch and the next batch sees the new generation.
   If the live generation is not the one being written, raise ``GenerationChanged``.
2. Lock this generation's position rows ``FOR UPDATE`` and check they are where this writer
   left them; if another writer moved them, raise ``PositionsMoved``. Two projectors (or a
   projector and an in-place rebuild) on one generation therefore serialise batch by batch
   on a partition they both write, and never store a message twice; only the batch's own
   partitions are locked, so projectors that own different partitions (scale-out,
   :mod:`projections.service`) write side by side.
3. Read the heads of the batch's streams (or take those this process's last committed batch
   left, where its partition's position shows nobody else wrote it since:
   :mod:`projections.kept`; the trees' ranges likewise), fold (pure), then write: records
   by binary COPY, heads and findings pipelined; the records' Merkle tree nodes (binary
   COPY) and each stream's tree size and root (:mod:`projections.tlog`), and the verdict
   on checkpoints that were waiting for their trees to reach their size; positions (next
   offset, high watermark) in one statement. A batch of ``evidence.checkpoints``
   (:meth:`Store.apply_checkpoints`), of ``evidence.erasures`` (:meth:`Store.apply_erasures`)
   and of ``<prefix>.tree`` (:meth:`Store.apply_log`, the deployment log) takes the same steps
   with its own positions.
4. Commit: rows and positions become visible together, so a crash at any point loses no row
   and duplicates none; the restarted projector seeks to the committed positions.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Mapping

from . import tlog
from .config import ProjectorConfig
from .fold import Folded, Message, ProjectedHead
from .generations import AcceptedSwap, GenerationInfo, GenerationStore
from .liveness import LivenessStore
from .logstore import DeploymentLogStore
from .pg import Connection, PgConnection, is_transient, next_positions
from .records import RecordStore, StreamSummary
from .sidefeeds import CheckpointStore, ErasureStore, SideMessages
from .trees import TreeStore

__all__ = ["AcceptedSwap", "GenerationInfo", "Store", "StreamSummary", "is_transient",
           "next_positions"]


class Store:
    """The projections' database; connect with :meth:`open` or ``with Store(cfg) as s``.

    The role stores are its attributes (module docstring), on one connection (``db``)."""

    def __init__(self, cfg: ProjectorConfig) -> None:
        self.cfg = cfg
        self.meta = cfg.meta_schema
        self.db = db = Connection(cfg)
        self.gens = GenerationStore(db)
        self.liveness = LivenessStore(db)
        self.trees = TreeStore(db)
        self.records = RecordStore(db, self.trees, self.gens.bulk_ids)
        self.checkpoints = CheckpointStore(db, self.trees)
        self.erasures = ErasureStore(db)
        self.log = DeploymentLogStore(db)

    def open(self) -> "Store":
        self.db.open()
        return self

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def conn(self) -> PgConnection:
        return self.db.conn

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction (a savepoint when nested); errors translated."""
        with self.db.transaction():
            yield

    def copies_natively(self) -> bool:
        return self.db.copies_natively()

    # -- generations (projections.generations) -----------------------------------------------

    def live_generation(self, create: bool = False) -> str | None:
        return self.gens.live_generation(create)

    def create_generation(self, indexes: bool = True) -> str:
        return self.gens.create_generation(indexes)

    def create_indexes(self, gen: str) -> None:
        self.gens.create_indexes(gen)

    def generations(self) -> list[GenerationInfo]:
        return self.gens.generations()

    def generation_status(self, gen: str) -> tuple[int, list[tuple[Any, ...]]]:
        return self.gens.generation_status(gen)

    def lock_live(self) -> str | None:
        return self.gens.lock_live()

    def make_live(self, gen: str) -> str | None:
        return self.gens.make_live(gen)

    def drop_generation(self, gen: str) -> None:
        self.gens.drop_generation(gen)

    def try_rebuild_lock(self) -> bool:
        return self.gens.try_rebuild_lock()

    def positions(self, gen: str, topic: str) -> dict[int, int]:
        return self.gens.positions(gen, topic)

    def redaction(self, gen: str) -> tuple[bool, Any]:
        return self.gens.redaction(gen)

    def record_redaction(self, gen: str, policy: Any) -> None:
        self.gens.record_redaction(gen, policy)

    def accepted_swaps(self, limit: int = 5) -> tuple[int, list[AcceptedSwap]]:
        return self.gens.accepted_swaps(limit)

    # -- liveness (projections.liveness) -----------------------------------------------------

    def follow(self, gen: str) -> None:
        self.liveness.follow(gen)

    def beat(self, gen: str, topic: str, end_offsets: Mapping[int, int]) -> bool:
        return self.liveness.beat(gen, topic, end_offsets)

    def heartbeat(self, gen: str) -> tuple[float | None, dict[tuple[str, int], int]]:
        return self.liveness.heartbeat(gen)

    def notify_heads(self, streams: Iterable[str]) -> None:
        self.liveness.notify_heads(streams)

    # -- batches, one a topic ------------------------------------------------------------------

    def apply(self, gen: str, topic: str, expected: Mapping[int, int],
              messages: Iterable[Message], reached: Mapping[int, int],
              watermarks: Mapping[int, int], *, follow_live: bool) -> Folded:
        return self.records.apply(gen, topic, expected, messages, reached, watermarks,
                                  follow_live=follow_live)

    def apply_checkpoints(self, gen: str, topic: str, expected: Mapping[int, int],
                          messages: SideMessages, reached: Mapping[int, int],
                          watermarks: Mapping[int, int], *, follow_live: bool) -> Folded:
        return self.checkpoints.apply_checkpoints(gen, topic, expected, messages, reached,
                                                  watermarks, follow_live=follow_live)

    def apply_erasures(self, gen: str, topic: str, expected: Mapping[int, int],
                       messages: SideMessages, reached: Mapping[int, int],
                       watermarks: Mapping[int, int], *, follow_live: bool) -> Folded:
        return self.erasures.apply_erasures(gen, topic, expected, messages, reached,
                                            watermarks, follow_live=follow_live)

    def apply_log(self, gen: str, topic: str, expected: Mapping[int, int],
                  messages: SideMessages, reached: Mapping[int, int],
                  watermarks: Mapping[int, int], *, follow_live: bool) -> Folded:
        return self.log.apply_log(gen, topic, expected, messages, reached, watermarks,
                                  follow_live=follow_live)

    # -- a bulk load (projections.bulk) --------------------------------------------------------

    def bulk_state(self, gen: str) -> tuple[dict[str, ProjectedHead], dict[str, Any]]:
        return self.records.bulk_state(gen)

    def write_bulk(self, gen: str, topic: str, expected: Mapping[int, int], tuples: bytes,
                   rows: list[tuple[Any, ...]], folded: Folded, grown: tlog.Grown,
                   reached: Mapping[int, int], watermarks: Mapping[int, int],
                   before_commit: Callable[[], None] | None = None) -> dict[int, int]:
        return self.records.write_bulk(gen, topic, expected, tuples, rows, folded, grown,
                                       reached, watermarks, before_commit)

    def copy_records(self, gen: str, tuples: bytes, rows: list[tuple[Any, ...]],
                     before_commit: Callable[[], None]) -> None:
        self.records.copy_records(gen, tuples, rows, before_commit)
