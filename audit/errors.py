"""Errors of the audit.

    EvidenceError (evidence_contract)
    └── AuditError             the audit could not run
        └── AuditKafkaError    a Kafka client error (also a server.kafka.KafkaClientError)
"""

from evidence_contract.errors import EvidenceError
from server.kafka import KafkaClientError

__all__ = ["AuditError", "AuditKafkaError"]


class AuditError(EvidenceError):
    """The audit could not run (Kafka or PostgreSQL unreachable, a topic missing)."""


class AuditKafkaError(AuditError, KafkaClientError):
    """Reading the log or the writer's heads failed in the Kafka client; librdkafka's code,
    name and flags are kept (translated by :mod:`server.kafka`)."""
