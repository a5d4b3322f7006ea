"""The audit of one stream from its projection.

    GET /streams/{stream}/audit     re-verify every digest and link of one stream

The verification is :class:`audit.stream_audit.StreamAudit`'s; this route feeds it the rows
and adds what the projector found. ``output_digest`` is recomputed from the output text as the
record contract defines it per wire format (:func:`evidence_contract.outputs.extract`): a
record of a format the contract does not define is an ``output_digest_unverifiable`` finding
and a count in ``output_digest_checks``, never a check silently left out.
"""

import asyncio
from typing import Any

from fastapi import APIRouter

from ..db import Database
from ..deps import AuditLimit, Caller, Db, StreamId, not_found
from ..models import FINDINGS_SHOWN, finding_dict
from ..responses import BUSY, ERRORS

__all__ = ["audit_stream", "router"]

router = APIRouter(tags=["verification"])


@router.get("/streams/{stream}/audit", responses={**ERRORS, **BUSY},
            summary="Re-verify one stream from its projection")
async def audit_stream(stream: StreamId, key: Caller, db: Db,
                       limit: AuditLimit) -> dict[str, Any]:
    """Recomputes every digest and chain link of the stream from the rows' record bytes
    (the log messages, verbatim, in log order), compares every row's columns with its
    record bytes and the stream's head with the chain's tail. `findings_by_kind` and
    `findings` are this audit's; `projector_findings` are what the projector recorded
    while folding the log. `clean` is true only when both are empty. Reading the log
    itself (not the projection) is `evidence audit`'s job. `output_digest_checks` counts
    the sealed output digests by how their output text came out of the response:
    `extracted` (recomputed and compared), `no_text` (a finding) or `unknown_format` (a
    wire format the record contract does not define: an `output_digest_unverifiable`
    finding says the digest cannot be recomputed). `encrypted_records` counts the records
    sealed under a subject's key (their shape is checked, their keyed commitments cannot
    be) and `erased_records` those whose key an erasure receipt names: not findings, their
    digests and links are checked like any other's. Rows are recomputed with the redaction
    policy the live generation records (`redaction` in `evidence projections status`): a
    body masked as that policy says is not `projection_altered`; one masked otherwise is.

    An audit holds a database connection for the whole stream: one API key may have
    `EVIDENCE_API_MAX_AUDITS_PER_KEY` (2 by default) in progress in each server process;
    one more is answered at once with 429 `too_many_requests` and Retry-After, before it
    takes a connection, so one key's audits hold at most that many of the pool and other
    keys' reads still find one."""
    if not key.scope.allows(stream):
        raise not_found(f"stream {stream}")
    async with limit.hold(key):
        return await _audit(stream, db)


async def _audit(stream: str, db: Database) -> dict[str, Any]:
    from audit.stream_audit import StreamAudit

    sa = StreamAudit(stream, erased_keys=await db.erased_keys(stream),
                     redaction=await db.redaction(fresh=True))
    async for rows in db.audit_chunks(stream):
        # Decoding and hashing are CPU work: off the event loop, chunk by chunk.
        await asyncio.to_thread(sa.add_rows, rows)
    head = await db.head(stream)
    if sa.rows == 0 and head is None:
        raise not_found(f"stream {stream}")
    sa.check_head(None if head is None else (head[1], head[2]))
    found, count = await db.findings(stream, FINDINGS_SHOWN)
    out = sa.to_dict()
    out["projector_findings_count"] = count
    out["projector_findings"] = [finding_dict(f) for f in found]
    out["clean"] = out["clean"] and count == 0
    return out
