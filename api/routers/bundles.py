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
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request

from evidence_contract.merkle import consistency_proof_from, inclusion_proof_from

from ..deps import Caller, Db, Seq, StreamId, not_found
from ..errors import Erased, Unavailable
from ..evidence import Served, served
from ..models import MAX_SEQ, STREAM_PATTERN, EvidenceBundle, erased_of
from ..responses import ERASED, ERRORS
from .replay import HEX_KEY, replay_row
from .tlog import MAX_COSIGNATURES

__all__ = ["record_bundle", "replay_bundle", "router"]

router = APIRouter(tags=["verifiable log"])

KnownSize = Annotated[int | None, Query(ge=1, le=MAX_SEQ, description=(
    "the tree size of the last checkpoint of this stream the reader verified: the bundle "
    "then carries the proof that its checkpoint extends that one"))]


async def _bundle(request: Request, db: Db, s: Served, known_size: int | None
                  ) -> dict[str, Any]:
    redaction = await db.redaction()
    withheld = (redaction is not None and not s.encrypted and redaction.covers(s.stream))
    out: dict[str, Any] = {
        "stream": s.stream, "seq": s.seq, "event_id": s.event_id,
        "content_type": s.content_type,
        "content": "redacted" if withheld else "encrypted" if s.encrypted else "plain",
        "record_b64": None if withheld else base64.b64encode(s.record).decode("ascii"),
        "leaf_hash": s.leaf_hash.hex(), "source": s.source, "finding": s.problem,
        "checkpoint": None, "inclusion": None, "consistency": None}
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
    return out


@router.get("/replay/{content_key_hex}/bundle", response_model=EvidenceBundle,
            responses={**ERRORS, **ERASED},
            summary="The record a replay serves, with its proofs (verify it client-side)")
async def replay_bundle(
    content_key_hex: Annotated[str, Path(
        description="hex content_key (64 digits)",
        json_schema_extra={"pattern": "^" + HEX_KEY.pattern + "$"})],
    request: Request, key: Caller, db: Db,
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
    return await _bundle(request, db, checked, known_size)


@router.get("/streams/{stream}/records/{seq}/bundle", response_model=EvidenceBundle,
            responses={**ERRORS, **ERASED},
            summary="A record with its proofs (verify it client-side)")
async def record_bundle(stream: StreamId, seq: Seq, request: Request, key: Caller, db: Db,
                        known_size: KnownSize = None) -> dict[str, Any]:
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
    return await _bundle(request, db, checked, known_size)
