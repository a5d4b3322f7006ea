"""The single writer: seals captures from ``<prefix>.intake`` into the hash-chained log.

Exactly once, in one Kafka transaction per batch: sealed records to ``<prefix>.log``, new
stream heads to ``<prefix>.writer-state``, bad input verbatim to ``<prefix>.rejected``, and
the intake offsets. Run it with ``evidence writer``.

Modules, pure first:
    reasons   Reason — why an intake message was rejected (header ``evidence.reason``)
    core      validate, seal_capture, DedupWindow, Sealer — no Kafka, no clock, no I/O
    config    WriterConfig — from ``EVIDENCE_*`` env vars and CLI flags
    errors    WriterError tree under schemas.EvidenceError
    metrics   WriterMetrics — Prometheus counters and histograms
    logs      log() — JSON-lines structured logs on stderr
    service   WriterService — the Kafka shell (the only module importing confluent_kafka)
    cli       the ``evidence writer`` subcommand
"""

__version__ = "0.1.0"

from writer.config import WriterConfig  # noqa: E402
from writer.core import (  # noqa: E402
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
from writer.errors import FencedError, KafkaError, StateMismatchError, WriterError  # noqa: E402
from writer.reasons import Reason  # noqa: E402

__all__ = [
    "Capture",
    "DedupWindow",
    "Duplicate",
    "FencedError",
    "Head",
    "KafkaError",
    "Reason",
    "Rejection",
    "Sealed",
    "Sealer",
    "StateMismatchError",
    "WriterConfig",
    "WriterError",
    "__version__",
    "seal_capture",
    "validate",
]
