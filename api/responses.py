"""The error answer's shape, and the ``responses=`` tables that document it in OpenAPI.

Every error body is ``{"error": <code>, "message": <text>}`` plus, for some, details (see
:mod:`api.errors`); :func:`error_response` is the one place that builds it.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from .models import ErasedBody, ErrorBody, TooManyBody

__all__ = ["BODY_ERRORS", "BUSY", "ERASED", "ERRORS", "PUBLIC_ERRORS", "error_response"]

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (401, 404, 422, 503)}
"""What a route behind the API key may answer besides its 200."""

BODY_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS, **{status: {"model": ErrorBody} for status in (408, 413)}}
"""What a route that reads a request body may answer besides: too slow, too large
(:mod:`api.limits`)."""

ERASED: dict[int | str, dict[str, Any]] = {410: {
    "model": ErasedBody,
    "description": "the record's content was erased (its subject's key destroyed): no bytes "
                   "of it can be served or compared; erased_at and request_id name the "
                   "erasure"}}
"""What a route that serves or compares a record's content may answer besides."""

BUSY: dict[int | str, dict[str, Any]] = {429: {
    "model": TooManyBody,
    "description": "the API key already has its limit of this expensive request in progress "
                   "(api.limits.PerKeyLimit); retry after Retry-After seconds",
    "headers": {"Retry-After": {"description": "seconds to wait before retrying",
                                "schema": {"type": "integer"}}}}}
"""What a route bounded per key (:class:`api.limits.PerKeyLimit`) may answer besides."""

PUBLIC_ERRORS: dict[int | str, dict[str, Any]] = {503: {"model": ErrorBody}}
"""What an operations route (no API key) may answer besides its 200."""


def error_response(status: int, code: str, message: str,
                   headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": code, "message": message, **extra}, status_code=status,
                        headers=headers)
