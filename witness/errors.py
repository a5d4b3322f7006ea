"""Errors of the witness.

    EvidenceError (evidence_contract)
    └── WitnessError        the witness cannot run (a key, its state, its configuration)

A checkpoint the witness refuses is no error: it is a :class:`witness.core.Refusal`, logged
and recorded, and the witness goes on.
"""

from evidence_contract.errors import EvidenceError

__all__ = ["WitnessError"]


class WitnessError(EvidenceError):
    """The witness cannot run: its key, its state directory or its configuration is wrong."""
