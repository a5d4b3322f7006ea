"""Erasure requests and receipts: what travels from ``evidence erase`` to the writer and what
the writer signs. Pure; one rule each, shared by the server's erase path, the writer (which
signs), the projector (which folds ``evidence.erasures``) and any reader that verifies.

**The request** is an intake control message: key = the request id (UTF-8), header
``evidence-control: erase`` (:data:`CONTROL_ERASE`), value = JSON
``{"request_id", "key_ids": [32 hex, ...], "erased_at": µs, "reason": str | null}``
(:func:`encode_request` / :func:`decode_request`). It never carries the subject id: the log
must not learn who was erased, only which key ids were destroyed, when, under which request.

**The receipt** is a C2SP signed note by the log key (the checkpoints' signer) whose text is::

    <log name>/erasures
    request <request_id>
    erased_at <µs>
    key <32 hex>          one line per key id, sorted, none when nothing was live

(:func:`receipt_text`, :func:`parse_receipt`, :func:`open_receipt`). The reason stays out of
the signed text (free text, possibly personal); the writer passes it on as the
``evidence-reason`` header of the receipt message on ``evidence.erasures`` (key = request id).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .envelope import valid_key_id
from .errors import EvidenceError

__all__ = [
    "CONTROL_ERASE",
    "ErasureError",
    "ErasureRequest",
    "MAX_REASON_CHARS",
    "REASON_HEADER",
    "REQUEST_HEADER",
    "decode_request",
    "encode_request",
    "erasures_origin",
    "open_receipt",
    "parse_receipt",
    "receipt_text",
    "valid_request_id",
]

CONTROL_ERASE = "erase"
"""The ``evidence-control`` header value of an erasure request on intake."""
REASON_HEADER = "evidence-reason"
REQUEST_HEADER = "evidence-request-id"
MAX_REASON_CHARS = 1000

_REQUEST_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,199}")
_MAX_KEYS = 10_000


def valid_request_id(s: object) -> bool:
    """A request id: 1-200 characters of ``[A-Za-z0-9._:@/+=-]``, starting alphanumeric (it is
    one line of a signed note and a Kafka key; ``retention:<class>:<epoch>`` is one)."""
    return isinstance(s, str) and _REQUEST_ID_RE.fullmatch(s) is not None


class ErasureError(EvidenceError, ValueError):
    """A request or receipt that is not one (malformed, unsigned, wrong log)."""


@dataclass(frozen=True, slots=True)
class ErasureRequest:
    """One erasure: the key ids destroyed (sorted), when (UTC µs) and under which request."""

    request_id: str
    key_ids: tuple[str, ...]
    erased_at: int
    reason: str | None = None

    def __post_init__(self) -> None:
        if not valid_request_id(self.request_id):
            raise ErasureError(f"request id {self.request_id!r} is not one")
        if not isinstance(self.erased_at, int) or isinstance(self.erased_at, bool) \
                or self.erased_at < 0:
            raise ErasureError("erased_at is µs since the epoch, a non-negative integer")
        if len(self.key_ids) > _MAX_KEYS or not all(valid_key_id(k) for k in self.key_ids):
            raise ErasureError("key_ids are key ids (32 lowercase hex digits)")
        if tuple(sorted(set(self.key_ids))) != tuple(self.key_ids):
            object.__setattr__(self, "key_ids", tuple(sorted(set(self.key_ids))))
        if self.reason is not None and (not isinstance(self.reason, str)
                                        or len(self.reason) > MAX_REASON_CHARS):
            raise ErasureError(f"reason is a text of at most {MAX_REASON_CHARS} characters")


def encode_request(req: ErasureRequest) -> bytes:
    """The control message's value (JSON, keys sorted)."""
    return json.dumps({"request_id": req.request_id, "key_ids": list(req.key_ids),
                       "erased_at": req.erased_at, "reason": req.reason},
                      sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_request(value: bytes | None) -> ErasureRequest:
    """The request a control message carries; raises :class:`ErasureError`."""
    try:
        doc = json.loads(bytes(value or b"").decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ErasureError(f"an erasure request is JSON: {e}") from None
    if not isinstance(doc, dict) or set(doc) - {"request_id", "key_ids", "erased_at", "reason"}:
        raise ErasureError("an erasure request is an object of request_id, key_ids, "
                           "erased_at, reason")
    keys = doc.get("key_ids")
    if not isinstance(keys, list):
        raise ErasureError("key_ids is a list")
    return ErasureRequest(doc.get("request_id"), tuple(keys), doc.get("erased_at"),
                          doc.get("reason"))


def erasures_origin(log_name: str) -> str:
    """``<log name>/erasures``: the first line of every receipt of the log."""
    return f"{log_name}/erasures"


def receipt_text(log_name: str, req: ErasureRequest) -> str:
    """The text the log key signs for ``req`` (module docstring)."""
    lines = [erasures_origin(log_name), f"request {req.request_id}", f"erased_at {req.erased_at}"]
    lines += [f"key {k}" for k in req.key_ids]
    return "\n".join(lines) + "\n"


def parse_receipt(log_name: str, text: str) -> ErasureRequest:
    """The request a receipt's text states (reason None); raises :class:`ErasureError`."""
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "" or lines[0] != erasures_origin(log_name):
        raise ErasureError(f"a receipt of the log {log_name!r} starts with "
                           f"{erasures_origin(log_name)!r}")
    req_line, at_line, key_lines = lines[1], lines[2], lines[3:-1]
    if not req_line.startswith("request ") or not at_line.startswith("erased_at "):
        raise ErasureError("a receipt's second and third lines are request and erased_at")
    at = at_line.removeprefix("erased_at ")
    if not re.fullmatch(r"0|[1-9][0-9]{0,18}", at):
        raise ErasureError("erased_at is a decimal integer")
    keys = []
    for line in key_lines:
        if not line.startswith("key "):
            raise ErasureError(f"unexpected receipt line {line[:60]!r}")
        keys.append(line.removeprefix("key "))
    if keys != sorted(set(keys)):
        raise ErasureError("a receipt's key lines are sorted and distinct")
    return ErasureRequest(req_line.removeprefix("request "), tuple(keys), int(at))


def open_receipt(data: bytes | str, log_key) -> ErasureRequest:
    """Verify a receipt note: signed by ``log_key`` (a ``note.VerifierKey``), a receipt of
    that log; returns what it states. Raises :class:`ErasureError` (or ``note.NoteError``,
    also an ``EvidenceError``)."""
    from .note import open_note

    note = open_note(data, [log_key])
    if (log_key.name, log_key.key_id) not in {(s.name, s.key_id) for s in note.verified}:
        raise ErasureError(f"the receipt is not signed by {log_key.name}+{log_key.key_id:08x}")
    return parse_receipt(log_key.name, note.text)
