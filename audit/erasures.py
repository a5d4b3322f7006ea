"""The log's erasure receipts, as the audit reads them (pure): which key ids were destroyed.

Every message of ``<prefix>.erasures`` is a signed note (``evidence_contract.erasure``). With
the log's verifier key each is verified and a bad one is an ``erasure_receipt_invalid``
finding (never a crash); without it the receipts' text is read unverified, and the report
says so: the erased count is informational (an erased record is not a finding either way,
its proofs still hold), so an unverified receipt can at worst mislabel content as erased
that the audit could not read anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evidence_contract.chain import Finding
from evidence_contract.erasure import ErasureError, ErasureRequest, open_receipt, parse_receipt
from evidence_contract.errors import EvidenceError

__all__ = ["ERASURE_RECEIPT_INVALID", "Erasures", "receipt_request"]

ERASURE_RECEIPT_INVALID = "erasure_receipt_invalid"


def receipt_request(value: bytes, log_key: Any = None) -> ErasureRequest:
    """What a receipt states: verified with ``log_key``, else read from its text alone.
    Raises ``ErasureError`` / ``NoteError`` (both ``EvidenceError``)."""
    if log_key is not None:
        return open_receipt(value, log_key)
    text, sep, _sigs = bytes(value).decode("utf-8").partition("\n\n")
    if not sep:
        raise ErasureError("a receipt is a signed note: text, a blank line, signatures")
    text += "\n"
    origin = text.split("\n", 1)[0]
    if not origin.endswith("/erasures"):
        raise ErasureError("a receipt's first line is <log name>/erasures")
    return parse_receipt(origin.removesuffix("/erasures"), text)


@dataclass
class Erasures:
    """Receipts read so far: key id (32 hex) -> (erased_at µs, request id)."""

    log_key: Any = None
    keys: dict[str, tuple[int, str]] = field(default_factory=dict)
    receipts: int = 0
    findings: list[Finding] = field(default_factory=list)

    def add(self, partition: int, offset: int, value: bytes | None) -> None:
        try:
            req = receipt_request(value or b"", self.log_key)
        except (EvidenceError, UnicodeDecodeError, ValueError) as e:
            self.findings.append(Finding(ERASURE_RECEIPT_INVALID, None, None,
                                         f"evidence.erasures {partition}:{offset}: {e}",
                                         partition, offset))
            return
        self.receipts += 1
        for k in req.key_ids:
            self.keys.setdefault(k, (req.erased_at, req.request_id))

    def summary(self) -> dict[str, Any]:
        return {"receipts": self.receipts, "erased_keys": len(self.keys),
                "verified": self.log_key is not None}
