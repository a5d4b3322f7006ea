"""Errors of the audit."""

from evidence_contract.errors import EvidenceError


class AuditError(EvidenceError):
    """The audit could not run (Kafka or PostgreSQL unreachable, a topic missing)."""
