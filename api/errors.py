"""The API's errors and their HTTP shape.

    EvidenceError (schemas)
    └── ApiError               an answer other than 2xx, with a stable ``error`` code
        ├── Unauthorized       401 unauthorized   missing or unknown API key
        ├── Forbidden          403 forbidden      the key may not do this (an unknown witness)
        ├── NotFound           404 not_found      absent, or outside the key's streams
        ├── RequestTimeout     408 timeout        the request body did not arrive in time
        ├── Conflict           409 conflict       contradicts what the log holds
        ├── Erased             410 erased         the record's content was erased (its key
        │                                         destroyed); ``erased_at``, ``request_id``
        ├── PayloadTooLarge    413 too_large      the body is over its route's size limit
        ├── UnsupportedMediaType 415 unsupported_media_type  a body of another content type
        ├── InvalidRequest     422 invalid_request malformed path, query or body
        ├── TooManyRequests    429 too_many_requests  this key already has as many of an
        │                                         expensive request (an audit) in progress
        │                                         as it may (Retry-After; api.limits)
        └── Unavailable        503 unavailable    the database (or Kafka, for a route that
                                                  produces) cannot answer (Retry-After)
    ApiConfigError                bad settings at start-up (never an HTTP answer)

Every error body is ``{"error": <code>, "message": <human text>}``; clients branch on
``error``, people read ``message``. Database errors become :class:`Unavailable` in exactly one
place, :func:`api.db.translate`.
"""

from __future__ import annotations

from evidence_contract import EvidenceError

__all__ = ["ApiError", "ApiConfigError", "Conflict", "Erased", "Forbidden", "InvalidRequest", "NotFound",
           "PayloadTooLarge", "RequestTimeout", "TooManyRequests", "Unauthorized", "Unavailable",
           "UnsupportedMediaType"]


class ApiError(EvidenceError):
    status = 500
    code = "internal"

    def __init__(self, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or {}

    def body(self) -> dict[str, str]:
        return {"error": self.code, "message": self.message}


class Unauthorized(ApiError):
    status, code = 401, "unauthorized"

    def __init__(self, message: str) -> None:
        super().__init__(message, {"WWW-Authenticate": "Bearer"})


class Forbidden(ApiError):
    status, code = 403, "forbidden"


class NotFound(ApiError):
    status, code = 404, "not_found"


class Conflict(ApiError):
    status, code = 409, "conflict"


class Erased(ApiError):
    """The record exists, but its content was erased: the subject's data key that sealed it
    is destroyed, so no bytes of it can be served or checked. The body adds ``erased_at``
    (µs since the epoch) and ``request_id`` (the erasure's), from the log's receipt."""

    status, code = 410, "erased"

    def __init__(self, what: str, erased_at: int, request_id: str) -> None:
        super().__init__(f"the content of {what} was erased (its key destroyed under request "
                         f"{request_id}); its digests, seq and chain still verify: see the "
                         f"record without include=bytes, or export it")
        self.erased_at, self.request_id = int(erased_at), request_id

    def body(self) -> dict:
        return {**super().body(), "erased_at": self.erased_at, "request_id": self.request_id}


class UnsupportedMediaType(ApiError):
    status, code = 415, "unsupported_media_type"


class RequestTimeout(ApiError):
    """The body did not arrive within EVIDENCE_API_BODY_TIMEOUT; the connection is closed."""

    status, code = 408, "timeout"

    def __init__(self, message: str) -> None:
        super().__init__(message, {"Connection": "close"})


class PayloadTooLarge(ApiError):
    """The body is over its route's limit (:mod:`api.limits`); the connection is closed, so
    the rest of the body is never read."""

    status, code = 413, "too_large"

    def __init__(self, message: str) -> None:
        super().__init__(message, {"Connection": "close"})


class InvalidRequest(ApiError):
    status, code = 422, "invalid_request"


class TooManyRequests(ApiError):
    """The caller's key has its limit of an expensive request in progress
    (:class:`api.limits.PerKeyLimit`): this one is refused at once, before it takes a
    database connection, so one tenant cannot starve another's reads; retry after a moment.
    The body adds ``limit`` (the key's allowance) and ``setting`` (what raises it)."""

    status, code = 429, "too_many_requests"

    def __init__(self, message: str, limit: int, setting: str, retry_after: int = 2) -> None:
        super().__init__(message, {"Retry-After": str(retry_after)})
        self.limit, self.setting = limit, setting

    def body(self) -> dict:
        return {**super().body(), "limit": self.limit, "setting": self.setting}


class Unavailable(ApiError):
    """The database did not answer; documented backpressure: retry after a moment."""

    status, code = 503, "unavailable"

    def __init__(self, message: str, retry_after: int = 2) -> None:
        super().__init__(message, {"Retry-After": str(retry_after)})


class ApiConfigError(EvidenceError):
    """Settings are missing or malformed; the message says which and how to fix it."""
