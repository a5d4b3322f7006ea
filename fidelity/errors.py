"""Errors of the fidelity analyzer."""

from evidence_contract.errors import EvidenceError


class ManifestError(EvidenceError):
    """The manifest does not follow the published ``evidence.replay-runtime`` v1 schema.

    ``problems`` lists each violation as ``"<json path>: <what is wrong>"``.
    """

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid replay-runtime manifest:\n  " + "\n  ".join(problems))
