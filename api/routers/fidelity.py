"""Replay fidelity: how exactly a record, or a run described by a manifest, can be replayed.

    GET  /streams/{stream}/records/{seq}/fidelity   both replay modes of a sealed record
    POST /fidelity/analyze                          an evidence.replay-runtime v1 manifest

The analyzer (:mod:`fidelity`, which loads the manifest's JSON Schema) is imported on the
first request, not with the app.
"""

import json
from typing import Any

from fastapi import APIRouter, Request

from ..db import BYTES_COLUMNS, META_COLUMNS
from ..deps import Caller, Db, Seq, StreamId, not_found
from ..errors import InvalidRequest
from ..models import ErrorBody
from ..responses import ERRORS, error_response

__all__ = ["fidelity_analyze", "record_fidelity", "router"]

router = APIRouter(tags=["verification"])

# Documented as an object with a pointer to the published schema, rather than inlining it:
# its $defs would have to be rewritten into OpenAPI components.
_MANIFEST_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"type": "object", "description": (
        "an evidence.replay-runtime v1 manifest; JSON Schema: "
        "schemas/replay-runtime.schema.json")}}}}}


@router.get("/streams/{stream}/records/{seq}/fidelity", responses=ERRORS,
            summary="Replay fidelity of a sealed record")
async def record_fidelity(stream: StreamId, seq: Seq, key: Caller, db: Db) -> dict[str, Any]:
    """Two reports from manifests derived from the record: `log_replay` (the response
    served verbatim from the log: exact when request and response bytes are kept) and
    `live_reexecution` (the recorded request sent to the hosted API again: at best
    controlled, a hosted API guarantees no determinism). Each has `level`,
    `missing_evidence`, `manifest_sha256` and the `manifest` analyzed."""
    if not key.scope.allows(stream):
        raise not_found(f"record stream={stream} seq={seq}")
    row = await db.record(stream, seq, True)
    if row is None:
        raise not_found(f"record stream={stream} seq={seq}")
    from fidelity import analyze_record

    return analyze_record(dict(zip((*META_COLUMNS, *BYTES_COLUMNS), row)))


@router.post("/fidelity/analyze", responses={**ERRORS, 422: {"model": ErrorBody}},
             summary="Replay fidelity of a run manifest", openapi_extra=_MANIFEST_BODY)
async def fidelity_analyze(request: Request, _key: Caller) -> dict[str, Any]:
    """The body is an `evidence.replay-runtime` v1 manifest (JSON Schema:
    `schemas/replay-runtime.schema.json`). Answers `level`, every gap in
    `missing_evidence` with its impact, and `manifest_sha256` (SHA-256 of the RFC 8785
    canonical JSON). An invalid manifest is a 422 `invalid_manifest` whose `problems`
    name each violation by JSON path."""
    from fidelity import ManifestError, analyze

    raw = await request.body()
    try:
        manifest = json.loads(raw) if raw else None
    except ValueError as e:
        raise InvalidRequest(f"the body is not valid JSON: {e}") from None
    if manifest is None:
        raise InvalidRequest("a JSON body (an evidence.replay-runtime manifest) is required")
    try:
        return analyze(manifest).to_dict()
    except ManifestError as e:
        return error_response(
            422, "invalid_manifest",
            f"the manifest is not a valid evidence.replay-runtime v1 manifest "
            f"({len(e.problems)} problem{'s' if len(e.problems) != 1 else ''})",
            problems=e.problems)
