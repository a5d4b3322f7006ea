"""Streams and their records: what the key may read, by stream, seq or event id.

    GET /streams                          streams the key may read, keyset-paged
    GET /streams/{stream}                 head seq/digest, record count, findings; with
                                          ?after_seq=N&wait_ms=M, once the head passes N
    GET /streams/{stream}/records         records by seq, keyset-paged (after_seq)
    GET /streams/{stream}/records/{seq}   one record
    GET /events/{event_id}                one record by capture id
    GET /traces/{trace_id}/records        the records of a trace (record contract 2.2)

The three record routes take ``?include=bytes`` for the bodies and the log message. Every
record says ``content``: ``plain``, ``encrypted`` or ``erased`` (with ``erasure``: when and
under which request its key was destroyed); an erased record's bodies are never served, by
any of the three: they are null, and its log message (``record_b64``: ciphertext only, what
its digests, chain link and inclusion proof are over) is given, so its proofs check from one
record exactly as from a page. A stream outside the key's scope is a 404 like a missing one;
a list of records of a stream the key may read but that has none (yet) is an empty page,
never a 404.

A record by event id is the original (the first with that id by the contract's order, among
the streams the key may read), never a later copy; ``copies`` says how many other records
the key may read carry the id, and ``is_copy`` whether the one answered is itself flagged as
a copy (a ``duplicate_event_id`` finding: its original is in a stream the key may not read).
"""

import re
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from evidence_contract import valid_event_id

from ..deps import Caller, Config, Db, IncludeBytes, Seq, StreamId, Watch, not_found
from ..errors import InvalidRequest
from ..models import (
    EVENT_PATTERN, FINDINGS_SHOWN, MAX_SEQ, STREAM_PATTERN, TRACE_PATTERN, RecordOut,
    RecordPage, StreamDetail, StreamList, TraceRecords, finding_dict, head_dict, record_dict,
)
from ..params import Digits
from ..responses import ERRORS
from ..watch import wait_past

__all__ = ["BYTES_PAGE_MAX", "WAIT_MS_MAX", "get_event", "get_record", "get_stream",
           "list_records", "list_streams", "router", "trace_records"]

router = APIRouter(tags=["records"], responses=ERRORS)

BYTES_PAGE_MAX = 100
"""With ``?include=bytes`` a page holds at most this many records, whatever ``limit`` says:
each may carry megabytes of bodies. The cursor still covers every record."""

Limit = Annotated[int, Query(ge=1, le=1000), Digits]

WAIT_MS_MAX = 30_000
"""The longest ``wait_ms`` a request may ask for; the server waits at most
``Settings.max_wait_ms`` of it."""


@router.get("/streams", response_model=StreamList, summary="Streams this key may read")
async def list_streams(
    key: Caller, db: Db,
    after: Annotated[str | None, Query(pattern=STREAM_PATTERN,
                                       description="cursor: streams after this id")] = None,
    limit: Limit = 100,
) -> dict[str, Any]:
    rows = await db.streams(key.scope, after, limit + 1)
    page = rows[:limit]
    return {"streams": [head_dict(r) for r in page],
            "next_after": page[-1][0] if len(rows) > limit else None}


@router.get("/streams/{stream}", response_model=StreamDetail,
            summary="A stream's head, record count and findings")
async def get_stream(
    stream: StreamId, key: Caller, db: Db, settings: Config, watch: Watch,
    after_seq: Annotated[int | None, Query(ge=0, le=MAX_SEQ, description=(
        "with `wait_ms`: answer once the head's seq is past this one")), Digits] = None,
    wait_ms: Annotated[int, Query(ge=0, le=WAIT_MS_MAX, description=(
        "with `after_seq`: wait up to this long (ms; never longer than the server's "
        "EVIDENCE_API_MAX_WAIT_MS, 5000 by default) for the head to pass it")), Digits] = 0,
) -> dict[str, Any]:
    """With `after_seq` and `wait_ms`, a long poll: the answer comes as soon as the head's
    seq is past `after_seq`, or when the wait is over with the head as it is then (compare
    `head_seq`); a stream with no records is answered at once (404). Without them, at once."""
    if not key.scope.allows(stream):
        raise not_found(f"stream {stream}")
    wait_s = min(wait_ms, settings.max_wait_ms) / 1000
    if after_seq is not None and wait_s > 0 and watch is not None:
        await wait_past(watch, stream, after_seq, wait_s, db.head_seq)
    head, findings, count = await db.stream(stream, FINDINGS_SHOWN)
    if head is None:
        raise not_found(f"stream {stream}")
    return {**head_dict(head), "findings_count": count,
            "findings": [finding_dict(f) for f in findings]}


@router.get("/streams/{stream}/records", response_model=RecordPage,
            summary="A stream's records in seq order")
async def list_records(
    stream: StreamId, key: Caller, db: Db,
    after_seq: Annotated[int, Query(ge=0, le=MAX_SEQ,
                                    description="cursor: records after this seq"), Digits] = 0,
    limit: Limit = 100,
    include: IncludeBytes = None,
) -> dict[str, Any]:
    """Keyset pagination: pass `next_after_seq` as `after_seq` until it is null. A stream
    the key may read that has no records (yet) is an empty page; `include=bytes` pages hold
    at most 100 records."""
    if not key.scope.allows(stream):
        raise not_found(f"stream {stream}")
    with_bytes = include == "bytes"
    if with_bytes:
        limit = min(limit, BYTES_PAGE_MAX)
    rows = await db.page(stream, after_seq, limit + 1, with_bytes)
    page, next_after = rows[:limit], None
    if len(rows) > limit:
        # Never end a page between two copies of a duplicated seq: the cursor is a seq, so
        # the second copy would be skipped. Only a page made of one seq keeps it whole.
        boundary = rows[limit][1]
        trimmed = [r for r in page if r[1] != boundary]
        page = trimmed or page
        next_after = page[-1][1]
    policy = await db.redaction() if with_bytes else None
    return {"stream": stream, "records": [record_dict(r, policy) for r in page],
            "next_after_seq": next_after}


@router.get("/streams/{stream}/records/{seq}", response_model=RecordOut,
            summary="One record by stream and seq")
async def get_record(stream: StreamId, seq: Seq, key: Caller, db: Db,
                     include: IncludeBytes = None) -> dict[str, Any]:
    """With `include=bytes`, a record whose content was erased (`content`: `erased`) is
    served as in a page: its bodies null, its log message (`record_b64`, ciphertext only)
    given, so its proofs check."""
    if not key.scope.allows(stream):
        raise not_found(f"record stream={stream} seq={seq}")
    row = await db.record(stream, seq, include == "bytes")
    if row is None:
        raise not_found(f"record stream={stream} seq={seq}")
    return record_dict(row, await db.redaction() if include == "bytes" else None)


@router.get("/events/{event_id}", response_model=RecordOut,
            summary="One record by event id")
async def get_event(
    event_id: Annotated[str, Path(
        description="the capture's event id: a UUIDv7 in canonical lowercase text",
        json_schema_extra={"pattern": EVENT_PATTERN})],
    key: Caller, db: Db,
    include: Annotated[str | None, Query(pattern="^bytes$")] = None,
) -> dict[str, Any]:
    """The original record with this event id among the streams the key may read: the
    first by the record contract's order (earliest `occurred_at`, then log position), never
    a later copy that another stream's capture sealed under the same id (the projector flags
    each such copy `duplicate_event_id`). `copies` counts the other records with this id the
    key may read (0: none); `is_copy` is true when the record answered is itself flagged as
    a copy, its original being outside the key's streams. With `include=bytes`, a record
    whose content was erased (`content`: `erased`) is served as in a page: its bodies null,
    its log message (`record_b64`, ciphertext only) given, so its proofs check."""
    if not valid_event_id(event_id):
        raise InvalidRequest(f"event_id {event_id[:64]!r} is not a UUID in canonical form "
                             f"(a capture's event id is a lowercase UUIDv7)")
    eid = uuid.UUID(event_id)
    found = await db.event(eid, include == "bytes", key.scope)
    if found is None:
        raise not_found(f"record event_id={eid}")
    row, copies, is_copy = found
    out = record_dict(row, await db.redaction() if include == "bytes" else None)
    return {**out, "copies": copies, "is_copy": is_copy}


@router.get("/traces/{trace_id}/records", response_model=TraceRecords,
            summary="The records of a trace")
async def trace_records(
    trace_id: Annotated[str, Path(
        description="a W3C trace id: 32 lowercase hex digits, not all zero",
        json_schema_extra={"pattern": TRACE_PATTERN})],
    key: Caller, db: Db, limit: Limit = 100,
) -> dict[str, Any]:
    """The records sealed with this trace id (record contract 2.2: the trace context of the
    span each call ran in, or the span a mapped capture came from) among the streams the key
    may read, in the order they were sealed (`occurred_at`, then the log position); an empty
    list when there are none. Each says its `capture_method`, `trace` and, for a capture
    mapped from telemetry, `telemetry`. `more` is true when there are more than `limit`."""
    if not re.fullmatch(TRACE_PATTERN.strip("^$"), trace_id):
        raise InvalidRequest(f"trace_id {trace_id[:64]!r} is not a W3C trace id (32 lowercase "
                             f"hex digits)")
    if not int(trace_id, 16):
        raise InvalidRequest("trace_id is all zero, which is no W3C trace id")
    rows = await db.trace(bytes.fromhex(trace_id), key.scope, limit + 1)
    return {"trace_id": trace_id, "records": [record_dict(r) for r in rows[:limit]],
            "more": len(rows) > limit}
