"""The projections' errors, under the project's root ``schemas.EvidenceError``.

    EvidenceError
    └── ProjectionError            the projector or a rebuild cannot go on
        ├── StoreError             a PostgreSQL error; keeps its SQLSTATE (``.sqlstate``) and
        │                          says whether a new connection may succeed (``.transient``)
        ├── LogError               a Kafka client error; keeps librdkafka's code (``.code``);
        │                          also a server.kafka.KafkaClientError
        ├── GenerationChanged      the live generation is not the one being written (signal)
        ├── PositionsMoved         stored positions are not where this writer left them (signal)
        ├── RebuildBusy            another rebuild holds the rebuild lock
        └── RebuildMismatch        a rebuilt generation disagrees with the live one; no swap

psycopg errors are translated in ``projections.store``, and confluent-kafka errors by
:mod:`server.kafka` (called from ``projections.service``), each in one context manager. ``GenerationChanged`` and
``PositionsMoved`` are how the store tells the loop to discard a batch and re-seek; the loop
catches them, they never reach a user.

The projector heals a ``LogError`` and a transient ``StoreError`` (a lost connection, a
restarting server, a serialisation failure) by making its connections anew and seeking to the
positions stored in PostgreSQL; any other error ends it.
"""

from __future__ import annotations

from typing import Any

from evidence_contract import EvidenceError
from server.kafka import KafkaClientError

__all__ = [
    "GenerationChanged",
    "LogError",
    "PositionsMoved",
    "ProjectionError",
    "RebuildBusy",
    "RebuildMismatch",
    "StoreError",
]


class ProjectionError(EvidenceError):
    """Root of the projections' errors."""


class StoreError(ProjectionError):
    """A PostgreSQL error; ``sqlstate`` is PostgreSQL's code (None for connection errors);
    ``transient``: the connection or the server failed, not the statement, so the same work
    may succeed on a new connection."""

    def __init__(self, message: str, *, sqlstate: str | None = None,
                 transient: bool = False) -> None:
        super().__init__(f"{message} [SQLSTATE {sqlstate}]" if sqlstate else message)
        self.sqlstate = sqlstate
        self.transient = transient


class LogError(ProjectionError, KafkaClientError):
    """A Kafka client error; ``code``/``name`` and the flags are librdkafka's."""


class GenerationChanged(ProjectionError):
    """The live generation is now ``generation``; the batch in flight was rolled back."""

    def __init__(self, generation: str | None) -> None:
        super().__init__(f"live generation is now {generation!r}")
        self.generation = generation


class PositionsMoved(ProjectionError):
    """Another writer advanced this generation's positions; re-seek to ``positions``."""

    def __init__(self, positions: dict[int, int]) -> None:
        super().__init__(f"stored positions moved to {positions}")
        self.positions = positions


class RebuildBusy(ProjectionError):
    """Another rebuild of the same meta schema is running."""


class RebuildMismatch(ProjectionError):
    """The rebuilt generation disagrees with the live one; both are kept, nothing swapped.
    ``verdict``: which of them the log supports (``projections.rebuild.Verdict``), when the
    rebuild was given a judge."""

    def __init__(self, generation: str, live: str, differences: list[str],
                 verdict: Any = None) -> None:
        super().__init__(f"{generation} disagrees with live {live}: {len(differences)} differences")
        self.generation = generation
        self.live = live
        self.differences = differences
        self.verdict = verdict
