"""The writer's errors, under the project's root ``schemas.EvidenceError``.

    EvidenceError
    └── WriterError              the writer cannot go on
        ├── KafkaError           a Kafka client error; keeps librdkafka's code and flags
        │   └── FencedError      another writer took over this transactional/group identity
        └── StateMismatchError   writer-state heads disagree with the tail of the log

Kafka errors are translated in one place, ``writer.service._kafka_errors``; branch on these
classes and flags, never on message text. Bad input is never an error: it is a Rejection.
"""

from __future__ import annotations

from evidence_contract import EvidenceError

__all__ = ["FencedError", "KafkaError", "StateMismatchError", "WriterError"]


class WriterError(EvidenceError):
    """Root of the writer's errors."""


class KafkaError(WriterError):
    """A Kafka client error. ``code``/``name`` are librdkafka's; the flags are its verdict."""

    def __init__(self, message: str, *, code: int, name: str, fatal: bool = False,
                 retriable: bool = False, txn_requires_abort: bool = False) -> None:
        super().__init__(f"{message} [{name} ({code})]")
        self.code = code
        self.name = name
        self.fatal = fatal
        self.retriable = retriable
        self.txn_requires_abort = txn_requires_abort


class FencedError(KafkaError):
    """Another writer with the same transactional id (or group instance id) fenced this one."""


class StateMismatchError(WriterError):
    """The restored stream heads do not match the last records of the log: refuse to seal."""
