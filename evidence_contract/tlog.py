"""The log's names for its per-stream trees and checkpoints, and how a reader opens one. Pure.

One rule each, shared by the writer (which signs), the projector (which folds
``evidence.checkpoints``), the API (which serves and takes cosignatures) and the CLI (which
verifies):

- the log's name is also its signing key's name (``EVIDENCE_LOG_NAME``, default
  :data:`DEFAULT_LOG_NAME`);
- a stream's checkpoint origin is ``<log name>/<stream>`` (:func:`checkpoint_origin`); a
  stream id has no ``/``, space or ``+``, so the stream is what follows the last ``/``;
- the tree of a stream has leaf ``seq - 1`` = ``merkle.record_leaf_hash`` of its record;
- a checkpoint body is origin, size and root, no extension lines.

``evidence.checkpoints`` messages are keyed by the stream and told apart by the
``evidence-kind`` header (:data:`KIND_HEADER`): ``checkpoint`` (the log's signed note) or
``cosignature`` (the note as a witness returned it). :func:`open_stream_checkpoint` checks a
note as a reader must: the log key signed it, its origin names the stream, it has no
extensions, and every signature of a known cosigner verifies.

``<prefix>.tree`` (docs/witnessing.md) holds the deployment log: ``checkpoint`` messages are
its entries (stream checkpoints, verbatim), ``log-checkpoint`` (:data:`KIND_LOG_CHECKPOINT`)
the deployment checkpoints the publisher signs and ``log-cosignature``
(:data:`KIND_LOG_COSIGNATURE`) one witness's cosignature of one, named by the
``evidence-witness`` header. :func:`open_log_checkpoint` checks a deployment checkpoint: origin
exactly the log key's name, no extensions, the log's signature verifies.
"""

from __future__ import annotations

from collections.abc import Iterable

from .model import STREAM_ID_RE
from .note import (
    Checkpoint, Note, NoteError, VerifierKey, open_note, parse_checkpoint, stream_origin,
)

__all__ = [
    "CONTROL_CHECKPOINT",
    "CONTROL_HEADER",
    "DEFAULT_LOG_NAME",
    "KIND_CHECKPOINT",
    "KIND_COSIGNATURE",
    "KIND_HEADER",
    "KIND_LOG_CHECKPOINT",
    "KIND_LOG_COSIGNATURE",
    "SIZE_HEADER",
    "STREAM_HEADER",
    "WITNESS_HEADER",
    "checkpoint_origin",
    "open_log_checkpoint",
    "open_stream_checkpoint",
    "stream_of_origin",
]

DEFAULT_LOG_NAME = "evidence-store.local/log"
"""``EVIDENCE_LOG_NAME`` when unset: the log's (and its key's) name."""

KIND_HEADER = "evidence-kind"
KIND_CHECKPOINT = "checkpoint"
KIND_COSIGNATURE = "cosignature"
KIND_LOG_CHECKPOINT = "log-checkpoint"
"""On ``<prefix>.tree``: a deployment checkpoint the log signed (not an entry)."""
KIND_LOG_COSIGNATURE = "log-cosignature"
"""On ``<prefix>.tree``: a deployment checkpoint with one witness's cosignature line."""
STREAM_HEADER = "evidence-stream"
SIZE_HEADER = "evidence-tree-size"
WITNESS_HEADER = "evidence-witness"
CONTROL_HEADER = "evidence-control"
"""On ``evidence.intake``: ``evidence-control: checkpoint`` with an empty value asks the writer
to issue a checkpoint for the message's stream (its key)."""
CONTROL_CHECKPOINT = "checkpoint"


def checkpoint_origin(log_name: str, stream: str) -> str:
    """``<log name>/<stream>``: the first line of ``stream``'s checkpoints."""
    if not STREAM_ID_RE.fullmatch(stream):
        raise ValueError(f"{stream!r} is not a stream id")
    return stream_origin(log_name, stream)


def stream_of_origin(log_name: str, origin: str) -> str | None:
    """The stream a checkpoint origin names in the log ``log_name``; None if it names none."""
    prefix = log_name + "/"
    stream = origin[len(prefix):] if origin.startswith(prefix) else ""
    return stream if STREAM_ID_RE.fullmatch(stream) else None


def open_stream_checkpoint(data: bytes | str, log_key: VerifierKey, stream: str | None = None,
                           cosigners: Iterable[VerifierKey] = ()
                           ) -> tuple[Checkpoint, Note, str]:
    """Verify a stream's signed checkpoint; returns (checkpoint, note, stream).

    Raises ``NoteError`` unless ``log_key`` signed it, its origin is ``<log key name>/<a
    stream>`` (that ``stream`` when given), it has no extension lines, and each signature of a
    known cosigner verifies (``Note.verified`` lists the log's and theirs).
    """
    note = open_note(data, [log_key, *cosigners])
    if (log_key.name, log_key.key_id) not in {(s.name, s.key_id) for s in note.verified}:
        raise NoteError(f"the checkpoint is not signed by {log_key.name}+{log_key.key_id:08x}")
    cp = parse_checkpoint(note.text)
    named = stream_of_origin(log_key.name, cp.origin)
    if named is None:
        raise NoteError(f"checkpoint origin {cp.origin!r} names no stream of the log "
                        f"{log_key.name!r}")
    if stream is not None and named != stream:
        raise NoteError(f"checkpoint origin {cp.origin!r} is not stream {stream!r}'s")
    if cp.extensions:
        raise NoteError("a stream checkpoint has no extension lines")
    return cp, note, named


def open_log_checkpoint(data: bytes | str, log_key: VerifierKey,
                        cosigners: Iterable[VerifierKey] = ()) -> tuple[Checkpoint, Note]:
    """Verify a deployment checkpoint (the one tree witnesses follow); returns (checkpoint,
    note).

    Raises ``NoteError`` unless ``log_key`` signed it, its origin is exactly the log key's
    name (a stream checkpoint's ``<name>/<stream>`` is not one), it has no extension lines,
    and each signature of a known cosigner verifies (``Note.verified`` lists the log's and
    theirs).
    """
    note = open_note(data, [log_key, *cosigners])
    if (log_key.name, log_key.key_id) not in {(s.name, s.key_id) for s in note.verified}:
        raise NoteError(f"the checkpoint is not signed by {log_key.name}+{log_key.key_id:08x}")
    cp = parse_checkpoint(note.text)
    if cp.origin != log_key.name:
        raise NoteError(f"checkpoint origin {cp.origin!r} is not the log {log_key.name!r}")
    if cp.extensions:
        raise NoteError("a deployment checkpoint has no extension lines")
    return cp, note
