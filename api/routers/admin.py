"""Administration: erasing a subject's content. Only API keys with the admin role.

    POST /admin/erasures    {"subject", "request_id"?, "reason"?}  → 202 with the request

The route runs ``server.erasure.erase_subject``: the subject's keys are destroyed in the key
store (``EVIDENCE_KEY_STORE``) before it answers, then the request goes to the writer, which
signs a receipt with the log key on ``evidence.erasures``; ``GET`` the projection (or ``evidence
erase --wait``) to see it. A key without the admin role gets 403 with the reason; a body with an
unknown field, a subject or request id that is not one, 422. A subject under a legal hold: 409,
nothing erased. A subject with no keys (none live, none erased under this request id): 404 with
the reason, nothing erased and no receipt, unless the body says ``"seal_if_none": true`` (then
202 and a receipt that names no key). Kafka or the key store down: 503
(the keys may be destroyed already: send the same request id again).
"""

from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from evidence_contract.erasure import MAX_REASON_CHARS
from evidence_contract.keys import MAX_SUBJECT_BYTES, KeyStoreError, LegalHold

from ..deps import Admin, Config, Keys
from ..errors import Conflict, InvalidRequest, NotFound, Unavailable
from ..models import ErrorBody
from ..responses import BODY_ERRORS

__all__ = ["ErasureAccepted", "ErasureRequestIn", "post_erasure", "router"]

router = APIRouter(tags=["administration"])

_REQUEST_ID = r"^[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,199}$"


class ErasureRequestIn(BaseModel):
    """Whose content to erase; ``request_id`` makes a retry idempotent (one receipt)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"subject": "user-8d1f", "request_id": "dsr-2024-0042", "reason": "GDPR art. 17"}]})

    subject: StrictStr = Field(min_length=1, max_length=MAX_SUBJECT_BYTES,
                               pattern=r"^[^\x00-\x1f\x7f]+$",
                               description="the subject id (an opaque pseudonymous id)")
    request_id: StrictStr | None = Field(None, pattern=_REQUEST_ID, description=(
        "the erasure's request id (default: a new one); the same id again is the same erasure"))
    reason: StrictStr | None = Field(None, max_length=MAX_REASON_CHARS,
                                     description="why (kept with the receipt, not signed)")
    seal_if_none: StrictBool = Field(False, description=(
        "when the subject has no keys, seal a receipt anyway (naming no key); without it "
        "such a request is a 404 and nothing is sealed"))


class ErasureAccepted(BaseModel):
    request_id: str
    key_ids: list[str] = Field(description="the key ids destroyed (32 hex digits each)")
    erased_at: int = Field(description="when, µs since the epoch")
    status: str = Field("requested", description="the keys are destroyed; the writer's "
                                                  "signed receipt follows on evidence.erasures")


_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": ErasureRequestIn.model_json_schema(
        ref_template="#/components/schemas/{model}")}}}}


def _parse(raw: bytes) -> ErasureRequestIn:
    """The body, parsed strictly; anything else (not JSON, an unknown field) is a 422."""
    if not raw:
        raise RequestValidationError([{"type": "missing", "loc": ("body",),
                                       "msg": "Field required", "input": None}])
    try:
        return ErasureRequestIn.model_validate_json(raw)
    except ValidationError as e:
        raise RequestValidationError(
            [{**err, "loc": ("body", *err["loc"])} for err in e.errors(include_url=False)]
        ) from None


@router.post("/admin/erasures", status_code=202, response_model=ErasureAccepted,
             responses={**BODY_ERRORS, 403: {"model": ErrorBody}, 409: {"model": ErrorBody}}, openapi_extra=_BODY,
             summary="Erase a subject: destroy its keys, ask the log for a signed receipt")
async def post_erasure(request: Request, _key: Admin, settings: Config,
                       store: Keys) -> ErasureAccepted:
    """Destroy every live data key of `subject` and send the erasure request to the writer,
    which signs a receipt with the log key. The records stay in the log and keep verifying;
    their content is unrecoverable from now on."""
    body = _parse(await request.body())
    from server.erasure import ErasureFailed, NothingToErase, erase_subject
    from evidence_contract.topics import TopicNames

    if not settings.kafka_bootstrap:
        raise Unavailable("the API has no Kafka to send the erasure request to "
                          "(EVIDENCE_KAFKA_BOOTSTRAP)", retry_after=60)
    cfg = {"bootstrap.servers": settings.kafka_bootstrap,
           "message.timeout.ms": int(settings.kafka_timeout * 1000)}
    try:
        req = await run_in_threadpool(erase_subject, store, cfg, body.subject, body.request_id,
                                      body.reason, topics=TopicNames(settings.topic_prefix),
                                      seal_if_none=body.seal_if_none)
    except NothingToErase as e:
        raise NotFound(f"{e} (send \"seal_if_none\": true for a receipt)") from None
    except LegalHold as e:  # before KeyStoreError, its base: nothing was destroyed
        raise Conflict(f"the subject is under a legal hold; nothing was erased: {e}") from None
    except KeyStoreError as e:
        raise Unavailable(f"the key store did not erase: {e}", retry_after=10) from None
    except ErasureFailed as e:
        raise Unavailable(str(e), retry_after=5) from None
    except ValueError as e:
        raise InvalidRequest(str(e)) from None
    return ErasureAccepted(request_id=req.request_id, key_ids=list(req.key_ids),
                           erased_at=req.erased_at)
