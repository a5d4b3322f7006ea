"""Streams and their records: what the key may read, by stream, seq or event id.

    GET /streams                          streams the key may read, keyset-paged
    GET /streams/{stream}                 head seq/digest, record count, findings; with
                                          ?after_seq=N&wait_ms=M, once the head passes N
    GET /streams/{stream}/records         records by seq, keyset-paged (after_seq), filtered
    GET /records                          records of the streams a pattern names, keyset-paged
                                          by (stream, seq), filtered
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

The two listings take the same filters (:func:`record_filter`): ``model`` (asked for or
answered), ``outcome``, ``fingerprint``, ``since``/``until`` (ISO 8601 with an offset, on the
sealed time ``occurred_at``: from inclusive, to exclusive), ``erased`` and ``encrypted``
(``true``/``false``). A filtered page reads at most :data:`SCAN_MAX` records of the listing
(along the ``(stream, seq)`` index, so a filter that keeps few records never scans a whole
stream in one request): it may hold fewer than ``limit`` records, or none, with a cursor
that is not null; a client follows the cursor until it is null.

A record by event id is the original (the first with that id by the contract's order, among
the streams the key may read), never a later copy; ``copies`` says how many other records
the key may read carry the id, and ``is_copy`` whether the one answered is itself flagged as
a copy (a ``duplicate_event_id`` finding: its original is in a stream the key may not read).
"""

import re
import uuid
from datetime import datetime, timezone
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query

from evidence_contract import valid_event_id

from ..deps import Caller, Config, Db, IncludeBytes, Seq, StreamId, Watch, not_found
from ..errors import InvalidRequest
from ..models import (
    EVENT_PATTERN, FINDINGS_SHOWN, MAX_SEQ, STREAM_GLOB_PATTERN, STREAM_PATTERN, TRACE_PATTERN,
    RecordList, RecordOut, RecordPage, StreamDetail, StreamList, TraceRecords, finding_dict,
    head_dict, record_dict,
)
from ..params import Digits
from ..responses import ERRORS
from ..rows import head_seq_of
from ..sql import RecordFilter
from ..watch import wait_past

__all__ = ["BYTES_PAGE_MAX", "SCAN_MAX", "WAIT_MS_MAX", "get_event", "get_record", "get_stream",
           "list_all_records", "list_records", "list_streams", "parse_instant", "record_filter",
           "router", "trace_records"]

router = APIRouter(tags=["records"], responses=ERRORS)

BYTES_PAGE_MAX = 100
"""With ``?include=bytes`` a page holds at most this many records, whatever ``limit`` says:
each may carry megabytes of bodies. The cursor still covers every record."""

Limit = Annotated[int, Query(ge=1, le=1000), Digits]

SCAN_MAX = 10_000
"""The most records a filtered page reads (module docstring)."""

OUTCOMES = ("COMMITTED", "FAILED", "UNKNOWN")
_TEXT_PATTERN = r"^[^\x00-\x1f\x7f]{1,256}$"  # one line of text: a model, a fingerprint
_INSTANT_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.,+\-Zz]{2,40}$"
_BOOL = Query(pattern="^(true|false)$")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def parse_instant(text: str, name: str) -> int:
    """µs since the epoch of an ISO 8601 time that says its offset (``Z`` or ``+hh:mm``);
    ``InvalidRequest`` naming the parameter otherwise."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(f"{name} {text[:64]!r} is not an ISO 8601 time (e.g. "
                             f"2026-12-01T00:00:00Z)") from None
    if at.tzinfo is None or at.utcoffset() is None:
        raise InvalidRequest(f"{name} {text[:64]!r} has no UTC offset: add Z or +hh:mm")
    delta = at - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


async def record_filter(
    model: Annotated[str | None, Query(pattern=_TEXT_PATTERN, description=(
        "records whose model asked for (model_id) or that answered (response_model) is "
        "this"))] = None,
    outcome: Annotated[str | None, Query(pattern=f"^({'|'.join(OUTCOMES)})$")] = None,
    fingerprint: Annotated[str | None, Query(pattern=_TEXT_PATTERN, description=(
        "the backend fingerprint the provider answered with"))] = None,
    since: Annotated[str | None, Query(pattern=_INSTANT_PATTERN, description=(
        "sealed at or after this ISO 8601 time, with its offset (2026-12-01T00:00:00Z)"))] = None,
    until: Annotated[str | None, Query(pattern=_INSTANT_PATTERN, description=(
        "sealed before this ISO 8601 time, with its offset"))] = None,
    erased: Annotated[str | None, _BOOL, Query(description=(
        "true: only records whose subject key was erased; false: none of them"))] = None,
    encrypted: Annotated[str | None, _BOOL, Query(description=(
        "true: only records sealed under a subject's key (erased since or not); false: only "
        "plain ones"))] = None,
) -> RecordFilter:
    """The listings' filters (module docstring), checked: a time without an offset, or
    ``since`` after ``until``, is a 422."""
    since_us = None if since is None else parse_instant(since, "since")
    until_us = None if until is None else parse_instant(until, "until")
    if since_us is not None and until_us is not None and since_us > until_us:
        raise InvalidRequest(f"since ({since}) is after until ({until})")
    return RecordFilter(model=model, outcome=outcome, fingerprint=fingerprint,
                        since_us=since_us, until_us=until_us,
                        erased=None if erased is None else erased == "true",
                        encrypted=None if encrypted is None else encrypted == "true")


Filters = Annotated[RecordFilter, Depends(record_filter)]


def _keyset_page(rows: list[tuple[Any, ...]], limit: int
                 ) -> tuple[list[tuple[Any, ...]], tuple[str, int] | None]:
    """The page of ``rows`` (up to ``limit + 1`` in (stream, seq) order) and its cursor, or
    None when ``rows`` held no more. Never ends a page between two copies of a duplicated
    seq: the cursor is a seq, so the second copy would be skipped. Only a page made of one
    seq keeps it whole."""
    page = rows[:limit]
    if len(rows) <= limit:
        return page, None
    boundary = rows[limit][:2]
    page = [r for r in page if r[:2] != boundary] or page
    return page, (page[-1][0], page[-1][1])


def _like(glob: str) -> str:
    """A stream pattern (``*`` any characters, ``?`` one) as a LIKE pattern; ``_`` is the
    only LIKE metacharacter of the stream alphabet."""
    return glob.replace("_", r"\_").replace("*", "%").replace("?", "_")


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
    got = None
    if after_seq is not None and wait_s > 0 and watch is not None:
        async def answer(s: str) -> tuple[int | None, Any]:
            read = await db.stream(s, FINDINGS_SHOWN)
            return (None if read[0] is None else head_seq_of(read[0])), read
        got = await wait_past(watch, stream, after_seq, wait_s, db.head_seq, answer)
    head, findings, count = got if got is not None else await db.stream(stream, FINDINGS_SHOWN)
    if head is None:
        raise not_found(f"stream {stream}")
    return {**head_dict(head), "findings_count": count,
            "findings": [finding_dict(f) for f in findings]}


@router.get("/streams/{stream}/records", response_model=RecordPage,
            summary="A stream's records in seq order")
async def list_records(
    stream: StreamId, key: Caller, db: Db, filters: Filters,
    after_seq: Annotated[int, Query(ge=0, le=MAX_SEQ,
                                    description="cursor: records after this seq"), Digits] = 0,
    limit: Limit = 100,
    include: IncludeBytes = None,
) -> dict[str, Any]:
    """Keyset pagination: pass `next_after_seq` as `after_seq` until it is null. A stream
    the key may read that has no records (yet) is an empty page; `include=bytes` pages hold
    at most 100 records. With a filter (`model`, `outcome`, `fingerprint`, `since`, `until`,
    `erased`, `encrypted`), a page reads at most 10,000 records of the stream: it may hold
    fewer than `limit`, or none, with a `next_after_seq` to follow."""
    if not key.scope.allows(stream):
        raise not_found(f"stream {stream}")
    with_bytes = include == "bytes"
    if with_bytes:
        limit = min(limit, BYTES_PAGE_MAX)
    if filters:
        rows, bound = await db.stream_records(stream, after_seq, filters, limit + 1,
                                              with_bytes, SCAN_MAX)
        page, cursor = _keyset_page(rows, limit)
        cursor = cursor or bound
        policy = await db.redaction() if with_bytes else None
        return {"stream": stream, "records": [record_dict(r, policy) for r in page],
                "next_after_seq": None if cursor is None else cursor[1]}
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


@router.get("/records", response_model=RecordList,
            summary="Records of the streams a pattern names, in (stream, seq) order")
async def list_all_records(
    key: Caller, db: Db, filters: Filters,
    stream: Annotated[str, Query(pattern=STREAM_GLOB_PATTERN, description=(
        "a stream id, or a pattern of one: `*` any characters, `?` one (`acme:*`); only the "
        "streams the key may read are listed"))] = "*",
    after_stream: Annotated[str | None, Query(pattern=STREAM_PATTERN, description=(
        "cursor, with after_seq: records after this stream's record after_seq"))] = None,
    after_seq: Annotated[int | None, Query(ge=0, le=MAX_SEQ, description=(
        "cursor, with after_stream"), ), Digits] = None,
    limit: Limit = 100,
    include: IncludeBytes = None,
) -> dict[str, Any]:
    """Keyset pagination by (stream, seq): pass `next_after` as `after_stream` and
    `after_seq` until it is null. The streams outside the key's scope are not listed (no
    404: a pattern names streams that may not exist). Takes the filters of
    `/streams/{stream}/records`; a page reads at most 10,000 records of the listing, so it
    may hold fewer than `limit`, or none, with a `next_after` to follow."""
    if (after_stream is None) != (after_seq is None):
        raise InvalidRequest("the cursor is after_stream and after_seq together (the "
                             "next_after of the previous page)")
    with_bytes = include == "bytes"
    if with_bytes:
        limit = min(limit, BYTES_PAGE_MAX)
    after = None if after_stream is None else (after_stream, int(after_seq or 0))
    rows, bound = await db.scoped_records(key.scope, _like(stream), after, filters, limit + 1,
                                          with_bytes, SCAN_MAX)
    page, cursor = _keyset_page(rows, limit)
    cursor = cursor or bound
    policy = await db.redaction() if with_bytes else None
    return {"stream": stream, "records": [record_dict(r, policy) for r in page],
            "next_after": None if cursor is None else {"stream": cursor[0], "seq": cursor[1]}}


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
