"""The writer's errors, under the project's root ``evidence_contract.EvidenceError``.

    EvidenceError
    ├── WriterError                  the writer cannot go on
    │   ├── WriterKafkaError         a Kafka client error; keeps librdkafka's code and flags
    │   │   └── FencedError          another writer took over this transactional/group identity
    │   └── StateMismatchError       writer-state heads disagree with the tail of the log
    └── server.kafka.KafkaClientError  (WriterKafkaError is one; FencedError also a
        └── server.kafka.FencedError    server.kafka.FencedError)

librdkafka errors are translated in one place, :mod:`server.kafka` (the writer calls it through
``writer.kafka_io.kafka_errors``); branch on these classes and flags, never on message text.
Bad input is never an error: it is a Rejection.
"""

from __future__ import annotations

from evidence_contract import EvidenceError
from server import kafka

__all__ = ["FencedError", "StateMismatchError", "WriterError", "WriterKafkaError"]


class WriterError(EvidenceError):
    """Root of the writer's errors."""


class WriterKafkaError(WriterError, kafka.KafkaClientError):
    """A Kafka client error. ``code``/``name`` are librdkafka's; the flags are its verdict."""


class FencedError(WriterKafkaError, kafka.FencedError):
    """Another writer with the same transactional id (or group instance id) fenced this one."""


class StateMismatchError(WriterError):
    """The restored stream heads do not match the last records of the log: refuse to seal."""
