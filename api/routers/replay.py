"""Replay: compare a re-execution with a sealed record, serve a recorded response.

    POST /replay/verify                compare a replayed output or response with its digest
                                       (or, basis bijotel, an output with BIJOTEL's claim)
    GET  /replay/{content_key_hex}     verbatim response bytes, served from storage

Both answer 410 ``erased`` (with ``erased_at`` and ``request_id``) for a record whose key was
erased: nothing of its content can be served or compared, by design.
"""

import json
import re
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError

from ..deps import Caller, Db, Metrics, not_found
from ..errors import Erased, InvalidRequest
from ..models import MAX_SEQ, STREAM_PATTERN, VerifyRequest, VerifyResponse, erased_of
from ..params import Digits
from ..responses import BODY_ERRORS, ERASED, ERRORS
from ..evidence import served
from ..verify import NoBijotelClaim, Original, VerifyResult, verify, verify_bijotel

__all__ = ["HEX_KEY", "replay_row", "replay_serve", "replay_verify", "router"]

router = APIRouter(tags=["replay"])

HEX_KEY = re.compile(r"[0-9a-fA-F]{64}")
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


_N_VERIFY = len(Original.__dataclass_fields__)


def _sealed_result(original: Original, body: VerifyRequest) -> VerifyResult:
    """An encrypted record's digests are keyed commitments: the API holds no key, so it
    cannot compare a replay with them, and must not call that a mismatch."""
    compared = "output_digest" if body.replayed_output is not None else "response_digest"
    return VerifyResult(False, None, None, compared, original.deterministic,
                        original.model_version, original.stream, original.seq,
                        f"the record is encrypted: its {compared} is a keyed commitment under "
                        f"its subject's key, which the API does not hold; replay it with the "
                        f"key (evidence_client.Replayer(key_store=...)) instead")


@router.post("/replay/verify", response_model=VerifyResponse,
             responses={**BODY_ERRORS, **ERASED},
             summary="Compare a re-execution with a sealed record", openapi_extra=_VERIFY_BODY)
async def replay_verify(request: Request, key: Caller, db: Db, metrics: Metrics) -> Response:
    """Hashes `replayed_output` (sha256(0x04 ‖ utf8)) or the decoded
    `replayed_response_b64` (sha256(0x01 ‖ bytes)) and compares it with the record's
    digest. 200 whether or not it matches; `reason` says what differed. 404 when the
    record does not exist or is outside the key's streams; 410 `erased` when its content
    was erased (its key destroyed: nothing can be compared, ever). An encrypted record's
    digests are keyed commitments the API cannot compute: 200 with `match` false and a
    `reason` that says so, never a mismatch.

    The record is named by `stream` + `seq` (a JSON integer >= 1) or by `event_id` (a
    lowercase UUIDv7), never both. By `event_id` it is the original among the streams the
    key may read (the first by the record contract's order, never a later copy sealed
    under the same id), and the answer's `Evidence-Event-Copies` header counts the other
    records there with that id, `Evidence-Event-Is-Copy` says whether the one compared is
    itself a flagged copy (its original outside the key's streams). Exactly one of
    `replayed_output` or `replayed_response_b64` is given. The body may be up to 8 MiB by default
    (`EVIDENCE_API_MAX_VERIFY_BYTES`): room for a replayed response of 6 MiB as base64.
    A larger body is a 413 `too_large`, answered from its Content-Length before it is
    read; compare `replayed_output` instead, or raise the limit. A body that takes longer
    than `EVIDENCE_API_BODY_TIMEOUT` (30 s) to arrive is a 408 `timeout`.

    `basis` `bijotel` compares `replayed_output` with the `bijotel.replay.output_hash`
    claim of a record mapped from a span that made BIJOTEL's replay claims, as BIJOTEL's
    `verify_replay` does (sha256(utf8(text)), no prefix): `match`, `original_hash` (the
    claim), `replay_hash` and `reason` are BIJOTEL's answer, `compared` is
    `bijotel.replay.output_hash`, and `bijotel` gives BIJOTEL's whole answer with the claim's
    verdict at mapping time (`claim_verdict`: only `VERIFIED` was checked against content the
    span carried). A record without that claim is a 422 `invalid_request` saying what it is."""
    # The body is parsed by pydantic-core straight from bytes rather than through
    # FastAPI's body parameter (json.loads, then validation): this is the hot route.
    body = _parse_verify(await request.body())
    row, original = await _verify_record(body, key, db)
    if body.basis == "bijotel":
        # The claim is plain text in the record's telemetry (a mapped capture is never
        # encrypted), so it is compared whatever the record's key; a record without one is
        # a request that does not apply to it.
        try:
            result = verify_bijotel(original, body.replayed_output or "")
        except NoBijotelClaim as e:
            raise InvalidRequest(str(e)) from None
    elif row[_N_VERIFY] is not None:  # key_id: an encrypted record
        result = _sealed_result(original, body)
    else:
        result = verify(original, body.replayed_output, body.response_bytes)
    metrics.count_verify(result.outcome)
    # By event id, the row is the original (api.db: the first by the contract's order, never
    # a copy) and ends with EVENT_COLUMNS: say whether other records carry the id.
    headers = None if body.event_uuid is None else {
        "Evidence-Event-Copies": str(row[-2]),
        "Evidence-Event-Is-Copy": "true" if row[-1] else "false"}
    return Response(json.dumps(result.to_dict()).encode(), media_type="application/json",
                    headers=headers)


async def _verify_record(body: Any, key: Any, db: Any) -> tuple[tuple[Any, ...], Original]:
    """The record a verify request names, in the key's streams: its row and its ``Original``.
    404 when there is none there (the same answer for outside the key's scope); 410 when its
    content was erased."""
    if body.stream is not None and not key.scope.allows(body.stream):
        raise not_found(f"record stream={body.stream} seq={body.seq}")
    row = await db.verify_row(body.stream, body.seq, body.event_uuid, key.scope)
    if row is None or not key.scope.allows(row[0]):
        what = (f"record event_id={body.event_id}" if body.event_id is not None
                else f"record stream={body.stream} seq={body.seq}")
        raise not_found(what)
    # Row columns are VERIFY_COLUMNS, the field order of Original, then ERASED_COLUMNS.
    original = Original(*row[:_N_VERIFY])
    erased = erased_of(row, _N_VERIFY)
    if erased is not None:
        raise Erased(f"record {original.stream} #{original.seq}", *erased)
    return row, original


async def replay_row(content_key_hex: str, key: Any, db: Any, stream: str | None,
                     seq: int | None) -> tuple[bytes, tuple[Any, ...]]:
    """``(content key, row)`` of the record a replay of ``content_key_hex`` serves
    (``api.evidence.SERVE_COLUMNS``), not yet checked; 422, 404 or 410 ``erased`` otherwise."""
    if not HEX_KEY.fullmatch(content_key_hex):
        raise InvalidRequest("content_key_hex must be 64 hex digits (a SHA-256 content key)")
    if stream is not None and not key.scope.allows(stream):
        raise not_found(f"committed record with content key {content_key_hex.lower()}")
    ck = bytes.fromhex(content_key_hex)
    row = await db.replay(ck, key.scope, stream, seq)
    if row is None:
        raise not_found(f"committed record with content key {ck.hex()}")
    erased = erased_of(row, 6)
    if erased is not None:
        raise Erased(f"record {row[0]} #{row[1]}", *erased)
    return ck, row


@router.get("/replay/{content_key_hex}", responses={
    200: {"content": {"application/octet-stream": {}},
          "description": "the verbatim response body, with its recorded Content-Type"},
    **ERRORS, **ERASED}, response_class=Response, summary="Serve a recorded response by content key")
async def replay_serve(
    content_key_hex: Annotated[str, Path(
        description="hex content_key (64 digits)",
        json_schema_extra={"pattern": "^" + HEX_KEY.pattern + "$"})],
    request: Request,
    key: Caller,
    db: Db,
    stream: Annotated[str | None, Query(pattern=STREAM_PATTERN,
                                        description="only this stream")] = None,
    seq: Annotated[int | None, Query(ge=1, le=MAX_SEQ,
                                     description="only this seq (needs stream)"), Digits] = None,
) -> Response:
    """The response bytes of the earliest COMMITTED record with this content key among
    the streams the key may read, exactly as recorded. Never calls a provider.
    Headers name the record: Evidence-Stream, Evidence-Seq, Evidence-Record-Digest,
    Evidence-Content-Key, Evidence-Event-Id. The row is checked against its sealed record
    first; one that disagrees is served from the log instead (`Evidence-Source: log`,
    `Evidence-Finding: projection_altered`, and a finding on the stream); 503 when the log
    cannot be read then. On a stream the read side redacts, the bytes are masked
    (`Evidence-Redacted: true`): not the recording. To verify what is served without
    trusting the API, use `GET /replay/{content_key_hex}/bundle`. For an encrypted stream the content key is
    the keyed one and the body is the sealed envelope (the Replayer opens it with the
    subject's key); 410 `erased` when that key was erased."""
    if seq is not None and stream is None:
        raise InvalidRequest("seq needs stream: give both, or neither")
    ck, row = await replay_row(content_key_hex, key, db, stream, seq)
    redaction = await db.redaction()
    checked = await served(request.app, row, ck, redaction)
    content_type = checked.content_type
    if not content_type or not _SAFE_HEADER.fullmatch(content_type):
        content_type = "application/octet-stream"
    headers = {
        "content-type": content_type,
        "Evidence-Stream": checked.stream, "Evidence-Seq": str(checked.seq),
        "Evidence-Record-Digest": checked.record_digest.hex(), "Evidence-Content-Key": ck.hex(),
        "Evidence-Event-Id": checked.event_id, "Evidence-Source": checked.source,
    }
    if redaction is not None and not checked.encrypted and redaction.covers(checked.stream):
        headers["Evidence-Redacted"] = "true"
    if checked.problem is not None:
        headers["Evidence-Finding"] = "projection_altered"
    return Response(checked.response or b"", headers=headers)
