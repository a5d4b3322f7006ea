"""The verifiable log: signed checkpoints, Merkle proofs, the log key, witness cosignatures.

    GET  /streams/{stream}/checkpoint                 the latest checkpoint (or ?tree_size=N),
                                                      text/plain, byte-exact, cosigned
    GET  /streams/{stream}/proof/inclusion            ?seq=N[&tree_size=M]  RFC 9162 path
    GET  /streams/{stream}/proof/consistency          ?first=A&second=B     RFC 9162 proof
    GET  /log/key                                     the log's note verifier key (no API key)
    POST /streams/{stream}/checkpoint/cosignatures    a witness's cosigned checkpoint (202)

Proofs are computed from the projection's stored perfect subtree hashes
(:func:`evidence_contract.merkle.inclusion_proof_from` and friends): the nodes a proof needs
depend on the sizes alone, so each proof is one indexed query, O(log n) rows (O(log² n) at
most on a ragged right edge). A proof is for a tree no larger than the latest checkpoint:
that is what the log has signed, and what a verifier can check the proof against. A bad
parameter is a 422 with the reason; a checkpoint the projection has not caught up with yet is
a 503 with Retry-After.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from evidence_contract.merkle import (
    consistency_nodes,
    consistency_proof_from,
    inclusion_nodes,
    inclusion_proof_from,
)
from evidence_contract.note import (
    COSIGNATURE_TYPES,
    MAX_SIGNATURES,
    NoteError,
    format_note,
    format_vkey,
)
from evidence_contract.tlog import (
    KIND_COSIGNATURE,
    KIND_HEADER,
    SIZE_HEADER,
    STREAM_HEADER,
    WITNESS_HEADER,
    open_stream_checkpoint,
)

from ..deps import Caller, Config, Db, StreamId, not_found
from ..errors import (
    Conflict, Forbidden, InvalidRequest, NotFound, Unavailable, UnsupportedMediaType,
)
from ..models import MAX_SEQ, ConsistencyProof, CosignatureAccepted, ErrorBody, InclusionProof
from ..params import Digits
from ..responses import BODY_ERRORS, ERRORS, PUBLIC_ERRORS

__all__ = ["MAX_COSIGNATURES", "get_checkpoint", "get_log_key", "node_lookup",
           "post_cosignature", "prove_consistency", "prove_inclusion", "router"]

router = APIRouter(tags=["verifiable log"])

TreeSize = Annotated[int | None, Query(ge=1, le=MAX_SEQ, description=(
    "a tree size; default: the latest checkpoint's")), Digits]
_TEXT = {"text/plain": {"schema": {"type": "string"}}}
MAX_COSIGNATURES = MAX_SIGNATURES - 1  # a note holds at most 100 lines, one is the log's
_NOTE_BYTES = 64 << 10
_COSIGNED_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {"text/plain": {
    "schema": {"type": "string", "maxLength": _NOTE_BYTES,
               "description": "the checkpoint note as the witness returned it: the log's "
                              "signature and the witness's cosignature line(s)"}}}}}


async def _latest(db: Db, stream: str) -> tuple[int, bytes, bytes]:
    cp, _lines = await db.checkpoint(stream, None, 0)
    if cp is None:
        raise NotFound(f"no checkpoint of stream {stream} visible to this API key (none is "
                       f"signed before the stream's first record)")
    return cp


async def node_lookup(db: Db, stream: str, wanted: list[tuple[int, int]], size: int):
    tree = await db.tree(stream)
    if tree is None or tree[0] < size:
        have = 0 if tree is None else tree[0]
        raise Unavailable(f"the projection holds {have} records of stream {stream} in its tree, "
                          f"fewer than the {size} the proof is over; it is catching up",
                          retry_after=2)
    nodes = await db.nodes(stream, wanted)
    missing = [w for w in wanted if w not in nodes]
    if missing:
        raise Unavailable(f"the projection lacks tree nodes {missing[:3]} of stream {stream}; "
                          f"rebuild the projections", retry_after=30)
    return lambda level, index: nodes[(level, index)]


@router.get("/streams/{stream}/checkpoint", response_class=Response, responses={
    200: {"content": _TEXT, "description": "the signed note, byte-exact (C2SP signed-note "
                                            "holding a tlog-checkpoint)"}, **ERRORS},
    summary="The stream's signed checkpoint with its cosignatures")
async def get_checkpoint(stream: StreamId, key: Caller, db: Db,
                         tree_size: TreeSize = None) -> Response:
    """The latest checkpoint of the stream (or the one of `tree_size`): the note the log
    signed (`<log name>/<stream>`, size, base64 root), its log signature, then every witness
    cosignature the log holds for it. Verify it with the key at `GET /log/key`."""
    if not key.scope.allows(stream):
        raise not_found(f"checkpoint of stream {stream}")
    cp, lines = await db.checkpoint(stream, tree_size, MAX_COSIGNATURES)
    if cp is None:
        what = "any size" if tree_size is None else f"size {tree_size}"
        raise not_found(f"checkpoint of stream {stream} at {what}")
    note = cp[2] + "".join(lines).encode("utf-8")
    return Response(note, media_type="text/plain; charset=utf-8")


@router.get("/streams/{stream}/proof/inclusion", response_model=InclusionProof,
            responses=ERRORS, summary="Inclusion proof of a record in the stream's tree")
async def prove_inclusion(
    stream: StreamId, key: Caller, db: Db,
    seq: Annotated[int, Query(ge=1, le=MAX_SEQ, description="the record's seq (leaf seq - 1)"),
                   Digits],
    tree_size: TreeSize = None,
) -> dict[str, Any]:
    """The RFC 9162 inclusion path of record `seq` in the tree of `tree_size` records
    (default: the latest checkpoint's size, which bounds it). Check it with the record's
    leaf hash against the root of the checkpoint of that size."""
    if not key.scope.allows(stream):
        raise not_found(f"stream {stream}")
    latest = (await _latest(db, stream))[0]
    size = latest if tree_size is None else tree_size
    if size > latest:
        raise InvalidRequest(f"tree_size {size} is beyond the latest checkpoint of stream "
                             f"{stream} (size {latest})")
    if seq > size:
        raise InvalidRequest(f"seq {seq} is not in a tree of {size} records (seq <= tree_size)")
    index = seq - 1
    wanted = list(dict.fromkeys([(0, index), *inclusion_nodes(index, size)]))
    lookup = await node_lookup(db, stream, wanted, size)
    path = inclusion_proof_from(index, size, lookup)
    return {"leaf_index": index, "tree_size": size, "leaf_hash": lookup(0, index).hex(),
            "hashes": [h.hex() for h in path]}


@router.get("/streams/{stream}/proof/consistency", response_model=ConsistencyProof,
            responses=ERRORS, summary="Consistency proof between two sizes of the stream's tree")
async def prove_consistency(
    stream: StreamId, key: Caller, db: Db,
    first: Annotated[int, Query(ge=1, le=MAX_SEQ, description="the smaller tree size"), Digits],
    second: Annotated[int, Query(ge=1, le=MAX_SEQ, description=(
        "the larger tree size, at most the latest checkpoint's")), Digits],
) -> dict[str, Any]:
    """The RFC 9162 proof that the tree of `second` records extends the tree of `first`
    (equal sizes: an empty proof). Check it against the roots of the two checkpoints."""
    if not key.scope.allows(stream):
        raise not_found(f"stream {stream}")
    if first > second:
        raise InvalidRequest(f"first ({first}) is larger than second ({second})")
    latest = (await _latest(db, stream))[0]
    if second > latest:
        raise InvalidRequest(f"second {second} is beyond the latest checkpoint of stream "
                             f"{stream} (size {latest})")
    lookup = await node_lookup(db, stream, consistency_nodes(first, second), second)
    proof = consistency_proof_from(first, second, lookup)
    return {"first": first, "second": second, "tree_size": second,
            "hashes": [h.hex() for h in proof]}


@router.get("/log/key", response_class=Response, responses={
    200: {"content": _TEXT, "description": "`<name>+<hex key id>+<base64 key>` and a newline"},
    404: {"model": ErrorBody}, **PUBLIC_ERRORS},
    summary="The log's note verifier key (no API key needed)")
async def get_log_key(settings: Config) -> Response:
    """The C2SP note verifier key of the log's checkpoint signatures. Public: it is what
    anyone checking a checkpoint needs, and says nothing of any tenant."""
    if settings.log_key is None:
        raise NotFound("this API has no log verifier key configured "
                       "(EVIDENCE_LOG_VERIFIER_KEY_FILE or EVIDENCE_LOG_SIGNING_KEY_FILE)")
    return Response(format_vkey(settings.log_key) + "\n", media_type="text/plain; charset=utf-8")


@router.post("/streams/{stream}/checkpoint/cosignatures", status_code=202,
             response_model=CosignatureAccepted, openapi_extra=_COSIGNED_BODY,
             responses={**BODY_ERRORS, **{s: {"model": ErrorBody} for s in (403, 409, 415)}},
             summary="Submit a witness's cosignature of a checkpoint")
async def post_cosignature(stream: StreamId, request: Request, key: Caller, db: Db,
                           settings: Config) -> dict[str, Any]:
    """The body is the checkpoint note (text/plain) with the log's signature and the
    witness's cosignature line(s) (Ed25519 `cosignature/v1` or ML-DSA-44). It is taken (202)
    when the log's signature verifies, the origin is this stream's, the log holds that very
    checkpoint, and a cosignature verifies with a witness key the log knows
    (`EVIDENCE_WITNESS_KEYS`, or the witnesses file as it is now); it is then produced
    to `evidence.checkpoints` and served with the checkpoint once projected. 403 for a
    witness the log does not know, 409 for a checkpoint the log does not hold as given, 422
    for a malformed or wrongly signed note, 503 when Kafka cannot take it."""
    if not key.scope.allows(stream):
        raise not_found(f"checkpoint of stream {stream}")
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "text/plain":
        raise UnsupportedMediaType("the body is a signed note: send it as text/plain")
    raw = await request.body()
    if len(raw) > _NOTE_BYTES:
        raise InvalidRequest(f"a cosigned checkpoint note is at most {_NOTE_BYTES} bytes")
    if settings.log_key is None:
        raise Forbidden("this log takes no cosignatures: it has no log verifier key configured")
    witness_keys = settings.current_witness_keys()
    if not witness_keys:
        raise Forbidden("this log takes no cosignatures: no witness key is configured "
                        "(EVIDENCE_WITNESSES_FILE or EVIDENCE_WITNESS_KEYS)")
    try:
        cp, note, _ = open_stream_checkpoint(raw, settings.log_key, stream, witness_keys)
    except NoteError as e:
        raise InvalidRequest(f"not a checkpoint of stream {stream} signed by the log: {e}") from None
    log_id = (settings.log_key.name, settings.log_key.key_id)
    cosigs = [s for s in note.verified if (s.name, s.key_id) != log_id]
    if not cosigs:
        raise Forbidden("the note has no cosignature from a witness this log knows; known: "
                        + ", ".join(sorted({k.name for k in witness_keys})))
    known = {(k.name, k.key_id): k for k in witness_keys}
    if any(known[(s.name, s.key_id)].sig_type not in COSIGNATURE_TYPES for s in cosigs):
        raise InvalidRequest("a witness signs checkpoints with a cosignature key "
                             "(Ed25519 cosignature/v1 or ML-DSA-44)")
    held, _lines = await db.checkpoint(stream, cp.size, 0)
    if held is None:
        raise Conflict(f"the log holds no checkpoint of stream {stream} at size {cp.size} "
                       f"(yet: it may not be projected)")
    if held[1] != cp.root_hash:
        raise Conflict(f"the log's checkpoint of size {cp.size} has another root")
    log_sig = next(s for s in note.verified if (s.name, s.key_id) == log_id)
    for sig in cosigs:  # one message per witness: its header names it
        await request.app.state.producer.produce(
            stream, format_note(note.text, [log_sig, sig]),
            [(KIND_HEADER, KIND_COSIGNATURE.encode()), (STREAM_HEADER, stream.encode()),
             (SIZE_HEADER, str(cp.size).encode()), (WITNESS_HEADER, sig.name.encode())])
    return {"stream": stream, "tree_size": cp.size, "witnesses": [s.name for s in cosigs]}
