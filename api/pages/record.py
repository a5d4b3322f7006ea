"""One record, shown safely and verified step by step.

    GET /ui/streams/{stream}/records/{seq}          the record page
    GET /ui/streams/{stream}/records/{seq}/bundle   its evidence bundle, as a download

The page shows the record as the read model holds it (the JSON API's ``record_dict``), its
bodies through :func:`api.pages.bodies.show` (never as HTML), its neighbours in the chain,
and its verification (:mod:`api.pages.verification`) over the bundle the bundle route serves,
built by the same code (:mod:`api.evidence`, :mod:`api.routers.bundles`): a row that fails
the API's check is reported (a ``projection_altered`` finding) and its step is red, even
when the log's copy could be served instead. An erased record shows its erasure receipt,
checked with the log key; its bodies are gone, its proofs (over ciphertext) still hold.

The download is the bundle route's answer for the session's key: the same JSON, so
``evidence verify`` checks it offline.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response

from evidence_contract.bundle import Trust
from evidence_contract.erasure import open_receipt
from evidence_contract.errors import EvidenceError

from ..db import Database
from ..errors import ApiError, Unavailable
from ..evidence import served
from ..models import MAX_SEQ, STREAM_PATTERN, record_dict
from ..routers.bundles import _bundle as bundle_of  # the bundle route's own assembly
from ..routers.bundles import record_bundle
from . import queries
from .bodies import show
from .verification import Verification, unavailable, verify_steps
from .web import PREFIX, PageError, PageRoute, Visitor, render

__all__ = ["router"]

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)

StreamPath = Annotated[str, Path(pattern=STREAM_PATTERN)]
SeqPath = Annotated[int, Path(ge=1, le=MAX_SEQ)]


def _trust(settings: Any) -> Trust | None:
    if settings.log_key is None:
        return None
    return Trust(settings.log_key, settings.current_witness_keys(), 0)


def _unb64(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)


async def _verification(request: Request, db: Database, stream: str, seq: int,
                        shown: dict[str, Any], redacted: bool) -> Verification:
    """The record's steps over the bundle its route would serve (see the module docstring)."""
    settings = request.app.state.settings
    row = await db.served_record(stream, seq)
    if row is None:
        raise PageError(404, "not found")
    try:
        checked = await served(request.app, row, None, await db.redaction(), verifiable=True)
    except Unavailable as e:
        return unavailable(f"the read model's row fails its check and the log's copy cannot "
                           f"be read: {e.message}", tampered=True)
    try:
        doc = await bundle_of(db, settings.log_key, checked, None)
    except Unavailable as e:
        return unavailable(e.message, tampered=False)
    return verify_steps(doc, _trust(settings), shown, checked.problem,
                        bodies=shown["content"] == "plain" and not redacted,
                        erased=shown["content"] == "erased")


async def _receipt(request: Request, db: Database, shown: dict[str, Any]) -> dict[str, Any]:
    """The erasure receipt of an erased record, and whether the log key signed it."""
    found = await queries.erasure_receipt(db, bytes.fromhex(shown["key_id"]))
    if found is None:
        return {"note": None, "ok": False, "detail": "the receipt is not in the read model"}
    note, request_id, erased_at = found
    log_key = request.app.state.settings.log_key
    text = note.decode("utf-8", "replace")
    if log_key is None:
        return {"note": text, "ok": False, "detail": "no log key is pinned to check it with"}
    try:
        stated = open_receipt(note, log_key)
    except EvidenceError as e:
        return {"note": text, "ok": False, "detail": f"it does not verify: {e}"}
    if shown["key_id"] not in stated.key_ids:
        return {"note": text, "ok": False, "detail": "it does not name this record's key"}
    return {"note": text, "ok": True,
            "detail": f"signed by {log_key.name}: request {request_id}, erased at {erased_at}"}


@router.get("/streams/{stream}/records/{seq}")
async def record_page(request: Request, visitor: Visitor, stream: StreamPath,
                      seq: SeqPath) -> Response:
    if not visitor.key.scope.allows(stream):
        raise PageError(404, "not found")
    db: Database = request.app.state.db
    row = await db.record(stream, seq, True)
    if row is None:
        raise PageError(404, "not found")
    redaction = await db.redaction()
    redacted = redaction is not None and redaction.covers(stream)
    shown = record_dict(row, redaction)
    prev_seq, next_seq = await queries.neighbours(db, stream, seq)
    bodies = [(label, show(_unb64(shown[f"{name}_b64"]), ctype)) for label, name, ctype in (
        ("Request", "request", "application/json"),
        ("Response", "response", shown["response_content_type"]),
        ("Error", "error", None))]
    verification = await _verification(request, db, stream, seq, shown, redacted)
    receipt = await _receipt(request, db, shown) if shown["content"] == "erased" else None
    telemetry = (None if shown["telemetry"] is None
                 else json.dumps(shown["telemetry"], indent=2, ensure_ascii=False))
    return render(request, "record.html", session=visitor, r=shown, bodies=bodies,
                  prev_seq=prev_seq, next_seq=next_seq, v=verification, receipt=receipt,
                  redacted=redacted, telemetry=telemetry,
                  params=None if shown["params"] is None
                  else show(str(shown["params"]).encode("utf-8"), "application/json").text)


@router.get("/streams/{stream}/records/{seq}/bundle")
async def bundle_download(request: Request, visitor: Visitor, stream: StreamPath,
                          seq: SeqPath) -> Response:
    """The bundle route's JSON for the session's key, as a file to keep."""
    db: Database = request.app.state.db
    try:
        doc = await record_bundle(stream, seq, request, visitor.key, db,
                                  request.app.state.settings, None)
    except ApiError as e:
        if e.status == 404:
            raise PageError(404, "not found") from None
        raise
    name = f"{stream.replace(':', '_')}-{seq}.bundle.json"
    return Response(json.dumps(doc, indent=2) + "\n", media_type="application/json",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})
