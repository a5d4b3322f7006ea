"""Erasure receipts, the writer's pure part: an ``evidence-control: erase`` intake message in,
a receipt signed by the log key out, staged with the batch's transaction.

``server.erasure.erase_subject`` destroys a subject's keys, then produces the request to
intake (key = request id, value = ``evidence_contract.erasure.encode_request``). The writer
never seals it into the log: it signs ``evidence_contract.erasure.receipt_text`` with the log
key (the checkpoints' signer) and produces the note to ``<prefix>.erasures`` on the intake
message's partition, in the same transaction that commits the request's intake offset, so a
receipt exists iff the request is consumed.

:class:`Receipts` decides each request (:meth:`Receipts.handle`):

- no log key: **refused** (the writer logs an error and counts it; the offset commits: a
  request the writer cannot sign for would otherwise block its partition forever). The keys
  are destroyed all the same; the request is sent again, with the same request id, once the
  writer has a key (``evidence erase --request-id``);
- a value that is not a request: **invalid** (logged, counted, offset committed);
- a request id already receipted on this partition (committed, or earlier in the open
  transaction): **duplicate**, nothing produced: a retry gives one receipt;
- otherwise **issued**.

Which request ids a partition has receipted is read back from ``<prefix>.erasures`` when the
partition is assigned (``writer.restore.read_receipted``): receipts are few, the partition is
read whole.

No Kafka, no clock, no file I/O: the signing key is handed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from evidence_contract.erasure import (
    CONTROL_ERASE as _CONTROL_ERASE,
    REASON_HEADER,
    REQUEST_HEADER,
    ErasureError,
    ErasureRequest,
    decode_request,
    receipt_text,
)
from evidence_contract.note import SignerKey, format_note, sign
from evidence_contract.tlog import CONTROL_HEADER, DEFAULT_LOG_NAME

__all__ = [
    "CONTROL_ERASE",
    "DUPLICATE",
    "INVALID",
    "ISSUED",
    "REFUSED",
    "Decision",
    "Receipts",
    "is_erase_request",
    "receipt_headers",
    "sign_receipt",
]

CONTROL_ERASE = _CONTROL_ERASE.encode("ascii")
ISSUED, DUPLICATE, REFUSED, INVALID = "issued", "duplicate", "refused", "invalid"


def is_erase_request(headers: Iterable[tuple[str, bytes | None]] | None) -> bool:
    """Whether an intake message is an erasure request (``evidence-control: erase``)."""
    return any(k == CONTROL_HEADER and v == CONTROL_ERASE for k, v in headers or ())


def sign_receipt(signer: SignerKey, req: ErasureRequest) -> bytes:
    """The signed receipt note of ``req`` (the log's name is the key's)."""
    text = receipt_text(signer.name, req)
    return format_note(text, [sign(signer, text)])


def receipt_headers(req: ErasureRequest) -> list[tuple[str, bytes]]:
    """The headers of a receipt message: the request id and, when given, the reason."""
    out = [(REQUEST_HEADER, req.request_id.encode("utf-8"))]
    if req.reason is not None:
        out.append((REASON_HEADER, req.reason.encode("utf-8")))
    return out


@dataclass(frozen=True, slots=True)
class Decision:
    """What became of one request. ``note`` and ``request`` are set when ``ISSUED``."""

    outcome: str
    partition: int
    detail: str = ""
    request: ErasureRequest | None = None
    note: bytes = b""

    @property
    def request_id(self) -> str | None:
        return self.request.request_id if self.request is not None else None


class Receipts:
    """The request ids receipted per owned partition, with a per-transaction overlay (as
    :class:`~writer.checkpoints.Trees` holds the trees). ``signer`` is the log key (None:
    every request is refused)."""

    def __init__(self, signer: SignerKey | None = None,
                 log_name: str = DEFAULT_LOG_NAME) -> None:
        if signer is not None and signer.name != log_name:
            raise ValueError(f"the log key is named {signer.name!r}, the log {log_name!r}")
        self.signer = signer
        self.log_name = log_name
        self._parts: dict[int, set[str]] = {}
        self._pending: dict[int, set[str]] = {}

    def assign(self, partition: int, receipted: Iterable[str]) -> None:
        self._parts[partition] = set(receipted)

    def revoke(self, partition: int) -> None:
        self._parts.pop(partition, None)
        self._pending.pop(partition, None)

    def receipted(self, partition: int, request_id: str) -> bool:
        return request_id in self._parts.get(partition, ()) \
            or request_id in self._pending.get(partition, ())

    def handle(self, partition: int, value: bytes | None) -> Decision:
        """Decide one request of the open transaction (module docstring)."""
        try:
            req = decode_request(value)
        except ErasureError as e:
            return Decision(INVALID, partition, str(e))
        if self.signer is None:
            return Decision(REFUSED, partition, "the writer has no log key "
                            "(EVIDENCE_LOG_SIGNING_KEY_FILE): no receipt can be signed", req)
        if self.receipted(partition, req.request_id):
            return Decision(DUPLICATE, partition, "already receipted", req)
        self._pending.setdefault(partition, set()).add(req.request_id)
        return Decision(ISSUED, partition, "", req, sign_receipt(self.signer, req))

    def commit(self) -> None:
        for p, ids in self._pending.items():
            if p in self._parts:
                self._parts[p] |= ids
        self._pending = {}

    def abort(self) -> None:
        self._pending = {}
