"""What a route handler is given: dependencies injected with ``Depends``, read from
``request.app.state`` (which :func:`api.app.create_app` fills), and the parameters that
several resources share.

    Caller        the request's :class:`~api.auth.ApiKey`; 401 without a valid one
    Db            the read model (:class:`~api.db.Database`)
    Config        the app's :class:`~api.config.Settings`
    Metrics       the app's :class:`~api.metrics.ApiMetrics`
    Admin         the caller's key, which must have the admin role (403 otherwise)
    Keys          the key store (``server.keystore.from_env`` of ``Settings.key_store_env``,
                  made on first use); 503 when none is configured
    Watch         the app's :class:`~api.watch.HeadWatch` (None when waits are off)
    AuditLimit    the app's :class:`~api.limits.PerKeyLimit` of stream audits
    StreamId, Seq, IncludeBytes   path and query parameters of more than one route

Nothing here holds a connection or a key of its own, so a handler can be tested alone: mount
its router on a bare ``FastAPI()`` with that app's ``state`` set, or override ``get_db`` (etc.)
through ``app.dependency_overrides``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPBearer

from evidence_contract.keys import KeyStore, KeyStoreError

from .auth import ApiKey
from .config import Settings
from .db import Database
from .errors import Forbidden, NotFound, Unauthorized, Unavailable
from .limits import PerKeyLimit
from .metrics import ApiMetrics
from .models import MAX_SEQ, STREAM_PATTERN
from .params import Digits
from .watch import HeadWatch

__all__ = [
    "Admin", "AuditLimit", "BearerKey", "Caller", "Config", "Db", "IncludeBytes", "Keys",
    "Metrics", "Seq", "StreamId", "Watch", "get_audit_limit", "get_db", "get_key_store",
    "get_metrics", "get_settings", "get_watch", "not_found",
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


async def get_watch(request: Request) -> HeadWatch | None:
    return getattr(request.app.state, "watch", None)


async def get_audit_limit(request: Request) -> PerKeyLimit:
    return request.app.state.audit_limit


async def get_key_store(request: Request) -> KeyStore:
    """The key store, made once per app from ``Settings.key_store_env`` (no I/O at start-up:
    a PostgreSQL store creates its tables on this first use)."""
    state = request.app.state
    store = getattr(state, "key_store", None)
    if store is None:
        env = state.settings.key_store_env
        if not env:
            raise Unavailable("no key store is configured (EVIDENCE_KEY_STORE, "
                              "EVIDENCE_KEK_FILE)", retry_after=60)
        from server.keystore import from_env

        try:
            store = state.key_store = await run_in_threadpool(from_env, env)
        except KeyStoreError as e:
            raise Unavailable(f"the key store is unavailable: {e}", retry_after=10) from None
    return store


_bearer = BearerKey()


async def admin_key(key: Annotated[ApiKey, Depends(_bearer)]) -> ApiKey:
    if not key.admin:
        raise Forbidden(f"API key {key.name!r} has no admin role: the /admin routes need a key "
                        f"listed in EVIDENCE_API_ADMIN_KEYS or marked \"admin\": true in "
                        f"EVIDENCE_API_KEYS_FILE")
    return key


Caller = Annotated[ApiKey, Depends(_bearer)]
Admin = Annotated[ApiKey, Depends(admin_key)]
Keys = Annotated[KeyStore, Depends(get_key_store)]
Db = Annotated[Database, Depends(get_db)]
Config = Annotated[Settings, Depends(get_settings)]
Metrics = Annotated[ApiMetrics, Depends(get_metrics)]
Watch = Annotated[HeadWatch | None, Depends(get_watch)]
AuditLimit = Annotated[PerKeyLimit, Depends(get_audit_limit)]

StreamId = Annotated[str, Path(pattern=STREAM_PATTERN, description="stream id")]
Seq = Annotated[int, Path(ge=1, le=MAX_SEQ), Digits]
IncludeBytes = Annotated[str | None, Query(pattern="^bytes$", description=(
    "`bytes` adds base64 request/response/error bodies and the log message"))]


def not_found(what: str) -> NotFound:
    """The same words whether the record is absent or outside the key's streams."""
    return NotFound(f"no {what} visible to this API key")
