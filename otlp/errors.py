"""The receiver's errors, each the HTTP status OTLP/HTTP prescribes for it.

    EvidenceError                  (evidence_contract)
    └── OtlpError                  an OTLP/HTTP request the receiver cannot take
        ├── BadRequestError        400: the body is not a valid export request (not retried);
        │                          the message goes into the google.rpc.Status body
        ├── TooLargeError          413: the body, decompressed, exceeds the size cap
        └── UnsupportedMediaError  415: a content type or content encoding OTLP/HTTP does not use
    └── UnmappableError            a GenAI span or event that cannot become a capture (ids not
                                   a W3C trace context, no scope name, ...): rejected in the
                                   200's partial_success, the rest of the request is taken

The HTTP layer branches on the class and reads ``status`` from it; never on message text.
"""

from __future__ import annotations

from evidence_contract.errors import EvidenceError


class OtlpError(EvidenceError):
    """An OTLP/HTTP request the receiver cannot take; ``status`` is its HTTP status."""

    status: int = 400


class BadRequestError(OtlpError):
    """The body does not decode as the export request (400, with a google.rpc.Status)."""

    status = 400


class TooLargeError(OtlpError):
    """The body exceeds the size cap once decompressed (413)."""

    status = 413

    def __init__(self, cap: int) -> None:
        super().__init__(f"the request body exceeds {cap} bytes once decompressed")
        self.cap = cap


class UnsupportedMediaError(OtlpError):
    """A content type or content encoding other than OTLP/HTTP's (415)."""

    status = 415


class UnmappableError(EvidenceError):
    """A GenAI span or inference event that cannot become a capture of the record contract;
    the receiver counts it in ``partial_success`` (rejected), with this message."""
