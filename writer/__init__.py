"""The single writer: seals captures from ``<prefix>.intake`` into the hash-chained log.

Exactly once, in one Kafka transaction per batch: sealed records to ``<prefix>.log``, new
stream heads to ``<prefix>.writer-state``, bad input verbatim to ``<prefix>.rejected``, and
the intake offsets. Run it with ``evidence writer``.

Modules, pure first:
    reasons   Reason — why an intake message was rejected (header ``evidence.reason``)
    core      validate, seal_capture, DedupWindow, Sealer — no Kafka, no clock, no I/O
    config    WriterConfig — from ``EVIDENCE_*`` env vars and CLI flags
    errors    WriterError tree under evidence_contract.EvidenceError
    metrics   WriterMetrics — Prometheus counters and histograms
    kafka_io  KafkaClients and the librdkafka calls (the only module importing confluent_kafka)
    restore   restore() — a partition's heads and dedup window, read back from Kafka
    loop      SealLoop — one batch, one transaction; abort, rewind, commit retry
    service   WriterService — start, run, close; librdkafka's callbacks; healing (clients made
              anew after Kafka failures; exit 3 only when a live rival holds the identity)
    cli       the ``evidence writer`` subcommand

Logs are JSON lines from :mod:`server.logs` (logger ``evidence.writer``); the version sealed
into each record's writer identity is :func:`server.version.version`.
"""

from writer.config import WriterConfig
from writer.core import (
    Capture,
    DedupWindow,
    Duplicate,
    Head,
    Rejection,
    Sealed,
    Sealer,
    seal_capture,
    validate,
)
from writer.errors import (
    FencedError,
    StateMismatchError,
    WedgedError,
    WriterError,
    WriterKafkaError,
)
from writer.reasons import Reason

__all__ = [
    "Capture",
    "DedupWindow",
    "Duplicate",
    "FencedError",
    "Head",
    "Reason",
    "Rejection",
    "Sealed",
    "Sealer",
    "StateMismatchError",
    "WedgedError",
    "WriterConfig",
    "WriterError",
    "WriterKafkaError",
    "seal_capture",
    "validate",
]
