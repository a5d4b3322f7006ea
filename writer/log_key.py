"""The log's signing key, read once at start from ``EVIDENCE_LOG_SIGNING_KEY_FILE``.

The rules are :func:`server.log_key.load_signing_key`'s (owner-only file, an Ed25519 note
signer key named as the log); the writer refuses to start with :class:`SigningKeyError`.
"""

from __future__ import annotations

from evidence_contract.note import SignerKey
from server.log_key import load_signing_key
from writer.errors import SigningKeyError

__all__ = ["load_log_key"]


def load_log_key(path: str, log_name: str) -> SignerKey:
    """Return the signer key in ``path``; raises :class:`SigningKeyError` with the reason."""
    return load_signing_key(path, log_name, SigningKeyError)
