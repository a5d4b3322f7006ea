"""Replay: compare a re-execution with a sealed record, serve a recorded response.

    POST /replay/verify                compare a replayed output or response with its digest
    GET  /replay/{content_key_hex}     verbatim response bytes, served from storage
"""

import json
import re
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError

from ..deps import Caller, Db, Metrics, not_found
from ..errors import InvalidRequest
from ..models import MAX_SEQ, STREAM_PATTERN, VerifyRequest, VerifyResponse
from ..responses import BODY_ERRORS, ERRORS
from ..verify import Original, verify

__all__ = ["replay_serve", "replay_verify", "router"]

router = APIRouter(tags=["replay"])

_HEX_KEY = re.compile(r"[0-9a-fA-F]{64}")
# A recorded Content-Type is echoed only if it is a plain header value.
_SAFE_HEADER = re.compile(r"[\x20-\x7e]{1,256}")

_VERIFY_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": VerifyRequest.model_json_schema(
        ref_template="#/components/schemas/{model}")}}}}


def _parse_verify(raw: bytes) -> VerifyRequest:
    if not raw:
        raise RequestValidationError([{"type": "missing", "loc": ("body",),
                                       "msg": "Field required", "input": None}])
    try:
        return VerifyRequest.model_validate_json(raw)
    except ValidationError as e:
        raise RequestValidationError(
            [{**err, "loc": ("body", *err["loc"])} for err in e.errors(include_url=False)]
        ) from None


@router.post("/replay/verify", response_model=VerifyResponse, responses=BODY_ERRORS,
             summary="Compare a re-execution with a sealed record", openapi_extra=_VERIFY_BODY)
async def replay_verify(request: Request, key: Caller, db: Db, metrics: Metrics) -> Response:
    """Hashes `replayed_output` (sha256(0x04 ‖ utf8)) or the decoded
    `replayed_response_b64` (sha256(0x01 ‖ bytes)) and compares it with the record's
    digest. 200 whether or not it matches; `reason` says what differed. 404 when the
    record does not exist or is outside the key's streams.

    The record is named by `stream` + `seq` (a JSON integer >= 1) or by `event_id` (a
    lowercase UUIDv7), never both; exactly one of `replayed_output` or
    `replayed_response_b64` is given. The body may be up to 8 MiB by default
    (`EVIDENCE_API_MAX_VERIFY_BYTES`): room for a replayed response of 6 MiB as base64.
    A larger body is a 413 `too_large`, answered from its Content-Length before it is
    read; compare `replayed_output` instead, or raise the limit. A body that takes longer
    than `EVIDENCE_API_BODY_TIMEOUT` (30 s) to arrive is a 408 `timeout`."""
    # The body is parsed by pydantic-core straight from bytes rather than through
    # FastAPI's body parameter (json.loads, then validation): this is the hot route.
    body = _parse_verify(await request.body())
    if body.stream is not None and not key.scope.allows(body.stream):
        raise not_found(f"record stream={body.stream} seq={body.seq}")
    row = await db.verify_row(body.stream, body.seq, body.event_uuid, key.scope)
    if row is None or not key.scope.allows(row[0]):
        what = (f"record event_id={body.event_id}" if body.event_id is not None
                else f"record stream={body.stream} seq={body.seq}")
        raise not_found(what)
    # Row columns are VERIFY_COLUMNS, the field order of Original.
    result = verify(Original(*row), body.replayed_output, body.response_bytes)
    metrics.count_verify(result.outcome)
    return Response(json.dumps(result.to_dict()).encode(), media_type="application/json")


@router.get("/replay/{content_key_hex}", responses={
    200: {"content": {"application/octet-stream": {}},
          "description": "the verbatim response body, with its recorded Content-Type"},
    **ERRORS}, response_class=Response, summary="Serve a recorded response by content key")
async def replay_serve(
    content_key_hex: Annotated[str, Path(
        description="hex content_key (64 digits)",
        json_schema_extra={"pattern": "^" + _HEX_KEY.pattern + "$"})],
    key: Caller,
    db: Db,
    stream: Annotated[str | None, Query(pattern=STREAM_PATTERN,
                                        description="only this stream")] = None,
    seq: Annotated[int | None, Query(ge=1, le=MAX_SEQ,
                                     description="only this seq (needs stream)")] = None,
) -> Response:
    """The response bytes of the earliest COMMITTED record with this content key among
    the streams the key may read, exactly as recorded. Never calls a provider.
    Headers name the record: Evidence-Stream, Evidence-Seq, Evidence-Record-Digest,
    Evidence-Content-Key, Evidence-Event-Id."""
    if not _HEX_KEY.fullmatch(content_key_hex):
        raise InvalidRequest("content_key_hex must be 64 hex digits (a SHA-256 content key)")
    if seq is not None and stream is None:
        raise InvalidRequest("seq needs stream: give both, or neither")
    if stream is not None and not key.scope.allows(stream):
        raise not_found(f"committed record with content key {content_key_hex.lower()}")
    ck = bytes.fromhex(content_key_hex)
    row = await db.replay(ck, key.scope, stream, seq)
    if row is None:
        raise not_found(f"committed record with content key {ck.hex()}")
    r_stream, r_seq, digest, event_id, content_type, body = row
    if not content_type or not _SAFE_HEADER.fullmatch(content_type):
        content_type = "application/octet-stream"
    return Response(bytes(body), headers={
        "content-type": content_type,
        "Evidence-Stream": r_stream, "Evidence-Seq": str(r_seq),
        "Evidence-Record-Digest": bytes(digest).hex(), "Evidence-Content-Key": ck.hex(),
        "Evidence-Event-Id": str(event_id),
    })
