"""The gateway's errors, all under the project's root ``schemas.EvidenceError``.

    EvidenceError                 (schemas)
    └── GatewayError              anything the gateway raises on purpose
        ├── ConfigError           a Recorder was configured wrongly (raised at construction/start)
        ├── RecorderUnavailable   the Recorder could not start: raised at every call it would
        │                         have recorded, so no call goes unrecorded without a sign
        ├── SpoolError            the local spool cannot be opened or written
        │   └── SpoolLockedError  another Recorder holds the spool directory
        ├── ProducerError         Kafka refused or failed a produce; ``.code`` keeps librdkafka's
        │   └── QueueFull         the producer's local queue is full (confluent-kafka BufferError)
        └── ReplayError           the evidence API could not answer a read (replay.py adds
            │                     ReplayMiss, ReplayErased, ReplayRedacted under it)
            └── EvidenceUnverified   what it served failed the reader's check: never handed out
                ├── EvidenceTampered       a signature, hash, proof or digest does not hold
                │   └── CheckpointRolledBack   older than, or a fork of, a checkpoint seen before
                ├── EvidenceUnwitnessed    fewer witness cosignatures than required
                └── EvidenceUncovered      no signed checkpoint covers the record yet

``ConfigError`` reaches an application at construction, ``SpoolError``/``ProducerError`` from
an explicit ``Recorder.start()``, and ``RecorderUnavailable`` from a call through a capture
client whose Recorder cannot start. Failures while capturing one call are logged and counted,
never raised into it.
"""

from __future__ import annotations

from evidence_contract import EvidenceError

__all__ = [
    "CheckpointRolledBack",
    "ConfigError",
    "EvidenceTampered",
    "EvidenceUncovered",
    "EvidenceUnverified",
    "EvidenceUnwitnessed",
    "GatewayError",
    "ProducerError",
    "QueueFull",
    "RecorderUnavailable",
    "ReplayError",
    "SpoolError",
    "SpoolLockedError",
]


class GatewayError(EvidenceError):
    """Root of the gateway's errors."""


class ConfigError(GatewayError, ValueError):
    """A Recorder argument is invalid (stream id, policy, timeouts, flavor)."""


class RecorderUnavailable(GatewayError):
    """The Recorder cannot start (spool directory unusable, bad producer config); the cause is
    chained. Raised into the application at each call instead of making it unrecorded."""


class SpoolError(GatewayError):
    """The local spool could not be opened, read or written."""


class SpoolLockedError(SpoolError):
    """Another Recorder (in this or another process) has the spool directory open."""


class ProducerError(GatewayError):
    """A Kafka produce failed; ``code`` is librdkafka's error code (``KafkaError.code()``) and
    ``kind`` its class: ``"retry"``, ``"too_large"`` or ``"permanent"`` (``producer.classify``)."""

    def __init__(self, message: str, code: int | None = None, retriable: bool = False,
                 fatal: bool = False, kind: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind or ("retry" if retriable else "permanent")
        self.retriable = self.kind == "retry"
        self.fatal = fatal


class QueueFull(ProducerError):
    """The producer's in-memory queue is full; the capture goes to the spool instead."""


class ReplayError(GatewayError):
    """The evidence API could not answer a replay (unreachable, unauthorised, failing)."""


class EvidenceUnverified(ReplayError):
    """What the evidence API served did not pass the reader's check, so it is not handed out:
    the root of the verification errors (``evidence_contract.bundle.Unverified``)."""


class EvidenceTampered(EvidenceUnverified):
    """A check failed: a signature, a hash, a proof or a digest. What the API served is not
    what the log sealed and signed; the projection (or the API) has been altered."""


class CheckpointRolledBack(EvidenceTampered):
    """The log's checkpoint is older than, or forks from, one this reader verified before."""


class EvidenceUnwitnessed(EvidenceUnverified):
    """The checkpoint lacks the witness cosignatures the reader requires."""


class EvidenceUncovered(EvidenceUnverified):
    """No signed checkpoint covered the record within the reader's wait (one is signed
    every few seconds; the record may be newer than the latest)."""
