"""The log's signing key, read once at start from ``EVIDENCE_LOG_SIGNING_KEY_FILE``.

The file holds the C2SP note signer key text (``evidence_contract.note.format_skey``), one
line. The writer refuses to start (:class:`~writer.errors.SigningKeyError`) when the file is
readable or writable by its group or others (a key others can read is a key others can sign
with), is not a signer key, is not an Ed25519 one, or names another log than
``EVIDENCE_LOG_NAME``: each would sign checkpoints nobody should trust.
"""

from __future__ import annotations

import os
import stat

from evidence_contract.note import SIG_ED25519, NoteError, SignerKey, parse_skey
from writer.errors import SigningKeyError

__all__ = ["load_log_key"]


def load_log_key(path: str, log_name: str) -> SignerKey:
    """Return the signer key in ``path``; raises :class:`SigningKeyError` with the reason."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise SigningKeyError(f"EVIDENCE_LOG_SIGNING_KEY_FILE {path}: cannot open: "
                              f"{e.strerror}") from e
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise SigningKeyError(f"EVIDENCE_LOG_SIGNING_KEY_FILE {path} is not a regular file")
        if mode & 0o077:
            raise SigningKeyError(
                f"EVIDENCE_LOG_SIGNING_KEY_FILE {path} has mode {stat.S_IMODE(mode):04o}: "
                f"group or others may access it; chmod 600 it")
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(4096)
    finally:
        os.close(fd)
    try:
        key = parse_skey(raw.decode("ascii").strip())
    except (UnicodeDecodeError, NoteError) as e:
        raise SigningKeyError(f"EVIDENCE_LOG_SIGNING_KEY_FILE {path} holds no note signer "
                              f"key: {e}") from None
    if key.sig_type != SIG_ED25519:
        raise SigningKeyError(f"EVIDENCE_LOG_SIGNING_KEY_FILE {path} is a "
                              f"{key.sig_type:#04x} key; a log signs with Ed25519 (0x01)")
    if key.name != log_name:
        raise SigningKeyError(f"the log key is named {key.name!r} but EVIDENCE_LOG_NAME is "
                              f"{log_name!r}; they must be the same")
    return key
