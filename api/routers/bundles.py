"""Evidence bundles: a record with everything a reader needs to verify it, in one answer.

    GET /replay/{content_key_hex}/bundle      the record a replay of that request serves
    GET /streams/{stream}/records/{seq}/bundle

A bundle is JSON (:class:`~api.models.EvidenceBundle`): the record's log message verbatim
(``record_b64``; withheld on a stream the read side redacts, when ``leaf_hash`` alone is
proved), the stream's latest signed checkpoint note with its cosignatures, the RFC 9162
inclusion path of the record in that checkpoint's tree, and with ``known_size=N`` the proof
that the checkpoint extends the one of size N (the last the reader verified). The reader
checks it with ``evidence_contract.bundle.verify_bundle`` and the log key it pinned: the API
is not trusted for any of it. So a verified replay costs one request.

The record is checked here too before it is served (:mod:`api.evidence`): a projected row
that disagrees with its sealed record is replaced by the log's copy (``source`` is then
``log``, ``finding`` says what the row got wrong) and reported; when the log cannot be read the
row is answered as it is, with its ``finding``, and the reader's check refuses it. A record that no checkpoint covers yet has ``inclusion`` null (and
``checkpoint`` null when the stream has none): the writer signs one every few seconds, ask
again. An erased record is a 410, as everywhere.

``log`` is the record's path to a witnessed deployment checkpoint (docs/witnessing.md):

- the entry is the *first* checkpoint of the record's stream that covers it (the smallest
  size >= seq, then the lowest index) among the entries the deployment checkpoint holds.
  Once a record is covered that entry, its index and the record's proof into it never
  change (only the entry's proof grows with the deployment tree, so a reader may keep the
  rest), and it is the log's earliest public commitment to the record. An entry that does
  not open with the log key (a ``checkpoint_invalid`` entry: still an entry) is passed over;
- the deployment checkpoint is the latest one a witness cosigned when it holds the entry,
  else the latest (``GET /log/checkpoint``'s): the publisher produces a checkpoint before
  its witnesses answer, and a reader that requires them would be refused in between;
- the proofs come from ``log_nodes`` and the stream's ``tree_nodes`` and are checked against
  the signed roots before they are served.

Until that path exists (no deployment checkpoint yet, none holds an entry that covers the
record, the projection is catching up), ``log`` is null and ``log_reason`` says why: the rest
of the bundle still proves the record in its stream's tree.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request

from evidence_contract.merkle import (
    ProofError, consistency_proof_from, inclusion_nodes, inclusion_proof_from, leaf_hash,
    verify_inclusion,
)
from evidence_contract.note import NoteError, VerifierKey, parse_checkpoint, parse_note
from evidence_contract.tlog import open_stream_checkpoint
from server.logs import event_logger

from ..deps import Caller, Config, Db, Seq, StreamId, not_found
from ..errors import Erased, Unavailable
from ..evidence import Served, served
from ..models import MAX_SEQ, STREAM_PATTERN, EvidenceBundle, erased_of
from ..params import Digits
from ..responses import ERASED, ERRORS
from .replay import HEX_KEY, replay_row
from .tlog import MAX_COSIGNATURES

__all__ = ["ENTRY_CANDIDATES", "log_path", "record_bundle", "replay_bundle", "router"]

log = event_logger("evidence.api")

router = APIRouter(tags=["verifiable log"])

ENTRY_CANDIDATES = 8
"""Entries of a stream covering a seq read at once: the first that opens is the path's."""

KnownSize = Annotated[int | None, Query(ge=1, le=MAX_SEQ, description=(
    "the tree size of the last checkpoint of this stream the reader verified: the bundle "
    "then carries the proof that its checkpoint extends that one")), Digits]


Row = tuple[int, bytes, bytes, list[str]]  # a deployment checkpoint: size, root, note, lines


def _first_entry(entries: list[tuple[int, int, bytes]], log_key: VerifierKey | None,
                 stream: str, seq: int) -> tuple[int, bytes, Any] | None:
    """(index, entry, its checkpoint) of the first entry that is a checkpoint of ``stream``
    covering ``seq`` (signed by ``log_key`` when the API has it: the reader checks that)."""
    for idx, _size, entry in entries:
        try:
            if log_key is not None:
                cp = open_stream_checkpoint(entry, log_key, stream)[0]
            else:
                cp = parse_checkpoint(parse_note(entry).text)
        except NoteError:
            continue
        if cp.size >= seq:
            return idx, entry, cp
    return None


async def log_path(db: Db, log_key: VerifierKey | None, s: Served, stream_size: int | None
                   ) -> tuple[dict[str, Any] | None, str | None]:
    """The bundle's ``log`` section of record ``s`` and None, or None and why there is none
    (see the module docstring); ``stream_size`` is the size of the bundle's own inclusion
    proof, if it has one."""
    cosigned, latest, entries = await db.log_cover(s.stream, s.seq, MAX_COSIGNATURES,
                                                   ENTRY_CANDIDATES)
    if latest is None:
        return None, ("the deployment log has no checkpoint yet (the publisher signs one once "
                      "a stream checkpoint is in its tree)")
    found = _first_entry(entries, log_key, s.stream, s.seq)
    if found is None:
        return None, (f"no checkpoint of stream {s.stream} covering #{s.seq} is in the "
                      f"deployment checkpoint of size {latest[0]} yet (the publisher signs one "
                      f"every few seconds)")
    idx, entry, ecp = found
    size, root, note, lines = cosigned if cosigned is not None and cosigned[0] > idx \
        else latest
    log_wanted = inclusion_nodes(idx, size)
    own = ecp.size != stream_size
    stream_wanted = inclusion_nodes(s.seq - 1, ecp.size) if own else []
    log_nodes, stream_nodes = await db.log_path_nodes(log_wanted, s.stream, stream_wanted)
    if any(w not in log_nodes for w in log_wanted) or \
            any(w not in stream_nodes for w in stream_wanted):
        return None, (f"the projection's trees do not yet hold the proof of entry {idx} at "
                      f"size {size} (it is catching up)")
    entry_proof = inclusion_proof_from(idx, size, lambda lv, i: log_nodes[(lv, i)])
    record_proof = inclusion_proof_from(s.seq - 1, ecp.size,
                                        lambda lv, i: stream_nodes[(lv, i)]) if own else None
    try:  # what is served is what is signed: the projection's hashes, checked first
        verify_inclusion(idx, size, leaf_hash(entry), entry_proof, root)
        if record_proof is not None:
            verify_inclusion(s.seq - 1, ecp.size, s.leaf_hash, record_proof, ecp.root_hash)
    except ProofError as e:
        log("warning", "bundle_log_path_unproven", stream=s.stream, seq=s.seq,
            entry_index=idx, tree_size=size, error=str(e))
        return None, (f"the projection's trees do not prove #{s.seq} through entry {idx} in "
                      f"the deployment checkpoint of size {size} ({e}); it needs a rebuild")
    return {"entry_index": idx, "entry": entry.decode("utf-8"),
            "record_inclusion": None if record_proof is None else {
                "leaf_index": s.seq - 1, "tree_size": ecp.size,
                "hashes": [h.hex() for h in record_proof]},
            "checkpoint": (note + "".join(lines).encode("utf-8")).decode("utf-8"),
            "entry_inclusion": {"leaf_index": idx, "tree_size": size,
                                "hashes": [h.hex() for h in entry_proof]}}, None


async def _bundle(db: Db, log_key: VerifierKey | None, s: Served, known_size: int | None
                  ) -> dict[str, Any]:
    redaction = await db.redaction()
    withheld = (redaction is not None and not s.encrypted and redaction.covers(s.stream))
    out: dict[str, Any] = {
        "stream": s.stream, "seq": s.seq, "event_id": s.event_id,
        "content_type": s.content_type,
        "content": "redacted" if withheld else "encrypted" if s.encrypted else "plain",
        "record_b64": None if withheld else base64.b64encode(s.record).decode("ascii"),
        "leaf_hash": s.leaf_hash.hex(), "source": s.source, "finding": s.problem,
        "checkpoint": None, "inclusion": None, "consistency": None, "log": None,
        "log_reason": (f"no checkpoint of stream {s.stream} covers #{s.seq} yet (the writer "
                       f"signs one every few seconds)")}
    cp, lines, nodes = await db.bundle_proofs(s.stream, s.seq, known_size, MAX_COSIGNATURES)
    if cp is None:
        return out
    size, _root, note = cp
    out["checkpoint"] = (note + "".join(lines).encode("utf-8")).decode("utf-8")
    if s.seq > size:
        return out
    if nodes is None:
        raise Unavailable(f"the projection's tree of stream {s.stream} is smaller than its "
                          f"latest checkpoint ({size}); it is catching up", retry_after=2)

    def lookup(level: int, index: int) -> bytes:
        try:
            return nodes[(level, index)]
        except KeyError:
            raise Unavailable(f"the projection lacks tree node {(level, index)} of stream "
                              f"{s.stream}; rebuild the projections", retry_after=30) from None

    index = s.seq - 1
    out["inclusion"] = {"leaf_index": index, "tree_size": size,
                        "hashes": [h.hex() for h in inclusion_proof_from(index, size, lookup)]}
    if known_size is not None and known_size <= size:
        hashes = ([] if known_size == size else
                  [h.hex() for h in consistency_proof_from(known_size, size, lookup)])
        out["consistency"] = {"first": known_size, "second": size, "hashes": hashes}
    out["log"], out["log_reason"] = await log_path(db, log_key, s, size)
    return out


@router.get("/replay/{content_key_hex}/bundle", response_model=EvidenceBundle,
            responses={**ERRORS, **ERASED},
            summary="The record a replay serves, with its proofs (verify it client-side)")
async def replay_bundle(
    content_key_hex: Annotated[str, Path(
        description="hex content_key (64 digits)",
        json_schema_extra={"pattern": "^" + HEX_KEY.pattern + "$"})],
    request: Request, key: Caller, db: Db, settings: Config,
    stream: Annotated[str | None, Query(pattern=STREAM_PATTERN,
                                        description="only this stream")] = None,
    known_size: KnownSize = None,
) -> dict[str, Any]:
    """The earliest COMMITTED record with this content key among the key's streams (as
    `GET /replay/{content_key_hex}` serves it), as an evidence bundle: the record's log
    message, the stream's latest signed checkpoint and the record's inclusion proof in it
    (null until a checkpoint covers the record), and with `known_size` a consistency proof
    from that size. Nothing in it needs trusting the API: check it with the log's key."""
    ck, row = await replay_row(content_key_hex, key, db, stream, None)
    checked = await served(request.app, row, ck, await db.redaction(), verifiable=True)
    return await _bundle(db, settings.log_key, checked, known_size)


@router.get("/streams/{stream}/records/{seq}/bundle", response_model=EvidenceBundle,
            responses={**ERRORS, **ERASED},
            summary="A record with its proofs (verify it client-side)")
async def record_bundle(stream: StreamId, seq: Seq, request: Request, key: Caller, db: Db,
                        settings: Config, known_size: KnownSize = None) -> dict[str, Any]:
    """Record `seq` of `stream` (the earliest copy, as every lookup) as an evidence bundle;
    see `GET /replay/{content_key_hex}/bundle`."""
    if not key.scope.allows(stream):
        raise not_found(f"record stream={stream} seq={seq}")
    row = await db.served_record(stream, seq)
    if row is None:
        raise not_found(f"record stream={stream} seq={seq}")
    erased = erased_of(row, 6)
    if erased is not None:
        raise Erased(f"record {stream} #{seq}", *erased)
    checked = await served(request.app, row, None, await db.redaction(), verifiable=True)
    return await _bundle(db, settings.log_key, checked, known_size)
