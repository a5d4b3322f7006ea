"""A record with what proves it, and the check every verifying reader runs on it. Pure.

The projections and the API are untrusted infrastructure: a reader who hands out evidence
checks it first, from the record's own bytes up to a checkpoint signed by a key the reader
holds. An *evidence bundle* is everything that check needs, in one answer of the API
(``GET /replay/{content_key}/bundle``, ``GET /streams/{stream}/records/{seq}/bundle``):

- ``record``: the log message verbatim (single-object Avro), or None when the API withholds
  it (a redacted stream's record holds unmasked content), with its ``leaf_hash`` then;
- ``checkpoint``: the stream's latest signed checkpoint note, with its cosignatures;
- ``inclusion``: the RFC 9162 path of leaf ``seq - 1`` in that checkpoint's tree;
- ``consistency``: when the reader said which size it verified last (``known_size``), the
  RFC 9162 proof that the checkpoint's tree extends that one;
- ``log``: the path from the record to a deployment checkpoint the witnesses cosigned
  (docs/witnessing.md), or None with ``log_reason`` while none covers the record:
  ``entry_index`` and ``entry``, the stream checkpoint that is that entry of the deployment
  tree (verbatim as the writer signed it); ``record_inclusion``, the record's path in the
  entry's tree (None when the entry is of the bundle's ``checkpoint`` size: ``inclusion`` is
  that path); ``checkpoint``, the deployment checkpoint note with its cosignatures; and
  ``entry_inclusion``, the RFC 9162 path of the entry's leaf, ``SHA-256(0x00 || entry)``, in
  the deployment tree of that checkpoint's size.

:func:`verify_bundle` checks, in this order, and raises the first failure:

1. the checkpoint is signed by the pinned log key, names the record's stream, and carries at
   least ``min_witnesses`` valid cosignatures of the named witness keys (:class:`Unwitnessed`);
2. it covers the record (:class:`Uncovered` otherwise: checkpoints are signed every few
   seconds, so a record sealed just now may not be in one yet);
3. the record bytes decode to a sealed record of that stream and seq, and hash to the leaf;
4. the leaf is included in the checkpoint's tree;
5. the record's own digests recompute: the chain link ``record_digest``, and for a plain
   record ``content_key`` from the request bytes when kept and ``response_digest`` from the
   response bytes;
6. the checkpoint is consistent with the last one the reader verified for this origin: not
   smaller (a rollback), not another root at the same size (a fork), and proved to extend
   it when larger (:class:`RolledBack`);
7. when the reader asks for the deployment log's coverage (``Trust.log_witnesses`` not
   None): the bundle has a ``log`` path (:class:`Uncovered` otherwise: the publisher signs a
   deployment checkpoint every few seconds); its checkpoint is signed by the pinned log key
   with origin exactly the key's name and carries at least ``min_log_witnesses`` valid
   cosignatures of ``log_witnesses`` (:class:`Unwitnessed`); the entry is a checkpoint of the
   record's stream signed by the log key, of a size that covers the record, and is included
   at ``entry_index`` in the deployment tree; the record is included in the entry's tree.

Everything else is :class:`Tampered`. The caller keeps the last verified checkpoint per origin
(as Go's sumdb client does) and passes it as ``known``; nothing here keeps state.

Errors (all :class:`Unverified`, an ``EvidenceError``)::

    Unverified        the evidence did not pass its check; never hand out its bytes
    ├── Tampered      a check failed: a signature, a hash, a proof, a digest
    │   └── RolledBack   the log's checkpoint went back, or forked, from one verified before
    ├── Unwitnessed   fewer valid cosignatures than required
    └── Uncovered     no signed checkpoint covers the record yet (retry shortly)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .codec import split_record
from .digests import content_key as _content_key
from .digests import record_digest as _record_digest
from .digests import response_digest as _response_digest
from .errors import DecodeError, EvidenceError
from .merkle import ProofError, compose_leaf_input, leaf_hash, verify_consistency, verify_inclusion
from .note import Checkpoint, NoteError, VerifierKey
from .tlog import open_log_checkpoint, open_stream_checkpoint

__all__ = [
    "Bundle",
    "LogCovered",
    "LogPath",
    "RolledBack",
    "Tampered",
    "Trust",
    "Uncovered",
    "Unverified",
    "Unwitnessed",
    "Verified",
    "checkpoint_of",
    "newer",
    "parse_bundle",
    "verify_bundle",
    "witness_keys",
]


class Unverified(EvidenceError):
    """The evidence did not pass its check: its bytes must not be handed out as evidence."""


class Tampered(Unverified):
    """A check failed: what the API served is not what the log sealed and signed."""


class RolledBack(Tampered):
    """The checkpoint is older than, or forks from, one this reader verified before."""


class Unwitnessed(Unverified):
    """The checkpoint lacks the cosignatures the reader requires."""


class Uncovered(Unverified):
    """No signed checkpoint covers the record yet; one is signed every few seconds."""


@dataclass(frozen=True)
class Trust:
    """What a reader trusts: the log's verifier key it pinned, and optionally witnesses of
    which at least ``min_witnesses`` must have cosigned a checkpoint.

    ``log_witnesses`` not None asks for the record's coverage by the deployment log: a path
    to a deployment checkpoint cosigned by at least ``min_log_witnesses`` of those keys (the
    witnesses that follow the log's one origin; ``()`` checks the path alone)."""

    log_key: VerifierKey
    witnesses: tuple[VerifierKey, ...] = ()
    min_witnesses: int = 0
    log_witnesses: tuple[VerifierKey, ...] | None = None
    min_log_witnesses: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.min_witnesses <= len(self.witnesses):
            raise ValueError(f"min_witnesses must be between 0 and the {len(self.witnesses)} "
                             f"witness key(s) given, not {self.min_witnesses}")
        given = len(self.log_witnesses or ())
        if not 0 <= self.min_log_witnesses <= given:
            raise ValueError(f"min_log_witnesses must be between 0 and the {given} log "
                             f"witness key(s) given, not {self.min_log_witnesses}")


@dataclass(frozen=True)
class LogPath:
    """A bundle's path from its record to a deployment checkpoint (the module docstring)."""

    entry_index: int
    entry: bytes
    record_inclusion: tuple[int, tuple[bytes, ...]] | None  # (tree size, hashes)
    checkpoint: bytes
    entry_inclusion: tuple[int, tuple[bytes, ...]]           # (tree size, hashes)


@dataclass(frozen=True)
class Bundle:
    """One record and its proofs as the API serves them (see the module docstring)."""

    stream: str
    seq: int
    record: bytes | None
    leaf_hash: bytes
    checkpoint: bytes
    tree_size: int | None          # None: the API has no inclusion proof (not covered yet)
    inclusion: tuple[bytes, ...]
    consistency_first: int | None = None
    consistency: tuple[bytes, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    log: LogPath | None = None
    log_reason: str | None = None   # why ``log`` is None, as the API says


@dataclass(frozen=True)
class LogCovered:
    """The record's coverage by the deployment log, verified: the entry (a stream checkpoint)
    at ``entry_index``, the deployment checkpoint that includes it and the log witnesses
    whose cosignatures of it verified."""

    entry_index: int
    entry: Checkpoint
    checkpoint: Checkpoint
    witnesses: tuple[str, ...]


@dataclass(frozen=True)
class Verified:
    """What passed: the record (None when withheld: only its leaf was proved), its decoded
    form, the checkpoint that covers it and the witnesses whose cosignatures verified."""

    stream: str
    seq: int
    record: bytes | None
    decoded: dict[str, Any] | None
    checkpoint: Checkpoint
    witnesses: tuple[str, ...]
    log: LogCovered | None = None   # when the reader asked for it (Trust.log_witnesses)

    @property
    def body(self) -> dict[str, Any] | None:
        return None if self.decoded is None else self.decoded["body"]


def _hex32(value: object, what: str) -> bytes:
    try:
        raw = bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise Tampered(f"the bundle's {what} is not a 32-byte hex hash")
    return raw


def _int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise Tampered(f"the bundle's {what} is not a non-negative integer")
    return value


def _hashes(value: object, what: str) -> tuple[bytes, ...]:
    if not isinstance(value, list):
        raise Tampered(f"the bundle's {what} is not a list of hashes")
    return tuple(_hex32(h, what) for h in value)


def parse_bundle(doc: object) -> Bundle:
    """A :class:`Bundle` from the API's JSON; a malformed one is :class:`Tampered`."""
    if not isinstance(doc, dict):
        raise Tampered("the bundle is not a JSON object")
    record = doc.get("record_b64")
    if record is not None:
        try:
            record = base64.b64decode(record, validate=True) if isinstance(record, str) else None
        except (binascii.Error, ValueError):
            record = None
        if record is None:
            raise Tampered("the bundle's record_b64 is not base64")
    inclusion = doc.get("inclusion")
    checkpoint = doc.get("checkpoint")
    stream = doc.get("stream")
    if not isinstance(stream, str):
        raise Tampered("the bundle names no stream")
    if checkpoint is None:
        raise Uncovered(f"stream {stream} has no signed checkpoint yet")
    if not isinstance(checkpoint, str) or not (inclusion is None or isinstance(inclusion, dict)):
        raise Tampered("the bundle's checkpoint or inclusion proof is malformed")
    if inclusion is None:
        inclusion = {"tree_size": None, "hashes": []}
    consistency = doc.get("consistency")
    first = None
    hashes: tuple[bytes, ...] = ()
    if consistency is not None:
        if not isinstance(consistency, dict):
            raise Tampered("the bundle's consistency proof is malformed")
        first = _int(consistency.get("first"), "consistency.first")
        hashes = _hashes(consistency.get("hashes"), "consistency proof")
    seq = _int(doc.get("seq"), "seq")
    reason = doc.get("log_reason")
    if reason is not None and not isinstance(reason, str):
        raise Tampered("the bundle's log_reason is not a string")
    known = {"stream", "seq", "record_b64", "leaf_hash", "checkpoint", "inclusion",
             "consistency", "log", "log_reason"}  # the rest (content, ...) is kept as extra
    return Bundle(stream=stream, seq=seq, record=record,
                  leaf_hash=_hex32(doc.get("leaf_hash"), "leaf_hash"),
                  checkpoint=checkpoint.encode("utf-8"),
                  tree_size=None if inclusion.get("tree_size") is None
                  else _int(inclusion.get("tree_size"), "inclusion.tree_size"),
                  inclusion=_hashes(inclusion.get("hashes"), "inclusion proof"),
                  consistency_first=first, consistency=hashes,
                  extra={k: v for k, v in doc.items() if k not in known},
                  log=None if doc.get("log") is None else _parse_log(doc["log"], seq),
                  log_reason=reason)


def _path(value: object, leaf_index: int, what: str) -> tuple[int, tuple[bytes, ...]]:
    """(tree size, hashes) of an inclusion proof object of leaf ``leaf_index``."""
    if not isinstance(value, dict):
        raise Tampered(f"the bundle's {what} is not an inclusion proof")
    if value.get("leaf_index") != leaf_index:
        raise Tampered(f"the bundle's {what} is of leaf {value.get('leaf_index')!r}, not "
                       f"{leaf_index}")
    return (_int(value.get("tree_size"), f"{what}.tree_size"),
            _hashes(value.get("hashes"), what))


def _parse_log(value: object, seq: int) -> LogPath:
    if not isinstance(value, dict) or not isinstance(value.get("entry"), str) \
            or not isinstance(value.get("checkpoint"), str):
        raise Tampered("the bundle's log path lacks its entry or checkpoint")
    index = _int(value.get("entry_index"), "log.entry_index")
    record = value.get("record_inclusion")
    return LogPath(
        entry_index=index, entry=value["entry"].encode("utf-8"),
        record_inclusion=None if record is None else _path(record, seq - 1,
                                                           "log.record_inclusion"),
        checkpoint=value["checkpoint"].encode("utf-8"),
        entry_inclusion=_path(value.get("entry_inclusion"), index, "log.entry_inclusion"))


def _check_record(b: Bundle, content_key: bytes | None) -> tuple[bytes, dict[str, Any]]:
    """The leaf hash of the bundle's record bytes and the decoded record, or Tampered."""
    assert b.record is not None
    try:
        body_avro, decoded = split_record(b.record)
    except DecodeError as e:
        raise Tampered(f"the record bytes are no sealed record: {e}") from None
    body, seal = decoded["body"], decoded["seal"]
    if body["stream"] != b.stream or seal["seq"] != b.seq:
        raise Tampered(f"the record is {body['stream']} #{seal['seq']}, not the "
                       f"{b.stream} #{b.seq} the bundle names")
    sealed = bytes(seal["record_digest"])
    if _record_digest(seal["prev_digest"], seal["seq"], seal["occurred_at"],
                      body_avro) != sealed:
        raise Tampered("the record's record_digest does not recompute from its body")
    if content_key is not None and bytes(body["content_key"]) != content_key:
        raise Tampered(f"the record's content_key is {bytes(body['content_key']).hex()}, not "
                       f"the {content_key.hex()} asked for")
    if body.get("encryption") is None:  # an encrypted record's digests are keyed commitments
        if body["request_bytes"] is not None and \
                _content_key(body["request_bytes"]) != bytes(body["content_key"]):
            raise Tampered("the record's content_key does not recompute from its request bytes")
        if body["response_bytes"] is not None and body["response_digest"] is not None and \
                _response_digest(body["response_bytes"]) != bytes(body["response_digest"]):
            raise Tampered("the record's response_digest does not recompute from its "
                           "response bytes")
    leaf = leaf_hash(compose_leaf_input(sealed, hashlib.sha256(b.record).digest()))
    if leaf != b.leaf_hash:
        raise Tampered("the record bytes do not hash to the leaf the bundle names")
    return leaf, decoded


def _check_consistency(b: Bundle, cp: Checkpoint, known: Checkpoint) -> None:
    if cp.size < known.size:
        raise RolledBack(f"the log's checkpoint of {cp.origin} went back from size "
                         f"{known.size}, verified before, to {cp.size}")
    if cp.size == known.size:
        if cp.root_hash != known.root_hash:
            raise RolledBack(f"two checkpoints of {cp.origin} at size {cp.size} have "
                             f"different roots: the log forked")
        return
    if b.consistency_first != known.size:
        raise Tampered(f"the bundle has no consistency proof from size {known.size}, the "
                       f"checkpoint of {cp.origin} verified before")
    try:
        verify_consistency(known.size, cp.size, b.consistency, known.root_hash, cp.root_hash)
    except ProofError as e:
        raise RolledBack(f"the checkpoint of {cp.origin} at size {cp.size} does not extend "
                         f"the one of size {known.size} verified before: {e}") from None


def verify_bundle(b: Bundle, trust: Trust, known: Checkpoint | None = None, *,
                  content_key: bytes | None = None) -> Verified:
    """Check ``b`` as the module docstring says; ``known`` is the last checkpoint the reader
    verified for the stream's origin, ``content_key`` the key the reader asked for (checked
    against the record's). Returns what passed, else raises an :class:`Unverified`."""
    try:
        cp, note, _ = open_stream_checkpoint(b.checkpoint, trust.log_key, b.stream,
                                             trust.witnesses)
    except NoteError as e:
        raise Tampered(f"the checkpoint of stream {b.stream} does not verify with the log key "
                       f"{trust.log_key.name}: {e}") from None
    ident = {(k.name, k.key_id) for k in trust.witnesses}
    cosigned = tuple(s.name for s in note.verified if (s.name, s.key_id) in ident)
    if len(cosigned) < trust.min_witnesses:
        raise Unwitnessed(f"the checkpoint of {cp.origin} at size {cp.size} has "
                          f"{len(cosigned)} valid cosignature(s) of the witnesses named, "
                          f"{trust.min_witnesses} required")
    if b.seq < 1 or b.seq > cp.size:
        raise Uncovered(f"record {b.stream} #{b.seq} is not in a signed checkpoint yet (the "
                        f"latest is of size {cp.size})")
    if cp.size != b.tree_size:
        raise Tampered(f"the inclusion proof is for size {b.tree_size}, the checkpoint that "
                       f"covers the record is of size {cp.size}")
    decoded = None
    if b.record is not None:
        _, decoded = _check_record(b, content_key)
    try:
        verify_inclusion(b.seq - 1, cp.size, b.leaf_hash, b.inclusion, cp.root_hash)
    except ProofError as e:
        raise Tampered(f"record {b.stream} #{b.seq} is not in the signed tree of size "
                       f"{cp.size}: {e}") from None
    if known is not None:
        if known.origin != cp.origin:
            raise ValueError("known is a checkpoint of another origin")
        _check_consistency(b, cp, known)
    covered = None if trust.log_witnesses is None else _check_log(b, cp, trust)
    return Verified(b.stream, b.seq, b.record, decoded, cp, cosigned, covered)


def _check_log(b: Bundle, cp: Checkpoint, trust: Trust) -> LogCovered:
    """Step 7: the path from the record (its leaf, checked) to a witnessed deployment
    checkpoint; ``cp`` is the bundle's stream checkpoint, verified."""
    assert trust.log_witnesses is not None
    log = b.log
    if log is None:
        raise Uncovered(f"no deployment checkpoint covers record {b.stream} #{b.seq} yet"
                        + (f": {b.log_reason}" if b.log_reason else ""))
    try:
        dcp, note = open_log_checkpoint(log.checkpoint, trust.log_key, trust.log_witnesses)
    except NoteError as e:
        raise Tampered(f"the bundle's deployment checkpoint does not verify with the log key "
                       f"{trust.log_key.name}: {e}") from None
    ident = {(k.name, k.key_id) for k in trust.log_witnesses}
    cosigned = tuple(s.name for s in note.verified if (s.name, s.key_id) in ident)
    if len(cosigned) < trust.min_log_witnesses:
        raise Unwitnessed(f"the deployment checkpoint {dcp.origin} at size {dcp.size} has "
                          f"{len(cosigned)} valid cosignature(s) of the log witnesses named, "
                          f"{trust.min_log_witnesses} required")
    try:
        ecp, _, _ = open_stream_checkpoint(log.entry, trust.log_key, b.stream)
    except NoteError as e:
        raise Tampered(f"entry {log.entry_index} of the deployment tree is not a checkpoint "
                       f"of stream {b.stream} signed by the log key: {e}") from None
    if ecp.size < b.seq:
        raise Tampered(f"entry {log.entry_index} is the checkpoint of stream {b.stream} at "
                       f"size {ecp.size}, which does not cover #{b.seq}")
    size, hashes = log.entry_inclusion
    if size != dcp.size:
        raise Tampered(f"the entry's inclusion proof is for size {size}, the deployment "
                       f"checkpoint is of size {dcp.size}")
    try:
        verify_inclusion(log.entry_index, dcp.size, leaf_hash(log.entry), hashes,
                         dcp.root_hash)
    except ProofError as e:
        raise Tampered(f"the checkpoint of stream {b.stream} at size {ecp.size} is not entry "
                       f"{log.entry_index} of the deployment tree of size {dcp.size}: {e}"
                       ) from None
    if log.record_inclusion is None:
        if ecp.size != cp.size:
            raise Tampered(f"the bundle has no proof of #{b.seq} in the entry's tree of size "
                           f"{ecp.size}")
        size, hashes = cp.size, b.inclusion
    else:
        size, hashes = log.record_inclusion
        if size != ecp.size:
            raise Tampered(f"the record's proof in the entry is for size {size}, the entry "
                           f"is of size {ecp.size}")
    try:
        verify_inclusion(b.seq - 1, ecp.size, b.leaf_hash, hashes, ecp.root_hash)
    except ProofError as e:
        raise Tampered(f"record {b.stream} #{b.seq} is not in the tree of entry "
                       f"{log.entry_index} (size {ecp.size}): {e}") from None
    return LogCovered(log.entry_index, ecp, dcp, cosigned)


def checkpoint_of(doc: object) -> tuple[str, Checkpoint]:
    """The stream and the checkpoint a bundle's JSON names, *unverified*: for finding the
    checkpoint a reader verified before for that origin. :func:`verify_bundle` checks it. A
    bundle of a named stream whose checkpoint is null is :class:`Uncovered`, as
    :func:`parse_bundle` says of it: no signed checkpoint covers the record yet."""
    from .note import parse_checkpoint, parse_note

    if isinstance(doc, dict) and isinstance(doc.get("stream"), str) \
            and doc.get("checkpoint") is None:
        raise Uncovered(f"stream {doc['stream']} has no signed checkpoint yet")
    if not isinstance(doc, dict) or not isinstance(doc.get("checkpoint"), str) \
            or not isinstance(doc.get("stream"), str):
        raise Tampered("the bundle lacks its stream or checkpoint")
    try:
        return doc["stream"], parse_checkpoint(parse_note(doc["checkpoint"]).text)
    except NoteError as e:
        raise Tampered(f"the bundle's checkpoint is no checkpoint note: {e}") from None


def newer(a: Checkpoint | None, b: Checkpoint) -> Checkpoint:
    """The larger of two verified checkpoints of one origin (``b`` when ``a`` is None)."""
    return b if a is None or b.size > a.size else a


def witness_keys(keys: Iterable[VerifierKey | str]) -> tuple[VerifierKey, ...]:
    """Verifier keys from keys or their ``<name>+<hex id>+<base64>`` text."""
    from .note import parse_vkey

    return tuple(k if isinstance(k, VerifierKey) else parse_vkey(k.strip()) for k in keys)
