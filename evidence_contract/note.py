"""C2SP signed notes, tlog checkpoints and cosignatures (Ed25519, ML-DSA-44). Pure.

The formats of https://c2sp.org/signed-note, https://c2sp.org/tlog-checkpoint and
https://c2sp.org/tlog-cosignature (Ed25519 ``cosignature/v1`` and ML-DSA-44 ``subtree/v1``),
byte for byte as Go's ``golang.org/x/mod/sumdb/note`` and ``github.com/transparency-dev/formats``
read and write them, so any witness or verifier of that ecosystem checks what we sign::

    a note          text ending in "\\n", a blank line, then lines "— <name> <base64(id || sig)>"
    key ID          be32(SHA-256(name || 0x0A || type || public key)[:4])
    verifier key    <name>+<hex id>+<base64(type || public key)>
    signer key      PRIVATE+KEY+<name>+<hex id>+<base64(type || seed)>
    checkpoint      "<origin>\\n<decimal size>\\n<base64 root hash>\\n" then extension lines
    cosignature     type 0x04; be64(timestamp) || Ed25519 over
                    "cosignature/v1\\ntime <timestamp>\\n" || the checkpoint text
    ML-DSA-44       type 0x06; be64(timestamp) || ML-DSA-44 (FIPS 204, empty context) over
    cosignature     "subtree/v1\\n\\0" || u8 len || cosigner name || be64(timestamp)
                    || u8 len || origin || be64(0) || be64(size) || root hash
                    (extension lines are not signed; the cosigner's name is)

Signature types: ``SIG_ED25519`` (0x01, a log's own checkpoint signature),
``SIG_COSIGNATURE_V1`` (0x04) and ``SIG_MLDSA44`` (0x06), a witness's
(:data:`COSIGNATURE_TYPES`). A key's type is part of its ID, so one Ed25519 key used both ways
has two IDs, as the specs require. Every private key is a 32-byte seed (an ML-DSA-44 one is
FIPS 204's ``ξ``, as Go's ``filippo.io/mldsa`` stores it); an ML-DSA-44 public key is 1312
bytes, its signature 2420.

Every malformed note, key, signature line or checkpoint raises ``NoteError``; so does a note
whose signature from a known key fails, or that has none from a known key (the spec's
"clients MUST reject the note"). Wrong argument types are ``TypeError``/``ValueError`` as
anywhere else. Signing keys are generated from the OS's randomness (``generate_signer``);
nothing else here reads anything. The keys, their IDs and text forms are
``evidence_contract.note_keys``, whose names are all importable from here too.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .note_keys import (
    COSIGNATURE_TYPES,
    SIG_COSIGNATURE_V1,
    SIG_ED25519,
    SIG_MLDSA44,
    SIG_TYPES,
    NoteError,
    SignerKey,
    VerifierKey,
    b64,
    b64decode,
    format_skey,
    format_vkey,
    generate_signer,
    key_id,
    mldsa_public,
    parse_skey,
    parse_vkey,
    valid_key_name,
)

__all__ = [
    "COSIGNATURE_TYPES",
    "MAX_SIGNATURES",
    "SIG_COSIGNATURE_V1",
    "SIG_ED25519",
    "SIG_MLDSA44",
    "Checkpoint",
    "Note",
    "NoteError",
    "Signature",
    "SignerKey",
    "VerifierKey",
    "cosignature_message",
    "cosignature_timestamp",
    "format_checkpoint",
    "format_note",
    "format_skey",
    "format_vkey",
    "generate_signer",
    "key_id",
    "open_checkpoint",
    "open_note",
    "parse_checkpoint",
    "parse_note",
    "parse_skey",
    "parse_vkey",
    "sign",
    "stream_origin",
    "subtree_message",
    "valid_key_name",
    "verify",
]

MAX_SIGNATURES = 100
"""Most signature lines a note may have: the spec requires at least 16, Go's reader takes 100."""

_ED25519_SIG_SIZE = 64
_MLDSA44_SIG_SIZE = 2420
_SIG_SIZE = {SIG_COSIGNATURE_V1: _ED25519_SIG_SIZE, SIG_MLDSA44: _MLDSA44_SIG_SIZE}
_SUBTREE_LABEL = b"subtree/v1\n\x00"
_MAX_TIMESTAMP = (1 << 63) - 1  # tlog-cosignature: "MUST NOT exceed 2^63 - 1"
_SIG_PREFIX = "\u2014 "  # em dash, space
_DECIMAL = re.compile(r"0|[1-9][0-9]*")



def _check_text(text: str) -> None:
    # Signed notes "MUST NOT contain any ASCII control characters other than newline".
    bad = next((c for c in text if c < " " and c != "\n"), None)
    if bad is not None:
        raise NoteError(f"a note holds no control character {bad!r}")


@dataclass(frozen=True)
class Signature:
    """One signature line: key name, key ID and the signature bytes after the ID."""

    name: str
    key_id: int
    data: bytes

    def line(self) -> str:
        """The line as a note holds it: ``— <name> <base64(id || data)>\\n``."""
        return f"{_SIG_PREFIX}{self.name} {b64(struct.pack('>I', self.key_id) + self.data)}\n"


@dataclass(frozen=True)
class Note:
    """A note's text (ending in a newline), its signature lines, and those that verified."""

    text: str
    signatures: tuple[Signature, ...]
    verified: tuple[Signature, ...] = ()


def cosignature_message(text: str, timestamp: int) -> bytes:
    """Return what a cosignature/v1 signs: the header, ``time <timestamp>``, then ``text``."""
    return b"cosignature/v1\ntime %d\n" % timestamp + text.encode("utf-8")


def subtree_message(cosigner: str, timestamp: int, origin: str, start: int, end: int,
                    root_hash: bytes) -> bytes:
    """Return what an ML-DSA-44 cosignature signs: tlog-cosignature's ``cosigned_message``.

    A checkpoint's cosignature is the subtree ``[0, size)``; a subtree with ``start > 0``
    carries timestamp 0 (the spec's rule). Names and origins are 1 to 255 UTF-8 bytes.
    """
    name, log = cosigner.encode("utf-8"), origin.encode("utf-8")
    if not 0 < len(name) < 256 or not 0 < len(log) < 256:
        raise NoteError("an ML-DSA-44 cosignature's cosigner name and origin are 1 to 255 bytes")
    if not 0 <= timestamp <= _MAX_TIMESTAMP or not 0 <= start <= end < 1 << 64:
        raise NoteError(f"no subtree [{start}, {end}) at time {timestamp}")
    if start and timestamp:
        raise NoteError("a subtree that does not start at 0 is cosigned with timestamp 0")
    if not isinstance(root_hash, bytes) or len(root_hash) != 32:
        raise NoteError("a root hash is 32 bytes")
    return b"".join([_SUBTREE_LABEL, bytes([len(name)]), name, struct.pack(">Q", timestamp),
                     bytes([len(log)]), log, struct.pack(">QQ", start, end), root_hash])


def _checkpoint_message(key_name: str, text: str, timestamp: int) -> bytes:
    cp = parse_checkpoint(text)
    return subtree_message(key_name, timestamp, cp.origin, 0, cp.size, cp.root_hash)


def cosignature_timestamp(sig: Signature) -> int:
    """Return the POSIX timestamp a cosignature line carries (Ed25519 ``cosignature/v1`` or
    ML-DSA-44: both start with it, told apart by their lengths)."""
    if len(sig.data) - 8 not in _SIG_SIZE.values():
        raise NoteError("a cosignature is a timestamp and an Ed25519 or ML-DSA-44 signature")
    return struct.unpack(">Q", sig.data[:8])[0]


def sign(key: SignerKey, text: str, timestamp: int | None = None) -> Signature:
    """Sign a note text; a cosignature key (:data:`COSIGNATURE_TYPES`) needs the cosignature's
    ``timestamp``, and an ML-DSA-44 one a checkpoint as ``text``."""
    if not text.endswith("\n"):
        raise NoteError("a note text ends in a newline")
    _check_text(text)
    if key.sig_type in COSIGNATURE_TYPES:
        if not isinstance(timestamp, int) or isinstance(timestamp, bool) \
                or not 0 <= timestamp <= _MAX_TIMESTAMP:
            raise ValueError(f"a cosignature needs a timestamp in [0, 2**63), got {timestamp!r}")
        if key.sig_type == SIG_MLDSA44:
            signed = key._private.sign(_checkpoint_message(key.name, text, timestamp))
        else:
            signed = key._private.sign(cosignature_message(text, timestamp))
        data = struct.pack(">Q", timestamp) + signed
    elif timestamp is not None:
        raise ValueError("only a cosignature key signs with a timestamp")
    else:
        data = key._private.sign(text.encode("utf-8"))
    return Signature(key.name, key.verifier.key_id, data)


def verify(key: VerifierKey, text: str, sig: Signature) -> bool:
    """Return whether ``sig`` is ``key``'s valid signature of ``text`` (False for another key)."""
    if (sig.name, sig.key_id) != (key.name, key.key_id) or key.sig_type not in SIG_TYPES:
        return False
    if key.sig_type in COSIGNATURE_TYPES:
        if len(sig.data) != 8 + _SIG_SIZE[key.sig_type]:
            return False
        timestamp = struct.unpack(">Q", sig.data[:8])[0]
        if timestamp > _MAX_TIMESTAMP:
            return False
        raw = sig.data[8:]
        if key.sig_type == SIG_MLDSA44:
            try:
                msg = _checkpoint_message(key.name, text, timestamp)
                public: Any = mldsa_public(key.public_key)
            except NoteError:  # not a checkpoint, or a name or origin too long to sign
                return False
        else:
            msg = cosignature_message(text, timestamp)
    else:
        msg, raw = text.encode("utf-8"), sig.data
    try:
        if key.sig_type != SIG_MLDSA44:
            public = Ed25519PublicKey.from_public_bytes(key.public_key)
        public.verify(raw, msg)
    except (InvalidSignature, ValueError):  # ValueError: 32 bytes that are no curve point
        return False
    return True


def format_note(text: str, signatures: Iterable[Signature]) -> bytes:
    """Return the signed note: ``text``, a blank line, one line per signature (at least one)."""
    lines = "".join(s.line() for s in signatures)
    if not text.endswith("\n") or not lines:
        raise NoteError("a note is a text ending in a newline and at least one signature")
    _check_text(text)
    return (text + "\n" + lines).encode("utf-8")


def parse_note(data: bytes | str) -> Note:
    """Split a signed note into its text and signature lines, verifying nothing."""
    if isinstance(data, (bytes, bytearray)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise NoteError("a note is UTF-8") from None
    _check_text(data)
    # The text ends at the note's last blank line; what follows is signature lines only.
    split = data.rfind("\n\n")
    if split < 0 or not data.endswith("\n") or split + 2 == len(data):
        raise NoteError("a note is a text, a blank line and signature lines")
    text, lines = data[: split + 1], data[split + 2 : -1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError(f"a note has at most {MAX_SIGNATURES} signatures")
    sigs = []
    for line in lines:
        name, _, sig64 = line.removeprefix(_SIG_PREFIX).partition(" ")
        if not line.startswith(_SIG_PREFIX) or not valid_key_name(name) or not sig64:
            raise NoteError(f"malformed signature line {line!r}")
        raw = b64decode(sig64, "a signature")
        if len(raw) < 5:
            raise NoteError("a signature is a key ID and at least one byte")
        sigs.append(Signature(name, struct.unpack(">I", raw[:4])[0], raw[4:]))
    return Note(text, tuple(sigs))


def open_note(data: bytes | str, known: Iterable[VerifierKey]) -> Note:
    """Parse a signed note and verify the signatures of the ``known`` keys.

    Lines of unknown keys (another name or another ID) are kept unverified, as the spec
    says; a failing signature of a known key rejects the whole note, and so does a note
    without any verified signature. The result's ``verified`` lists each key once.
    """
    note = parse_note(data)
    keys: dict[tuple[str, int], list[VerifierKey]] = {}
    for k in known:
        keys.setdefault((k.name, k.key_id), []).append(k)
    verified: dict[tuple[str, int], Signature] = {}
    for sig in note.signatures:
        ident = (sig.name, sig.key_id)
        candidates = keys.get(ident, [])
        if not candidates or ident in verified:
            continue
        if len(set(candidates)) > 1:
            raise NoteError(f"ambiguous key {sig.name}+{sig.key_id:08x}")
        if not verify(candidates[0], note.text, sig):
            raise NoteError(f"invalid signature for key {sig.name}+{sig.key_id:08x}")
        verified[ident] = sig
    if not verified:
        raise NoteError("the note has no signature from a known key")
    return Note(note.text, note.signatures, tuple(verified.values()))


@dataclass(frozen=True)
class Checkpoint:
    """A log's tree head: origin, tree size, root hash and (discouraged) extension lines."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()


def format_checkpoint(cp: Checkpoint) -> str:
    """Return the checkpoint's note text (what the log and its witnesses sign)."""
    lines = [cp.origin, *cp.extensions]
    if any(not line or "\n" in line for line in lines):
        raise NoteError("checkpoint lines are non-empty and hold no newline")
    if not isinstance(cp.size, int) or isinstance(cp.size, bool) or not 0 <= cp.size < 1 << 64:
        raise NoteError(f"a tree size is a uint64, got {cp.size!r}")
    if not isinstance(cp.root_hash, bytes) or len(cp.root_hash) != 32:
        raise NoteError("a root hash is 32 bytes")
    lines = [cp.origin, str(cp.size), b64(cp.root_hash), *cp.extensions]
    text = "".join(f"{line}\n" for line in lines)
    _check_text(text)
    return text


def parse_checkpoint(text: str) -> Checkpoint:
    """Parse a checkpoint note text (``Note.text``)."""
    lines = text.split("\n")
    if len(lines) < 4 or lines.pop() != "" or any(not line for line in lines):
        raise NoteError("a checkpoint is at least three non-empty lines, each ending in a newline")
    origin, size, root64, *extensions = lines
    if not _DECIMAL.fullmatch(size) or int(size) >= 1 << 64:
        raise NoteError(f"a tree size is a uint64 in decimal, no leading zeros: {size!r}")
    root = b64decode(root64, "the root hash")
    if len(root) != 32:
        raise NoteError("a root hash is 32 bytes")
    _check_text(text)
    return Checkpoint(origin, int(size), root, tuple(extensions))


def stream_origin(log_name: str, stream: str) -> str:
    """Return the origin of a stream's checkpoints: ``<log name>/<stream>``.

    Each stream is a log of its own (its own tree); the log key, named ``log_name``, signs
    them all, so an origin is the key's name, a slash, and the stream id (which holds no
    space or ``+``, so the origin is a valid line and key-name-like text).
    """
    origin = f"{log_name}/{stream}"
    if not valid_key_name(log_name) or not valid_key_name(origin) or not stream:
        raise NoteError(f"no checkpoint origin for log {log_name!r} and stream {stream!r}")
    return origin


def open_checkpoint(data: bytes | str, log_key: VerifierKey,
                    cosigners: Iterable[VerifierKey] = (),
                    origin: str | None = None) -> tuple[Checkpoint, Note]:
    """Verify a signed checkpoint: the log's signature is required, cosignatures counted.

    Raises ``NoteError`` unless ``log_key`` signed the note, its origin is ``origin`` when
    given, else the log key's name or a log under it (``<key name>/<stream>``, see
    :func:`stream_origin`; the spec's "key name SHOULD be the origin", made a must for our
    logs), and every signature of a known cosigner verifies. ``Note.verified`` lists the
    log's signature and each verified cosigner's.
    """
    note = open_note(data, [log_key, *cosigners])
    if (log_key.name, log_key.key_id) not in {(s.name, s.key_id) for s in note.verified}:
        raise NoteError(f"the checkpoint is not signed by {log_key.name}+{log_key.key_id:08x}")
    cp = parse_checkpoint(note.text)
    if origin is not None:
        if cp.origin != origin:
            raise NoteError(f"checkpoint origin {cp.origin!r} is not {origin!r}")
    elif cp.origin != log_key.name and not cp.origin.startswith(log_key.name + "/"):
        raise NoteError(f"checkpoint origin {cp.origin!r} is not the log key's name "
                        f"{log_key.name!r} nor a log under it")
    return cp, note
