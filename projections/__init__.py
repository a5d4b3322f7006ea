"""PostgreSQL projections of the evidence log: disposable, rebuilt from offset zero.

- :mod:`projections.fold` — one projection step, pure: heads + records → rows, heads,
  findings (the chain step's, ``evidence_contract.chain``).
- :mod:`projections.rows` — a log message to a ``records`` row (pure).
- :mod:`projections.ddl` — generation schemas, the stable ``evidence`` views, the swap.
- :mod:`projections.store` — PostgreSQL: ``Store``, the front over the role stores, one
  connection (:mod:`projections.pg`, the only module importing psycopg) shared by
  :mod:`~projections.generations`, :mod:`~projections.liveness`,
  :mod:`~projections.records` (batches by binary COPY, positions in the same transaction),
  :mod:`~projections.trees`, :mod:`~projections.sidefeeds` and :mod:`~projections.logstore`.
- :mod:`projections.service` — the projector loop over its feeds; its Kafka consumer is
  :mod:`projections.reader` (with :mod:`projections.heartbeat`, the only modules importing
  confluent-kafka).
- :mod:`projections.rebuild` — blue/green rebuild with checks, and ``--in-place``; what it
  compares is :mod:`projections.compare`.
- :mod:`projections.cli` (and :mod:`cli.projections`) — ``evidence projector`` and
  ``evidence projections rebuild|status``.
- :mod:`projections.errors` — ``ProjectionError`` and below (see its docstring for the tree).

Importing this package imports only the pure parts; the service modules load on use.
"""

from .config import STALE_HEARTBEAT_S, ProjectorConfig
from .errors import (
    GenerationChanged,
    LogError,
    PositionsMoved,
    ProjectionError,
    RebuildBusy,
    RebuildMismatch,
    StoreError,
)
from .fold import Folded, ProjectedHead, Record, Undecodable, decode_message, fold
from .rows import RECORD_COLUMNS, RECORD_TYPES, record_row

__all__ = [
    "Folded",
    "GenerationChanged",
    "LogError",
    "PositionsMoved",
    "ProjectedHead",
    "ProjectionError",
    "ProjectorConfig",
    "RECORD_COLUMNS",
    "RECORD_TYPES",
    "RebuildBusy",
    "RebuildMismatch",
    "Record",
    "STALE_HEARTBEAT_S",
    "StoreError",
    "Undecodable",
    "decode_message",
    "fold",
    "record_row",
]
