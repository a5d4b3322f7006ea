"""The evidence-store REST API (FastAPI) over the PostgreSQL read model.

- :func:`create_app`, :func:`app_from_env` — the app (no I/O until its lifespan starts);
  :mod:`api.serving` serves it with bounds on slow and idle connections.
- :class:`Settings` — configuration from the environment (:mod:`api.config`).
- :func:`verify`, :class:`Original`, :class:`VerifyResult` — replay verification (pure).
- :class:`Keyring`, :class:`Scope`, :class:`ApiKey` — API keys and their streams (pure).
- Errors: :class:`ApiError` and its subclasses, :class:`ApiConfigError` (:mod:`api.errors`).

The pure modules are imported here; the app (FastAPI, psycopg) only on first use of
``create_app``/``app_from_env`` (PEP 562), so ``evidence <anything>``, which imports
``api.cli`` to list subcommands, does not pay for them.
"""

from __future__ import annotations

from typing import Any

from .auth import ApiKey, Keyring, Scope
from .config import Settings
from .errors import (
    ApiConfigError, ApiError, InvalidRequest, NotFound, PayloadTooLarge, RequestTimeout,
    Unauthorized, Unavailable,
)
from .verify import Original, VerifyResult, verify

__all__ = [
    "ApiError",
    "ApiKey",
    "ApiConfigError",
    "InvalidRequest",
    "Keyring",
    "NotFound",
    "Original",
    "PayloadTooLarge",
    "RequestTimeout",
    "Scope",
    "Settings",
    "Unauthorized",
    "Unavailable",
    "VerifyResult",
    "app_from_env",
    "create_app",
    "verify",
]


def __getattr__(name: str) -> Any:
    if name in ("create_app", "app_from_env"):
        from . import app

        return getattr(app, name)
    raise AttributeError(f"module 'api' has no attribute {name!r}")
