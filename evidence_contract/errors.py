"""The project's error tree.

    EvidenceError          root of every error evidence-store raises on purpose
    ├── EncodeError        a record does not match its Avro schema
    └── DecodeError        bytes are not a single-object-encoded record we know
        └── TruncatedError the bytes end before the record does

Other packages derive their own errors from ``EvidenceError`` and import it from ``schemas``.
"""

from __future__ import annotations


class EvidenceError(Exception):
    """Root of all evidence-store errors; catch this to catch any of them."""


class EncodeError(EvidenceError):
    """A record does not match its schema (missing, extra or mistyped field)."""


class DecodeError(EvidenceError):
    """Bytes are not a valid single-object encoding of a known schema.

    Raised for a wrong or missing marker, an unknown fingerprint, a truncated or
    malformed body, and trailing bytes after the body.
    """


class TruncatedError(DecodeError):
    """The bytes end before the record does (a cut-off message)."""
