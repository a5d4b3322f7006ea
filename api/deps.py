"""What a route handler is given: dependencies injected with ``Depends``, read from
``request.app.state`` (which :func:`api.app.create_app` fills), and the parameters that
several resources share.

    Caller        the request's :class:`~api.auth.ApiKey`; 401 without a valid one
    Db            the read model (:class:`~api.db.Database`)
    Config        the app's :class:`~api.config.Settings`
    Metrics       the app's :class:`~api.metrics.ApiMetrics`
    StreamId, Seq, IncludeBytes   path and query parameters of more than one route

Nothing here holds a connection or a key of its own, so a handler can be tested alone: mount
its router on a bare ``FastAPI()`` with that app's ``state`` set, or override ``get_db`` (etc.)
through ``app.dependency_overrides``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPBearer

from .auth import ApiKey
from .config import Settings
from .db import Database
from .errors import NotFound, Unauthorized
from .metrics import ApiMetrics
from .models import MAX_SEQ, STREAM_PATTERN

__all__ = [
    "BearerKey", "Caller", "Config", "Db", "IncludeBytes", "Metrics", "Seq", "StreamId",
    "get_db", "get_metrics", "get_settings", "not_found",
]


class BearerKey(HTTPBearer):
    """The API-key dependency. A subclass of HTTPBearer so OpenAPI documents the scheme, but
    a single dependency (no nested HTTPBearer) because it runs on every request."""

    def __init__(self) -> None:
        super().__init__(auto_error=False, scheme_name="ApiKey",
                         description="`Authorization: Bearer <API key>`")

    async def __call__(self, request: Request) -> ApiKey:  # type: ignore[override]
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        credentials = credentials.strip()
        if scheme.lower() != "bearer" or not credentials:
            raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        key = request.app.state.settings.keyring.lookup(credentials)
        if key is None:
            raise Unauthorized("invalid API key: check EVIDENCE_API_KEY or the keys file")
        return key


# Coroutines, not plain functions: FastAPI runs a plain dependency in its thread pool.
async def get_db(request: Request) -> Database:
    return request.app.state.db


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_metrics(request: Request) -> ApiMetrics:
    return request.app.state.metrics


Caller = Annotated[ApiKey, Depends(BearerKey())]
Db = Annotated[Database, Depends(get_db)]
Config = Annotated[Settings, Depends(get_settings)]
Metrics = Annotated[ApiMetrics, Depends(get_metrics)]

StreamId = Annotated[str, Path(pattern=STREAM_PATTERN, description="stream id")]
Seq = Annotated[int, Path(ge=1, le=MAX_SEQ)]
IncludeBytes = Annotated[str | None, Query(pattern="^bytes$", description=(
    "`bytes` adds base64 request/response/error bodies and the log message"))]


def not_found(what: str) -> NotFound:
    """The same words whether the record is absent or outside the key's streams."""
    return NotFound(f"no {what} visible to this API key")
