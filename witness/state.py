"""A witness's files: its key and its state directory (the only module here that writes).

    <key file>                     PRIVATE+KEY+<name>+<id>+<base64(type || seed)>  (mode 0600;
                                   type 0x04 Ed25519 cosignature/v1 or 0x06 ML-DSA-44)
    <state>/checkpoints/<origin>   the last note it cosigned for <origin> (URL-quoted name)
    <state>/refusals.jsonl         one JSON object per refused checkpoint, appended

Every checkpoint file is replaced atomically (a temporary file in the same directory, fsync,
rename, fsync of the directory), so a crash leaves the old checkpoint or the new one, never a
mix; the witness writes it *before* it hands its cosignature to anyone, so it can never have
cosigned something it has forgotten (the C2SP witness protocol's requirement). A lost state
directory means a new witness: its old cosignatures can no longer be held against it.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

from evidence_contract.note import (
    COSIGNATURE_TYPES, SIG_COSIGNATURE_V1, NoteError, SignerKey, format_skey, format_vkey,
    generate_signer, parse_checkpoint, parse_note, parse_skey,
)

from witness.core import Cosigned
from witness.errors import WitnessError

__all__ = ["StateDir", "keygen", "load_key"]


def keygen(name: str, path: Path, sig_type: int = SIG_COSIGNATURE_V1) -> SignerKey:
    """Create a cosignature key named ``name`` (``sig_type``: Ed25519 ``cosignature/v1`` by
    default, or ``SIG_MLDSA44``) in a new 0600 file ``path`` (and ``path`` with ``.vkey``: the
    verifier key to give the log and the auditors)."""
    if sig_type not in COSIGNATURE_TYPES:
        raise WitnessError(f"a witness key is a cosignature key (0x04 or 0x06), not "
                           f"{sig_type:#04x}")
    try:
        key = generate_signer(name, sig_type)
    except NoteError as e:
        raise WitnessError(f"cannot make a witness key named {name!r}: {e}") from e
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise WitnessError(f"{path} exists; a witness key is never overwritten") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(format_skey(key) + "\n")
        f.flush()
        os.fsync(f.fileno())
    Path(str(path) + ".vkey").write_text(format_vkey(key.verifier) + "\n", encoding="utf-8")
    return key


def load_key(path: Path) -> SignerKey:
    """The witness's signer key from ``path``; refused unless only its owner can read it."""
    try:
        mode = os.stat(path).st_mode
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise WitnessError(f"cannot read the witness key {path}: {e}") from e
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise WitnessError(f"the witness key {path} is readable by others (mode "
                           f"{stat.S_IMODE(mode):04o}); chmod 600 it")
    try:
        key = parse_skey(text)
    except NoteError as e:
        raise WitnessError(f"{path} is not a note signer key: {e}") from e
    if key.sig_type not in COSIGNATURE_TYPES:
        raise WitnessError(f"{path} is not a cosignature key (type 0x04 cosignature/v1 or 0x06 "
                           f"ML-DSA-44); make one with `evidence witness keygen NAME`")
    return key


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StateDir:
    """The witness's memory: the last cosigned checkpoint per origin and its refusals."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.checkpoints = self.root / "checkpoints"
        self.refusals_path = self.root / "refusals.jsonl"

    def open(self) -> "StateDir":
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        return self

    def _path(self, origin: str) -> Path:
        return self.checkpoints / quote(origin, safe="")

    def load(self, origin: str) -> Cosigned | None:
        """The last checkpoint cosigned for ``origin``, or None when there is none."""
        try:
            data = self._path(origin).read_bytes()
        except FileNotFoundError:
            return None
        try:
            cp = parse_checkpoint(parse_note(data).text)
        except NoteError as e:  # our own file: damage is an operator's problem, said loudly
            raise WitnessError(f"the witness state {self._path(origin)} is damaged: {e}") from e
        if cp.origin != origin:
            raise WitnessError(f"the witness state {self._path(origin)} holds origin "
                               f"{cp.origin!r}")
        return Cosigned(origin, cp.size, cp.root_hash, data)

    def origins(self) -> list[str]:
        from urllib.parse import unquote

        if not self.checkpoints.is_dir():
            return []
        return sorted(unquote(p.name) for p in self.checkpoints.iterdir()
                      if not p.name.startswith("."))

    def save(self, cosigned: Cosigned) -> None:
        """Replace the origin's checkpoint atomically and durably (tmp, fsync, rename)."""
        final = self._path(cosigned.origin)
        tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(cosigned.note)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        _fsync_dir(self.checkpoints)

    def refuse(self, record: dict[str, Any]) -> dict[str, Any]:
        """Append a refusal record (with its time) to refusals.jsonl, durably."""
        entry = {"time": round(time.time(), 3), **record}
        line = json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n"
        with open(self.refusals_path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        return entry

    def refusals(self) -> Iterator[dict[str, Any]]:
        try:
            with open(self.refusals_path, encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        yield json.loads(line)
        except FileNotFoundError:
            return
