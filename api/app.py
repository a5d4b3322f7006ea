"""The FastAPI application: :func:`create_app` builds it from :class:`~api.config.Settings`.

Nothing connects at import or in :func:`create_app`; the connection pool opens in the lifespan
and closes with it. Routes (OpenAPI at ``/docs``):

    POST /replay/verify                       compare a re-execution with a sealed digest
    GET  /replay/{content_key_hex}            verbatim response bytes, served from storage
    GET  /streams                             streams the key may read, keyset-paged
    GET  /streams/{stream}                    head seq/digest, record count, findings
    GET  /streams/{stream}/records            records by seq, keyset-paged (after_seq)
    GET  /streams/{stream}/records/{seq}      one record; ?include=bytes adds the bodies
    GET  /streams/{stream}/records/{seq}/fidelity  replay fidelity of a sealed record
    GET  /streams/{stream}/audit              re-verify one stream from its projection
    GET  /events/{event_id}                   one record by capture id
    POST /fidelity/analyze                    replay fidelity of a run manifest
    GET  /healthz  /readyz  /metrics          no API key (see api.metrics for why)

Every other route needs ``Authorization: Bearer <key>``; a record outside the key's streams is
a 404 exactly like a missing one. Errors are ``{"error", "message"}`` (see :mod:`api.errors`).
"""

# No `from __future__ import annotations` here: FastAPI reads the routes' annotations at
# definition time, and they refer to names local to _routes (the Caller dependency).
import asyncio
import json
import logging
import re
import uuid
from contextlib import asynccontextmanager
from importlib import metadata
from typing import Annotated, Any, AsyncIterator

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPBearer
from pydantic import ValidationError
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException

from .auth import ApiKey, Keyring
from .config import Settings
from .db import BYTES_COLUMNS, META_COLUMNS, Database
from .errors import ApiError, InvalidRequest, NotFound, Unauthorized, Unavailable
from .metrics import ApiMetrics, MetricsMiddleware
from .models import (
    MAX_SEQ, STREAM_PATTERN, ErrorBody, RecordOut, RecordPage, StreamDetail, StreamList,
    VerifyRequest, VerifyResponse, finding_dict, head_dict, record_dict,
)
from .verify import Original, verify

__all__ = ["create_app", "app_from_env"]

log = logging.getLogger("evidence.api")

_HEX_KEY = re.compile(r"[0-9a-fA-F]{64}")
# A recorded Content-Type is echoed only if it is a plain header value.
_SAFE_HEADER = re.compile(r"[\x20-\x7e]{1,256}")
_FINDINGS_SHOWN = 100

_ERRORS = {status: {"model": ErrorBody} for status in (401, 404, 422, 503)}
_PUBLIC_ERRORS = {503: {"model": ErrorBody}}
_HTTP_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 413: "too_large", 415: "unsupported_media_type"}

StreamId = Annotated[str, Path(pattern=STREAM_PATTERN, description="stream id")]


def _version() -> str:
    try:
        return metadata.version("evidence-store")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory api.app:app_from_env``."""
    return create_app(Settings.from_env())


def create_app(settings: Settings) -> FastAPI:
    db = Database(settings.database_url, settings.views_schema, min_size=settings.pool_min,
                  max_size=settings.pool_max, timeout=settings.db_timeout,
                  statement_timeout_ms=settings.statement_timeout_ms)
    metrics = ApiMetrics()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await db.open()
        try:
            yield
        finally:
            await db.close()

    app = FastAPI(
        title="evidence-store API", version=_version(), lifespan=lifespan,
        description="Replay verification, record lookup and replay serving over the evidence "
                    "log's read model. Every route but /healthz, /readyz and /metrics needs "
                    "`Authorization: Bearer <API key>`; records outside the key's streams "
                    "answer 404. Errors are JSON `{error, message}`.")
    app.state.settings, app.state.db, app.state.metrics = settings, db, metrics
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    _install_error_handlers(app)
    app.include_router(_routes(settings, db, metrics))
    return app


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None,
           **extra: Any) -> JSONResponse:
    return JSONResponse({"error": code, "message": message, **extra}, status_code=status,
                        headers=headers)


def _describe(errors: list[dict[str, Any]]) -> str:
    """One sentence per validation error, with the field named the way the client sent it."""
    parts = []
    for e in errors[:5]:
        where = [str(x) for x in e.get("loc", ()) if x != "body"]
        field = ".".join(where[1:] if where and where[0] in ("query", "path", "header")
                         else where)
        kind = e.get("type", "")
        msg = str(e.get("msg", "")).removeprefix("Value error, ")
        if kind == "extra_forbidden":
            parts.append(f"unknown field {field!r} (allowed: stream, seq, event_id, "
                         f"replayed_output, replayed_response_b64)")
        elif kind == "json_invalid":
            parts.append("the body is not valid JSON")
        elif kind == "missing" and not field:
            parts.append("a JSON body is required")
        elif kind in ("model_attributes_type", "model_type"):
            parts.append("the body must be a JSON object")
        else:
            parts.append(f"{field}: {msg}" if field else msg)
    if len(errors) > 5:
        parts.append(f"and {len(errors) - 5} more")
    return "; ".join(parts)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.code, exc.message, exc.headers or None)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        details = [{"loc": [str(x) for x in e.get("loc", ())], "type": e.get("type"),
                    "msg": str(e.get("msg", "")).removeprefix("Value error, ")} for e in errors]
        return _error(422, "invalid_request", _describe(errors), details=details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}; the routes are at /docs"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        return _error(exc.status_code, code, message, dict(exc.headers or {}) or None)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return _error(500, "internal", "internal error; the API log has the details")


_VERIFY_BODY = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": VerifyRequest.model_json_schema(ref_template="#/components/schemas/{model}")}}}}


def _manifest_body() -> dict[str, Any]:
    # Documented as an object with a pointer to the published schema, rather than inlining
    # it: its $defs would have to be rewritten into OpenAPI components.
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"type": "object", "description": (
            "an evidence.replay-runtime v1 manifest; JSON Schema: "
            "schemas/replay-runtime.schema.json")}}}}}


_MANIFEST_BODY = _manifest_body()


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


class _BearerKey(HTTPBearer):
    """The API-key dependency. A subclass of HTTPBearer so OpenAPI documents the scheme, but
    a single dependency (no nested HTTPBearer) because it runs on every request."""

    def __init__(self, keyring: Keyring) -> None:
        super().__init__(auto_error=False, scheme_name="ApiKey",
                         description="`Authorization: Bearer <API key>`")
        self.keyring = keyring

    async def __call__(self, request: Request) -> ApiKey:  # type: ignore[override]
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        credentials = credentials.strip()
        if scheme.lower() != "bearer" or not credentials:
            raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        key = self.keyring.lookup(credentials)
        if key is None:
            raise Unauthorized("invalid API key: check EVIDENCE_API_KEY or the keys file")
        return key


def _routes(settings: Settings, db: Database, metrics: ApiMetrics) -> APIRouter:
    router = APIRouter()
    keyring = settings.keyring
    verify_counters = {o: metrics.verify.labels(o) for o in ("match", "mismatch", "no_digest")}
    Caller = Annotated[ApiKey, Depends(_BearerKey(keyring))]

    def not_found(what: str) -> NotFound:
        # The same words whether the record is absent or outside the key's streams.
        return NotFound(f"no {what} visible to this API key")

    # -- replay ----------------------------------------------------------------------------

    @router.post("/replay/verify", response_model=VerifyResponse, responses=_ERRORS,
                 tags=["replay"], summary="Compare a re-execution with a sealed record",
                 openapi_extra=_VERIFY_BODY)
    async def replay_verify(request: Request, key: Caller) -> Response:
        """Hashes `replayed_output` (sha256(0x04 ‖ utf8)) or the decoded
        `replayed_response_b64` (sha256(0x01 ‖ bytes)) and compares it with the record's
        digest. 200 whether or not it matches; `reason` says what differed. 404 when the
        record does not exist or is outside the key's streams."""
        # The body is parsed by pydantic-core straight from bytes rather than through
        # FastAPI's body parameter (json.loads, then validation): this is the hot route.
        body = _parse_verify(await request.body())
        if body.stream is not None and not key.scope.allows(body.stream):
            raise not_found(f"record stream={body.stream} seq={body.seq}")
        row = await db.verify_row(body.stream, body.seq, body.event_uuid)
        if row is None or not key.scope.allows(row[0]):
            what = (f"record event_id={body.event_id}" if body.event_id is not None
                    else f"record stream={body.stream} seq={body.seq}")
            raise not_found(what)
        # Row columns are VERIFY_COLUMNS, the field order of Original.
        result = verify(Original(*row), body.replayed_output, body.response_bytes)
        counter = verify_counters.get(result.outcome)
        if counter is not None:
            counter.inc()
        return Response(json.dumps(result.to_dict()).encode(), media_type="application/json")

    @router.get("/replay/{content_key_hex}", responses={
        200: {"content": {"application/octet-stream": {}},
              "description": "the verbatim response body, with its recorded Content-Type"},
        **_ERRORS}, response_class=Response, tags=["replay"],
        summary="Serve a recorded response by content key")
    async def replay_serve(
        content_key_hex: Annotated[str, Path(description="hex content_key (64 digits)")],
        key: Caller,
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

    # -- streams and records -----------------------------------------------------------------

    @router.get("/streams", response_model=StreamList, responses=_ERRORS, tags=["records"],
                summary="Streams this key may read")
    async def list_streams(
        key: Caller,
        after: Annotated[str | None, Query(pattern=STREAM_PATTERN,
                                           description="cursor: streams after this id")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        rows = await db.streams(key.scope, after, limit + 1)
        page = rows[:limit]
        return {"streams": [head_dict(r) for r in page],
                "next_after": page[-1][0] if len(rows) > limit else None}

    @router.get("/streams/{stream}", response_model=StreamDetail, responses=_ERRORS,
                tags=["records"], summary="A stream's head, record count and findings")
    async def get_stream(stream: StreamId, key: Caller) -> dict[str, Any]:
        if not key.scope.allows(stream):
            raise not_found(f"stream {stream}")
        head, findings, count = await db.stream(stream, _FINDINGS_SHOWN)
        if head is None:
            raise not_found(f"stream {stream}")
        return {**head_dict(head), "findings_count": count,
                "findings": [finding_dict(f) for f in findings]}

    @router.get("/streams/{stream}/records", response_model=RecordPage, responses=_ERRORS,
                tags=["records"], summary="A stream's records in seq order")
    async def list_records(
        stream: StreamId, key: Caller,
        after_seq: Annotated[int, Query(ge=0, le=MAX_SEQ,
                                        description="cursor: records after this seq")] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        """Keyset pagination: pass `next_after_seq` as `after_seq` until it is null."""
        if not key.scope.allows(stream):
            raise not_found(f"stream {stream}")
        rows = await db.page(stream, after_seq, limit + 1)
        if not rows and after_seq == 0:
            raise not_found(f"stream {stream}")
        page, next_after = rows[:limit], None
        if len(rows) > limit:
            # Never end a page between two copies of a duplicated seq: the cursor is a seq, so
            # the second copy would be skipped. Only a page made of one seq keeps it whole.
            boundary = rows[limit][1]
            trimmed = [r for r in page if r[1] != boundary]
            page = trimmed or page
            next_after = page[-1][1]
        return {"stream": stream, "records": [record_dict(r) for r in page],
                "next_after_seq": next_after}

    @router.get("/streams/{stream}/records/{seq}", response_model=RecordOut,
                responses=_ERRORS, tags=["records"],
                summary="One record by stream and seq")
    async def get_record(
        stream: StreamId, seq: Annotated[int, Path(ge=1, le=MAX_SEQ)], key: Caller,
        include: Annotated[str | None, Query(pattern="^bytes$", description=(
            "`bytes` adds base64 request/response/error bodies and the log message"))] = None,
    ) -> dict[str, Any]:
        if not key.scope.allows(stream):
            raise not_found(f"record stream={stream} seq={seq}")
        row = await db.record(stream, seq, include == "bytes")
        if row is None:
            raise not_found(f"record stream={stream} seq={seq}")
        return record_dict(row)

    @router.get("/events/{event_id}", response_model=RecordOut, responses=_ERRORS,
                tags=["records"], summary="One record by event id")
    async def get_event(
        event_id: str, key: Caller,
        include: Annotated[str | None, Query(pattern="^bytes$")] = None,
    ) -> dict[str, Any]:
        try:
            eid = uuid.UUID(event_id)
        except ValueError:
            raise InvalidRequest(f"event_id {event_id[:64]!r} is not a UUID") from None
        row = await db.event(eid, include == "bytes")
        if row is None or not key.scope.allows(row[0]):
            raise not_found(f"record event_id={eid}")
        return record_dict(row)

    # -- verification ------------------------------------------------------------------------

    @router.get("/streams/{stream}/audit", responses=_ERRORS, tags=["verification"],
                summary="Re-verify one stream from its projection")
    async def audit_stream(stream: StreamId, key: Caller) -> dict[str, Any]:
        """Recomputes every digest and chain link of the stream from the rows' record bytes
        (the log messages, verbatim, in log order), compares every row's columns with its
        record bytes and the stream's head with the chain's tail. `findings_by_kind` and
        `findings` are this audit's; `projector_findings` are what the projector recorded
        while folding the log. `clean` is true only when both are empty. Reading the log
        itself (not the projection) is `evidence audit`'s job."""
        if not key.scope.allows(stream):
            raise not_found(f"stream {stream}")
        from audit.run import _output_text
        from audit.stream_audit import StreamAudit

        sa = StreamAudit(stream, output_text=_output_text())
        async for rows in db.audit_chunks(stream):
            # Decoding and hashing are CPU work: off the event loop, chunk by chunk.
            await asyncio.to_thread(sa.add_rows, rows)
        head = await db.head(stream)
        if sa.rows == 0 and head is None:
            raise not_found(f"stream {stream}")
        sa.check_head(None if head is None else (head[1], head[2]))
        found, count = await db.findings(stream, _FINDINGS_SHOWN)
        out = sa.to_dict()
        out["projector_findings_count"] = count
        out["projector_findings"] = [finding_dict(f) for f in found]
        out["clean"] = out["clean"] and count == 0
        return out

    @router.get("/streams/{stream}/records/{seq}/fidelity", responses=_ERRORS,
                tags=["verification"], summary="Replay fidelity of a sealed record")
    async def record_fidelity(stream: StreamId, seq: Annotated[int, Path(ge=1, le=MAX_SEQ)],
                              key: Caller) -> dict[str, Any]:
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

    @router.post("/fidelity/analyze", responses={**_ERRORS, 422: {"model": ErrorBody}},
                 tags=["verification"], summary="Replay fidelity of a run manifest",
                 openapi_extra=_MANIFEST_BODY)
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
            return _error(422, "invalid_manifest",
                          f"the manifest is not a valid evidence.replay-runtime v1 manifest "
                          f"({len(e.problems)} problem{'s' if len(e.problems) != 1 else ''})",
                          problems=e.problems)

    # -- operations (no API key) -------------------------------------------------------------

    @router.get("/healthz", tags=["operations"], summary="The process is alive")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/readyz", tags=["operations"], responses=_PUBLIC_ERRORS,
                summary="The database answers and the projection is caught up")
    async def readyz() -> dict[str, Any]:
        try:
            lag, partitions = await db.lag()
        except Unavailable:
            metrics.db_up.set(0)
            raise
        metrics.db_up.set(1)
        metrics.lag.set(lag)
        if lag > settings.max_lag:
            raise Unavailable(f"projection lag is {lag} records, over the bound of "
                              f"{settings.max_lag} (EVIDENCE_API_MAX_LAG)", retry_after=5)
        return {"status": "ready", "lag": lag, "partitions": partitions,
                "max_lag": settings.max_lag}

    @router.get("/metrics", tags=["operations"], response_class=Response,
                summary="Prometheus metrics (no API key: no tenant data in any label)")
    async def metrics_text() -> Response:
        try:
            lag, _partitions = await db.lag()
            metrics.lag.set(lag)
            metrics.db_up.set(1)
        except Unavailable:
            metrics.db_up.set(0)  # keep serving the rest; the lag gauge keeps its last value
        return Response(metrics.render(), headers={"content-type": CONTENT_TYPE_LATEST})

    return router
