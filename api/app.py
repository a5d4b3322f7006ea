"""The FastAPI application: :func:`create_app` builds it from :class:`~api.config.Settings`.

Nothing connects at import or in :func:`create_app`; the connection pool opens in the lifespan
and closes with it. The routes are in :mod:`api.routers`, one ``APIRouter`` per resource, and
take what they need from ``app.state`` through :mod:`api.deps` (OpenAPI at ``/docs``):

    POST /replay/verify                       compare a re-execution with a sealed digest
    GET  /replay/{content_key_hex}            verbatim response bytes, served from storage
    GET  /streams                             streams the key may read, keyset-paged
    GET  /streams/{stream}                    head seq/digest, record count, findings
    GET  /streams/{stream}/records            records by seq, keyset-paged; ?include=bytes
    GET  /streams/{stream}/records/{seq}      one record; ?include=bytes adds the bodies
    GET  /streams/{stream}/records/{seq}/fidelity  replay fidelity of a sealed record
    GET  /streams/{stream}/audit              re-verify one stream from its projection (a
                                              few at a time per key: 429 past that)
    GET  /events/{event_id}                   one record by capture id; ?include=bytes
    GET  /traces/{trace_id}/records           the records a trace's spans sealed (contract 2.2)
    POST /fidelity/analyze                    replay fidelity of a run manifest
    GET  /streams/{stream}/checkpoint         the signed checkpoint (text/plain, cosigned)
    GET  /streams/{stream}/proof/inclusion    RFC 9162 inclusion proof of a record
    GET  /streams/{stream}/proof/consistency  RFC 9162 consistency proof of two sizes
    POST /streams/{stream}/checkpoint/cosignatures  a witness's cosignature (to Kafka)
    GET  /log/key                             the log's verifier key (no API key)
    GET  /log/checkpoint, /log/tile/...       the deployment log as C2SP tlog-tiles, and
    GET  /log/streams/{stream}/checkpoint     each stream's tree's hash tiles (no API key,
    GET  /log/streams/{stream}/tile/...       :mod:`api.routers.publiclog`)
    GET  /healthz  /readyz  /metrics          no API key (see api.metrics for why)

Kafka is only for accepted cosignatures: the producer (:mod:`api.kafka`) is made on first use,
so the API starts and serves without Kafka.

Every other route needs ``Authorization: Bearer <key>``; a record outside the key's streams is
a 404 exactly like a missing one. Errors are ``{"error", "message"}`` (see :mod:`api.errors`).

Hostile input is answered, never served a traceback: request bodies have a size limit per
route and a deadline (:mod:`api.limits`, outside the routes, so nothing is buffered past the
limit), JSON is parsed strictly (:mod:`api.jsonbody`, strict pydantic types), metric labels
come from fixed sets (:mod:`api.metrics`), and slow or idle connections are closed by the
server (:mod:`api.serving`).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from importlib import metadata
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.routing import APIRoute
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .config import AUDITS_PER_KEY_VAR, Settings
from .db import Database
from .errors import ApiError
from evidence_contract.topics import TopicNames
from server.logs import event_logger

from . import pages
from .evidence import LogReader
from .kafka import CheckpointProducer
from .limits import BodyLimitMiddleware, PerKeyLimit
from .metrics import ApiMetrics, MetricsMiddleware
from .responses import error_response
from .routers import ROUTERS
from .watch import HeadWatch

__all__ = ["create_app", "app_from_env"]

log = event_logger("evidence.api")

_HTTP_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 408: "timeout", 409: "conflict", 413: "too_large",
               415: "unsupported_media_type", 429: "too_many_requests"}


def _version() -> str:
    try:
        return metadata.version("evidence-store")
    except metadata.PackageNotFoundError:
        return "0.0.0"


class EvidenceApi(FastAPI):
    """FastAPI, with the request bodies of ``openapi_extra`` kept exactly as written.

    FastAPI passes ``openapi_extra`` through its OpenAPI models, whose numeric bounds are
    floats: the verify body's ``maximum`` of 2^63 - 1 came out as 9.223372036854776e+18, a
    different bound (2^63), and a client generated from the document could send a seq the
    API refuses. Each such request body is put back verbatim once the document is built."""

    def openapi(self) -> dict[str, Any]:
        schema = super().openapi()  # built once and cached; putting the bodies back is cheap
        for route in (r for router in ROUTERS for r in router.routes):
            body = isinstance(route, APIRoute) and (route.openapi_extra or {}).get("requestBody")
            if body:
                for method in route.methods:
                    schema["paths"][route.path_format][method.lower()]["requestBody"] = body
        return schema


def app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory api.app:app_from_env``."""
    return create_app(Settings.from_env())


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    db: Database = app.state.db
    watch: HeadWatch | None = app.state.watch
    await db.open()
    if watch is not None:
        await watch.open()
    try:
        yield
    finally:
        if watch is not None:
            await watch.close()
        app.state.producer.close()
        await db.close()


def create_app(settings: Settings) -> FastAPI:
    """The app: its state (what :mod:`api.deps` injects), middleware, error handlers, routes."""
    app = EvidenceApi(
        title="evidence-store API", version=_version(), lifespan=_lifespan,
        description="Replay verification, record lookup and replay serving over the evidence "
                    "log's read model. Every route but /healthz, /readyz and /metrics needs "
                    "`Authorization: Bearer <API key>`; records outside the key's streams "
                    "answer 404. Errors are JSON `{error, message}`.")
    app.state.settings = settings
    app.state.db = Database(settings.database_url, settings.views_schema,
                            min_size=settings.pool_min, max_size=settings.pool_max,
                            timeout=settings.db_timeout,
                            statement_timeout_ms=settings.statement_timeout_ms)
    app.state.metrics = ApiMetrics()
    # GET /streams/{s}/audit: a few at a time per key, so no key can take the whole pool.
    app.state.audit_limit = PerKeyLimit("audits", settings.max_audits_per_key,
                                        AUDITS_PER_KEY_VAR)
    # GET /streams/{s}?after_seq=&wait_ms=: one listening connection a process, when on.
    app.state.watch = (HeadWatch(settings.database_url, settings.views_schema)
                       if settings.max_wait_ms > 0 else None)
    app.state.producer = CheckpointProducer(settings.kafka_bootstrap, settings.topic_prefix,
                                            settings.kafka_timeout)
    # The log itself, read by position when a projected row fails its check (api.evidence).
    app.state.log_reader = LogReader(settings.kafka_bootstrap,
                                     TopicNames(settings.topic_prefix).log, settings.kafka_timeout)
    # The last added runs first: metrics see every answer, the body limits' 413s included.
    app.add_middleware(BodyLimitMiddleware, default=settings.max_body_bytes,
                       limits={("POST", "/replay/verify"): settings.max_verify_bytes},
                       body_timeout=settings.body_timeout)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(Exception, _unexpected)
    for router in ROUTERS:
        app.include_router(router)
    pages.install(app)  # the pages for people under /ui/ (api.pages, docs/pages.md)
    return app


def _body_fields(request: Request) -> tuple[str, ...]:
    """The top-level fields of the JSON body the request's route takes, as its OpenAPI request
    body names them (the model the route parses the body with: ``VerifyRequest`` for
    ``POST /replay/verify``, ``ErasureRequestIn`` for ``POST /admin/erasures``); () when the
    route documents no JSON object body."""
    route = request.scope.get("route")
    extra = (route.openapi_extra if isinstance(route, APIRoute) else None) or {}
    schema = (extra.get("requestBody", {}).get("content", {}).get("application/json", {})
              .get("schema", {}))
    return tuple(schema.get("properties", {}))


def _describe(errors: list[dict[str, Any]], fields: tuple[str, ...] = ()) -> str:
    """One sentence per validation error, with the field named the way the client sent it;
    an unknown top-level field is told ``fields``, the ones the body may have."""
    parts = []
    for e in errors[:5]:
        where = [str(x) for x in e.get("loc", ()) if x != "body"]
        field = ".".join(where[1:] if where and where[0] in ("query", "path", "header")
                         else where)
        kind = e.get("type", "")
        msg = str(e.get("msg", "")).removeprefix("Value error, ")
        if kind == "extra_forbidden":
            allowed = f" (allowed: {', '.join(fields)})" if fields and len(where) == 1 else ""
            parts.append(f"unknown field {field!r}{allowed}")
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


async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
    extra = {k: v for k, v in exc.body().items() if k not in ("error", "message")}
    return error_response(exc.status, exc.code, exc.message, exc.headers or None, **extra)


async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = list(exc.errors())
    details = [{"loc": [str(x) for x in e.get("loc", ())], "type": e.get("type"),
                "msg": str(e.get("msg", "")).removeprefix("Value error, ")} for e in errors]
    return error_response(422, "invalid_request", _describe(errors, _body_fields(request)),
                          details=details)


async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}; the routes are at /docs"
    elif exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    return error_response(exc.status_code, code, message, dict(exc.headers or {}) or None)


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    log("error", "unhandled_error", exc_info=exc)
    return error_response(500, "internal", "internal error; the API log has the details")
