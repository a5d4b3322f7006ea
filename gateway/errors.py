"""The gateway's errors, all under the project's root ``schemas.EvidenceError``.

    EvidenceError                 (schemas)
    └── GatewayError              anything the gateway raises on purpose
        ├── ConfigError           a Recorder was configured wrongly (raised at construction/start)
        ├── SpoolError            the local spool cannot be opened or written
        │   └── SpoolLockedError  another Recorder holds the spool directory
        └── ProducerError         Kafka refused or failed a produce; ``.code`` keeps librdkafka's
            └── QueueFull         the producer's local queue is full (confluent-kafka BufferError)

Only ``ConfigError`` and ``SpoolError`` from an explicit ``Recorder.start()`` ever reach an
application; failures while capturing a call are logged and counted, never raised into it.
"""

from __future__ import annotations

from evidence_contract import EvidenceError

__all__ = [
    "ConfigError",
    "GatewayError",
    "ProducerError",
    "QueueFull",
    "SpoolError",
    "SpoolLockedError",
]


class GatewayError(EvidenceError):
    """Root of the gateway's errors."""


class ConfigError(GatewayError, ValueError):
    """A Recorder argument is invalid (stream id, policy, timeouts, flavor)."""


class SpoolError(GatewayError):
    """The local spool could not be opened, read or written."""


class SpoolLockedError(SpoolError):
    """Another Recorder (in this or another process) has the spool directory open."""


class ProducerError(GatewayError):
    """A Kafka produce failed; ``code`` is librdkafka's error code (``KafkaError.code()``)."""

    def __init__(self, message: str, code: int | None = None, retriable: bool = False,
                 fatal: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retriable = retriable
        self.fatal = fatal


class QueueFull(ProducerError):
    """The producer's in-memory queue is full; the capture goes to the spool instead."""
