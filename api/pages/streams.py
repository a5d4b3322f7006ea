"""The streams a key may read, one stream, and the search box.

    GET /ui/                     every stream of the key: head, last sealed, chain and tree,
                                 findings, witnessed checkpoint, encrypted and erased counts
    GET /ui/streams/{stream}     one stream: the same, its findings, its records newest first
    GET /ui/search?q=            a stream id, an event id, a content key (64 hex) or a trace
                                 id (32 hex): one record opens, several are listed

Scoped as the JSON API is (``Scope.allows``, ``Scope.sql``): a stream outside the key's
scope is the same 404 page as a stream that does not exist.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import RedirectResponse

from evidence_contract import STREAM_ID_RE, valid_event_id
from evidence_contract.chain import (
    BROKEN_LINK, DIGEST_MISMATCH, DUPLICATE, GAP, OUT_OF_ORDER, UNDECODABLE,
)

from ..db import Database
from ..models import FINDINGS_SHOWN, MAX_SEQ, STREAM_PATTERN, finding_dict, head_dict
from ..routers.tlog import MAX_COSIGNATURES
from . import queries
from .verification import checkpoint_view
from .web import PREFIX, PageError, PageRoute, Visitor, render

__all__ = ["CHAIN_KINDS", "router", "stream_summary"]

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)

CHAIN_KINDS = frozenset({GAP, DUPLICATE, OUT_OF_ORDER, BROKEN_LINK, DIGEST_MISMATCH,
                         UNDECODABLE})
"""Finding kinds that say a stream's hash chain is not whole."""

STREAMS_PER_PAGE = 50
RECORDS_PER_PAGE = 50
SEARCH_LIMIT = 50
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX32 = re.compile(r"[0-9a-f]{32}")


async def stream_summary(request: Request, db: Database, head: tuple[Any, ...]
                         ) -> dict[str, Any]:
    """What the pages say of a stream: its head, chain and tree, findings by kind, its latest
    checkpoint as the pinned keys verify it, and its encrypted and erased counts."""
    settings = request.app.state.settings
    out = head_dict(head)
    stream = out["stream"]
    kinds = await queries.finding_kinds(db, stream)
    chain = {k: n for k, n in kinds.items() if k in CHAIN_KINDS}
    out["findings_by_kind"] = kinds
    out["findings_total"] = sum(kinds.values())
    out["chain_ok"] = not chain
    out["chain"] = ("whole" if not chain else
                    "not whole: " + ", ".join(f"{n} {k}" for k, n in chain.items()))
    tree = await db.tree(stream)
    cp, lines = await db.checkpoint(stream, None, MAX_COSIGNATURES)
    view = None
    if cp is not None:
        size, root, note = cp
        view = checkpoint_view(stream, note + "".join(lines).encode("utf-8"),
                               settings.log_key, settings.current_witness_keys(), size, root)
    out["checkpoint"] = view
    out["tree_size"] = None if tree is None else tree[0]
    out["tree_ok"], out["tree"] = _tree_status(out["head_seq"], tree, view)
    out["encrypted"], out["erased"] = await queries.record_counts(db, stream)
    return out


def _tree_status(head_seq: int, tree: tuple[int, bytes] | None, view: Any
                 ) -> tuple[bool, str]:
    if tree is None:
        return False, "no tree projected yet"
    size, root = tree
    if view is None:
        return True, f"{size} leaves; no signed checkpoint yet"
    if not view.signed:
        return False, f"{size} leaves; the latest checkpoint does not verify: {view.problem}"
    if view.size == size and view.root != root.hex():
        return False, (f"{size} leaves, but the projected root is not the signed checkpoint's "
                       f"at that size")
    if view.size > size:
        return True, f"{size} leaves; catching up to the signed size {view.size}"
    behind = f"; {head_seq - view.size} record(s) await the next checkpoint" \
        if head_seq > view.size else ""
    return True, f"{size} leaves; signed checkpoint at size {view.size}{behind}"


@router.get("/")
async def streams_page(
    request: Request, visitor: Visitor,
    after: Annotated[str | None, Query(pattern=STREAM_PATTERN)] = None,
) -> Response:
    db: Database = request.app.state.db
    rows = await db.streams(visitor.key.scope, after, STREAMS_PER_PAGE + 1)
    page = rows[:STREAMS_PER_PAGE]
    summaries = [await stream_summary(request, db, r) for r in page]
    return render(request, "streams.html", session=visitor, streams=summaries,
                  next_after=page[-1][0] if len(rows) > STREAMS_PER_PAGE else None,
                  key_name=visitor.key.name)


@router.get("/streams/{stream}")
async def stream_page(
    request: Request, visitor: Visitor,
    stream: Annotated[str, Path(pattern=STREAM_PATTERN)],
    before: Annotated[int | None, Query(ge=2, le=MAX_SEQ)] = None,
) -> Response:
    if not visitor.key.scope.allows(stream):
        raise PageError(404, "not found")
    db: Database = request.app.state.db
    head, findings, _count = await db.stream(stream, FINDINGS_SHOWN)
    if head is None:
        raise PageError(404, "not found")
    rows = await queries.stream_records(db, stream, before, RECORDS_PER_PAGE + 1)
    page = rows[:RECORDS_PER_PAGE]
    records = [{"seq": r[0], "event_id": str(r[1]), "occurred_at": r[2].isoformat(),
                "outcome": r[3], "model": r[4],
                "content": "erased" if r[6] else "encrypted" if r[5] is not None else "plain"}
               for r in page]
    return render(request, "stream.html", session=visitor,
                  s=await stream_summary(request, db, head),
                  findings=[finding_dict(f) for f in findings], records=records,
                  before=page[-1][0] if len(rows) > RECORDS_PER_PAGE else None)


def _record_link(stream: str, seq: int) -> str:
    return f"{PREFIX}/streams/{stream}/records/{seq}"


@router.get("/search")
async def search(request: Request, visitor: Visitor,
                 q: Annotated[str, Query(max_length=200)] = "") -> Response:
    """One record found opens it (303); several are listed; none is the 404 page."""
    db: Database = request.app.state.db
    scope = visitor.key.scope
    term = q.strip()
    lowered = term.lower()
    if valid_event_id(lowered):
        found = await db.event(uuid.UUID(lowered), False, scope)
        if found is None:
            raise PageError(404, "not found")
        row = found[0]
        return RedirectResponse(_record_link(row[0], row[1]), status_code=303)
    if _HEX64.fullmatch(lowered):
        rows = await queries.content_key_records(db, bytes.fromhex(lowered), scope,
                                                 SEARCH_LIMIT + 1)
        what = f"content key {lowered}"
        hits = [{"stream": r[0], "seq": r[1], "event_id": str(r[2]),
                 "occurred_at": r[3].isoformat(), "outcome": r[4]} for r in rows]
    elif _HEX32.fullmatch(lowered) and int(lowered, 16):
        rows = await db.trace(bytes.fromhex(lowered), scope, SEARCH_LIMIT + 1)
        what = f"trace {lowered}"
        hits = [{"stream": r[0], "seq": r[1], "event_id": str(r[2]),
                 "occurred_at": r[4].isoformat(), "outcome": r[7]} for r in rows]
    elif STREAM_ID_RE.fullmatch(term):
        if not scope.allows(term) or await db.head_seq(term) is None:
            raise PageError(404, "not found")
        return RedirectResponse(f"{PREFIX}/streams/{term}", status_code=303)
    else:
        return render(request, "search.html", 422, session=visitor, q=term, what=None,
                      hits=[], more=False,
                      problem="Search for a stream id, an event id (a UUID), a content key "
                              "(64 hex digits) or a trace id (32 hex digits).")
    if not hits:
        raise PageError(404, "not found")
    if len(hits) == 1:
        return RedirectResponse(_record_link(hits[0]["stream"], hits[0]["seq"]),
                                status_code=303)
    return render(request, "search.html", session=visitor, q=term, what=what,
                  hits=hits[:SEARCH_LIMIT], more=len(hits) > SEARCH_LIMIT, problem=None)
