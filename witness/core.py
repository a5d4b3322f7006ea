"""What a witness decides, over bytes and values (pure).

A witness keeps, per origin, the last checkpoint it cosigned (:class:`Cosigned`). Shown a new
signed checkpoint, :func:`check` says whether it may cosign it, or why not (a
:class:`Refusal`, never an exception for a log's misbehaviour):

- the note must be signed by the log key the witness was configured with, have as origin
  the log itself (the deployment checkpoint: origin = the log key's name, docs/witnessing.md)
  or a stream of that log, and carry no extension lines (``bad_signature``);
- it must not be smaller than the last cosigned (``smaller``);
- at the same size it must have the same root (``root_changed``) and there is nothing to do;
- larger, a consistency proof from the last cosigned size must verify between the two roots
  (``inconsistent``); the first checkpoint of an origin is taken on first use, as the C2SP
  witness protocol does (old size 0, no proof).

:func:`cosign` adds the witness's ``cosignature/v1`` (c2sp.org/tlog-cosignature) and returns
the note it keeps and submits: the text, the log's signature and its own, nothing else (lines
of keys it cannot verify are not repeated under its name).

:func:`parse_add_checkpoint` reads the body of the C2SP tlog-witness ``POST /add-checkpoint``
(``old <size>``, proof lines in base64, a blank line, the signed checkpoint).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Sequence

from evidence_contract.merkle import ProofError, verify_consistency
from evidence_contract.note import (
    Checkpoint, Note, NoteError, Signature, SignerKey, VerifierKey, format_note, sign,
)
from evidence_contract.tlog import open_log_checkpoint as open_deployment_note
from evidence_contract.tlog import open_stream_checkpoint, stream_of_origin

__all__ = [
    "BAD_SIGNATURE",
    "INCONSISTENT",
    "REFUSALS",
    "ROOT_CHANGED",
    "SMALLER",
    "AddCheckpoint",
    "Cosigned",
    "Opened",
    "Refusal",
    "check",
    "cosign",
    "open_checkpoint_for",
    "open_deployment_checkpoint",
    "open_log_checkpoint",
    "parse_add_checkpoint",
]

BAD_SIGNATURE = "bad_signature"
SMALLER = "smaller"
ROOT_CHANGED = "root_changed"
INCONSISTENT = "inconsistent"
REFUSALS = (BAD_SIGNATURE, SMALLER, ROOT_CHANGED, INCONSISTENT)
"""Why a witness refuses a checkpoint (the ``kind`` of a refusal record)."""

_MAX_PROOF = 63  # the cap other tlog-witness implementations use; a real proof is ~2 log2(n) at most
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")


@dataclass(frozen=True)
class Cosigned:
    """The last checkpoint a witness cosigned for an origin: what it compares the next with."""

    origin: str
    size: int
    root: bytes
    note: bytes
    """The note the witness keeps: the checkpoint, the log's signature and its cosignature."""


@dataclass(frozen=True)
class Opened:
    """A checkpoint whose log signature verified."""

    checkpoint: Checkpoint
    note: Note
    stream: str | None
    """The stream whose checkpoint it is; None for the deployment checkpoint (the log's)."""
    log_signature: Signature


@dataclass(frozen=True)
class Refusal:
    """Why a witness will not cosign a checkpoint."""

    kind: str
    reason: str


def open_log_checkpoint(data: bytes, log_key: VerifierKey,
                        stream: str | None = None) -> Opened | Refusal:
    """Open a stream checkpoint signed by ``log_key``, or say why it is refused."""
    try:
        cp, note, named = open_stream_checkpoint(data, log_key, stream)
    except NoteError as e:
        return Refusal(BAD_SIGNATURE, f"the checkpoint does not verify with the log key "
                                      f"{log_key.name}+{log_key.key_id:08x}: {e}")
    return Opened(cp, note, named, _log_signature(note, log_key))


def open_deployment_checkpoint(data: bytes, log_key: VerifierKey) -> Opened | Refusal:
    """Open the deployment checkpoint (origin exactly the log key's name) signed by
    ``log_key``, or say why it is refused."""
    try:
        cp, note = open_deployment_note(data, log_key)
    except NoteError as e:
        return Refusal(BAD_SIGNATURE, f"the checkpoint does not verify with the log key "
                                      f"{log_key.name}+{log_key.key_id:08x}: {e}")
    return Opened(cp, note, None, _log_signature(note, log_key))


def open_checkpoint_for(origin: str, data: bytes, log_key: VerifierKey) -> Opened | Refusal | None:
    """Open a checkpoint of ``origin``: the log's own (the deployment checkpoint) or one of
    its streams; None when ``origin`` is neither (a log this witness does not follow)."""
    if origin == log_key.name:
        return open_deployment_checkpoint(data, log_key)
    stream = stream_of_origin(log_key.name, origin)
    return None if stream is None else open_log_checkpoint(data, log_key, stream)


def _log_signature(note: Note, log_key: VerifierKey) -> Signature:
    return next(s for s in note.verified if (s.name, s.key_id) == (log_key.name, log_key.key_id))


def check(last: Cosigned | None, new: Checkpoint, proof: Sequence[bytes] | None) -> Refusal | None:
    """None when ``new`` may be cosigned after ``last`` (or is ``last`` again: same size and
    root); a :class:`Refusal` otherwise. ``proof`` is the consistency proof from
    ``last.size`` to ``new.size`` (unused when there is no ``last`` or the sizes are equal).
    """
    if last is None or last.size == 0:
        return None
    if new.size < last.size:
        return Refusal(SMALLER, f"the checkpoint has size {new.size}, smaller than the "
                                f"{last.size} this witness cosigned: a log only grows")
    if new.size == last.size:
        if new.root_hash != last.root:
            return Refusal(ROOT_CHANGED,
                           f"size {new.size} has root {new.root_hash.hex()}, but this witness "
                           f"cosigned root {last.root.hex()} at that size: the tree was rewritten")
        return None
    try:
        verify_consistency(last.size, new.size, list(proof or ()), last.root, new.root_hash)
    except ProofError as e:
        return Refusal(INCONSISTENT,
                       f"no valid consistency proof from the cosigned size {last.size} (root "
                       f"{last.root.hex()}) to {new.size} (root {new.root_hash.hex()}): {e}")
    return None


def cosign(key: SignerKey, opened: Opened, timestamp: int) -> bytes:
    """The note with the log's signature and this witness's cosignature at ``timestamp``
    (Ed25519 ``cosignature/v1`` or ML-DSA-44, as its key is)."""
    line = sign(key, opened.note.text, timestamp=timestamp)
    return format_note(opened.note.text, [opened.log_signature, line])


@dataclass(frozen=True)
class AddCheckpoint:
    """A parsed ``POST /add-checkpoint`` body."""

    old_size: int
    proof: list[bytes]
    checkpoint: bytes


def parse_add_checkpoint(body: bytes) -> AddCheckpoint:
    """Parse a tlog-witness add-checkpoint body; ``ValueError`` when it is malformed (400)."""
    head, sep, note = body.partition(b"\n\n")
    if not sep or not note:
        raise ValueError("the body is an old-size line, proof lines, a blank line, a checkpoint")
    try:
        lines = head.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise ValueError("the old size and proof lines are ASCII") from None
    first = lines[0]
    if not first.startswith("old ") or not _DECIMAL.fullmatch(first[4:]) \
            or int(first[4:]) >= 1 << 64:
        raise ValueError(f"the first line is 'old <decimal size>', got {first[:40]!r}")
    proof = []
    for line in lines[1:]:
        try:
            raw = base64.b64decode(line, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("a proof line is base64") from None
        if len(raw) != 32 or base64.b64encode(raw).decode() != line:
            raise ValueError("a proof line is the canonical base64 of a 32-byte hash")
        proof.append(raw)
    if len(proof) > _MAX_PROOF:
        raise ValueError(f"a consistency proof has at most {_MAX_PROOF} hashes")
    return AddCheckpoint(int(first[4:]), proof, note)
