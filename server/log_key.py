"""A log's signing key, read from a file that only its owner may read (writer, publisher).

The file holds the C2SP note signer key text (``evidence_contract.note.format_skey``), one
line. :func:`load_signing_key` refuses (raising ``error``) a file readable or writable by its
group or others (a key others can read is a key others can sign with), one that is not a
signer key, not an Ed25519 one, or names another log than ``EVIDENCE_LOG_NAME``: each would
sign checkpoints nobody should trust.
"""

from __future__ import annotations

import os
import stat

from evidence_contract.note import SIG_ED25519, NoteError, SignerKey, parse_skey

__all__ = ["load_signing_key"]


def load_signing_key(path: str, log_name: str,
                     error: type[Exception] = ValueError) -> SignerKey:
    """Return the signer key in ``path``; raises ``error`` with the reason."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise error(f"EVIDENCE_LOG_SIGNING_KEY_FILE {path}: cannot open: "
                              f"{e.strerror}") from e
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"EVIDENCE_LOG_SIGNING_KEY_FILE {path} is not a regular file")
        if mode & 0o077:
            raise error(
                f"EVIDENCE_LOG_SIGNING_KEY_FILE {path} has mode {stat.S_IMODE(mode):04o}: "
                f"group or others may access it; chmod 600 it")
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(4096)
    finally:
        os.close(fd)
    try:
        key = parse_skey(raw.decode("ascii").strip())
    except (UnicodeDecodeError, NoteError) as e:
        raise error(f"EVIDENCE_LOG_SIGNING_KEY_FILE {path} holds no note signer "
                              f"key: {e}") from None
    if key.sig_type != SIG_ED25519:
        raise error(f"EVIDENCE_LOG_SIGNING_KEY_FILE {path} is a "
                              f"{key.sig_type:#04x} key; a log signs with Ed25519 (0x01)")
    if key.name != log_name:
        raise error(f"the log key is named {key.name!r} but EVIDENCE_LOG_NAME is "
                              f"{log_name!r}; they must be the same")
    return key
