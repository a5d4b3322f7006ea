"""Replay fidelity: how exactly a record, or a run described by a manifest, can be replayed.

    GET  /streams/{stream}/records/{seq}/fidelity   both replay modes of a sealed record
    POST /fidelity/analyze                          an evidence.replay-runtime v1 manifest

The analyzer (:mod:`fidelity`, which loads the manifest's JSON Schema) is imported on the
first request, not with the app. A manifest is parsed here with limits
(:func:`api.jsonbody.loads_strict`) and checked against I-JSON before the analyzer sees it: a
manifest can pass the JSON Schema and still hold what its RFC 8785 digest cannot encode
(NaN, 1e400, an integer beyond 2^53, a lone surrogate) or what recursion cannot walk.
"""

from typing import Any

from fastapi import APIRouter, Request

from ..db import BYTES_COLUMNS, ERASED_COLUMNS, META_COLUMNS
from ..deps import Caller, Db, Seq, StreamId, not_found
from ..errors import InvalidRequest
from ..jsonbody import JsonBodyError, i_json_problem, loads_strict
from ..responses import BODY_ERRORS, ERRORS, error_response

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

    record = dict(zip((*META_COLUMNS, *ERASED_COLUMNS, *BYTES_COLUMNS), row))
    record["erased"] = record["erased_at_us"] is not None
    return analyze_record(record)


def _invalid_manifest(problems: list[str]) -> Any:
    return error_response(
        422, "invalid_manifest",
        f"the manifest is not a valid evidence.replay-runtime v1 manifest "
        f"({len(problems)} problem{'s' if len(problems) != 1 else ''}): {problems[0]}",
        problems=problems)


@router.post("/fidelity/analyze", responses=BODY_ERRORS,
             summary="Replay fidelity of a run manifest", openapi_extra=_MANIFEST_BODY)
async def fidelity_analyze(request: Request, _key: Caller) -> dict[str, Any]:
    """The body is an `evidence.replay-runtime` v1 manifest (JSON Schema:
    `schemas/replay-runtime.schema.json`). Answers `level`, every gap in
    `missing_evidence` with its impact, and `manifest_sha256` (SHA-256 of the RFC 8785
    canonical JSON). An invalid manifest is a 422 `invalid_manifest` whose `problems`
    name each violation by JSON path; so is one that RFC 8785 cannot canonicalize: an
    integer beyond ±(2^53 - 1) (send a large seed as its decimal text, as the record
    routes do). A body that is not strict JSON (NaN, Infinity, 1e400, a lone surrogate,
    nesting deeper than 64) is a 422 `invalid_request`. The body may be up to 1 MiB
    (`EVIDENCE_API_MAX_BODY_BYTES`), else 413 `too_large`."""
    from fidelity import ManifestError, analyze

    raw = await request.body()
    if not raw.strip():
        raise InvalidRequest("a JSON body (an evidence.replay-runtime manifest) is required")
    try:
        manifest = loads_strict(raw)
    except JsonBodyError as e:
        raise InvalidRequest(str(e)) from None
    # Strict JSON leaves one value RFC 8785 cannot canonicalize (the manifest's digest):
    # an integer beyond 2^53. Said before the analyzer would trip over it.
    problem = i_json_problem(manifest)
    if problem is not None:
        return _invalid_manifest([problem])
    try:
        return analyze(manifest).to_dict()
    except ManifestError as e:
        return _invalid_manifest(e.problems)
