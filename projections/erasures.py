"""Erasure receipts' projection step, pure: ``evidence.erasures`` messages to ``erasures`` rows.

Each message is a receipt the writer signed with the log key (``evidence_contract.erasure``):
the request id, when, and the key ids destroyed. :func:`decode_receipt` verifies the log's
signature (with the log key; without one configured it only parses, and the origin must still
be ``<log name>/erasures``) and gives one :class:`ErasureRow`; anything unreadable, unsigned,
of another log or whose header names another request is an ``erasure_invalid`` finding at its
position, never an error. A record is *erased* when its ``key_id`` is in ``erasures``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from evidence_contract import EvidenceError
from evidence_contract import note as _note
from evidence_contract.chain import Finding
from evidence_contract.erasure import (
    MAX_REASON_CHARS,
    REASON_HEADER,
    REQUEST_HEADER,
    ErasureRequest,
    open_receipt,
    parse_receipt,
)

__all__ = ["ERASURE_INVALID", "KINDS", "ErasureRow", "decode_receipt"]

ERASURE_INVALID = "erasure_invalid"
KINDS = (ERASURE_INVALID,)
"""The findings of the erasure fold, beside the chain's and the checkpoints'."""

Headers = Sequence[tuple[str, bytes | None]] | None


@dataclass(frozen=True)
class ErasureRow:
    """A receipt the log signed, at its position on ``evidence.erasures``."""

    request: ErasureRequest
    note: bytes
    partition: int
    offset: int

    def rows(self) -> list[tuple]:
        """``(request_id, key_id, erased_at_us, note, partition, offset, reason)`` per key id
        (one with a null key id for a request that erased nothing)."""
        r = self.request
        keys: list[bytes | None] = [bytes.fromhex(k) for k in r.key_ids] or [None]
        return [(r.request_id, k, r.erased_at, self.note, self.partition, self.offset, r.reason)
                for k in keys]


def _header(headers: Headers, name: str) -> str | None:
    for k, v in headers or ():
        if k == name and v is not None:
            return bytes(v).decode("utf-8", "replace")
    return None


def decode_receipt(partition: int, offset: int, value: bytes | None, headers: Headers,
                   log_name: str, log_key: _note.VerifierKey | None
                   ) -> list[ErasureRow | Finding]:
    """Read one ``evidence.erasures`` message; never raises for bad bytes."""
    named = _header(headers, REQUEST_HEADER)

    def invalid(reason: str) -> list[ErasureRow | Finding]:
        return [Finding(ERASURE_INVALID, None, None,
                        f"erasure receipt{f' {named!r}' if named else ''}: {reason}",
                        partition, offset)]

    if value is None:
        return invalid("message has no value")
    try:
        if log_key is not None:
            req = open_receipt(value, log_key)
        else:
            req = parse_receipt(log_name, _note.parse_note(value).text)
    except EvidenceError as e:  # NoteError, ErasureError
        return invalid(str(e))
    if named is not None and named != req.request_id:
        return invalid(f"the header names request {named!r}, the signed text {req.request_id!r}")
    reason = _header(headers, REASON_HEADER)
    reason = reason[:MAX_REASON_CHARS] if reason is not None else None
    return [ErasureRow(ErasureRequest(req.request_id, req.key_ids, req.erased_at, reason),
                       bytes(value), partition, offset)]
