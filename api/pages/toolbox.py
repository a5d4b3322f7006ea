"""The auditor's toolbox: verify a replay, replay fidelity, a stream's audit, as pages.

    GET  /ui/verify              the form: a record (stream + seq, or event id), and the
                                 replayed output text or the replayed response's bytes
    POST /ui/verify              MATCH or MISMATCH with the reason (multipart: a file may come)
    GET  /ui/fidelity            a record's replay fidelity (?stream=&seq= or ?event_id=)
    POST /ui/fidelity            an uploaded (or pasted) run manifest's fidelity
    GET  /ui/audit               the form: a stream, and a seq range to report on
    POST /ui/audit               starts the stream's audit; 303 to its progress page
    GET  /ui/audit/{job}         progress while it runs (the page refreshes itself, no script),
                                 then the findings, named

Each page answers what its JSON route answers, because it runs that route's own handler:
:func:`api.routers.replay.replay_verify` (given the form as the JSON body it would parse),
:func:`api.routers.fidelity.record_fidelity` and :func:`~api.routers.fidelity.fidelity_analyze`,
:func:`api.routers.audit.audit_stream` (its per-key limit included: a third audit of one key is
refused as the route refuses it). The caller is the browser's session key, so scope is the
JSON API's: a record outside it is "not found", as a missing one.

An audit runs in the API process, in the background of the page that started it; its progress
is the number of rows the audit has checked (counted as the route's reads hand them over) out
of the stream's head seq. Audits live in the process's memory (:class:`Audits`: the last
:data:`AUDITS_KEPT`, each visible only to the key that started it).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from evidence_contract import valid_event_id

from ..auth import ApiKey
from ..db import Database
from ..deps import AuditLimit, Db, Metrics
from ..errors import ApiError
from ..models import STREAM_PATTERN
from ..routers.audit import audit_stream
from ..routers.fidelity import fidelity_analyze, record_fidelity
from ..routers.records import get_event
from ..routers.replay import replay_verify
from .csrf import token_matches
from .sessions import Session
from .web import (
    CSRF_REFUSED, PREFIX, Forbidden, PageError, PageRoute, Visitor, media_type, posted_form, render,
    require_same_origin,
)

__all__ = ["AUDITS_KEPT", "Audit", "Audits", "internal_request", "router", "verify_body"]

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)

AUDITS_KEPT = 50
"""Audits a process remembers (running or done); the oldest finished one goes first."""
REFRESH_SECONDS = 1
"""How often a running audit's page reloads itself."""


# -- the JSON routes' handlers, run for a page ------------------------------------------------

def internal_request(request: Request, path: str, body: bytes) -> Request:
    """A POST of ``body`` (JSON) to ``path`` in this app, for a route handler that reads its
    body from the request: the page's own connection and app, nothing sent anywhere."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    scope = {**request.scope, "method": "POST", "path": path, "raw_path": path.encode(),
             "query_string": b"", "headers": [(b"content-type", b"application/json"),
                                              (b"content-length", str(len(body)).encode())]}
    return Request(scope, receive)


def _invalid(e: RequestValidationError) -> str:
    """A validation error of a JSON route, as one sentence for the page."""
    parts = []
    for err in e.errors()[:3]:
        where = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts) or "the request is not valid"


def _json(response: Response) -> Any:
    return json.loads(bytes(response.body))


# -- multipart forms (a file may come), with the CSRF checks of api.pages.web ------------------

async def posted_upload(request: Request, session: Session, max_bytes: int
                        ) -> tuple[dict[str, str], dict[str, bytes]]:
    """A POSTed ``multipart/form-data`` form's text fields and files (by field name, only
    those chosen), once it passed the CSRF checks :func:`api.pages.web.posted_form` makes."""
    require_same_origin(request)
    if media_type(request) != "multipart/form-data":
        raise PageError(415, "This form must be sent as multipart/form-data.")
    fields: dict[str, str] = {}
    files: dict[str, bytes] = {}
    try:
        async with request.form(max_files=2, max_fields=20, max_part_size=max_bytes) as form:
            for name, value in form.multi_items():
                if isinstance(value, UploadFile):
                    if value.filename:
                        files[name] = await value.read()
                else:
                    fields[name] = value
    except StarletteHTTPException as e:  # Starlette's answer to a malformed multipart body
        raise PageError(400, f"The form could not be read: {e.detail}") from None
    if not token_matches(session.csrf, fields.get("csrf")):
        raise Forbidden(CSRF_REFUSED)
    return fields, files


# -- verify a replay -------------------------------------------------------------------------

def verify_body(fields: dict[str, str], files: dict[str, bytes]) -> dict[str, Any]:
    """The ``POST /replay/verify`` body a verify form asks for; :class:`ValueError` with a
    sentence for the reader when the form does not name one record and one replay.

    A browser sends a textarea's line breaks as CRLF whatever was pasted: they are turned back
    into LF unless ``crlf`` is checked (a file's bytes are compared as they are). ``basis``
    ``bijotel`` compares the text with a mapped record's BIJOTEL claim instead (the route
    says when a record has none)."""
    stream, seq = fields.get("stream", "").strip(), fields.get("seq", "").strip()
    event_id = fields.get("event_id", "").strip()
    body: dict[str, Any] = {}
    if event_id:
        if stream or seq:
            raise ValueError("Name the record by event id or by stream and seq, not both.")
        if not valid_event_id(event_id):
            raise ValueError("That event id is not a UUID in canonical form (a capture's "
                             "event id is a lowercase UUIDv7).")
        body["event_id"] = event_id
    elif stream and seq:
        if not seq.isdigit() or len(seq) > 19:
            raise ValueError("The seq is a whole number, 1 or more.")
        body.update(stream=stream, seq=int(seq))
    else:
        raise ValueError("Name the record: its stream and seq, or its event id.")
    output = fields.get("output", "")
    upload = files.get("response")
    if upload is not None and output:
        raise ValueError("Paste the output text or upload the response bytes, not both.")
    if upload is not None:
        body["replayed_response_b64"] = base64.b64encode(upload).decode("ascii")
    elif output:
        body["replayed_output"] = output if fields.get("crlf") else output.replace("\r\n", "\n")
    else:
        raise ValueError("Paste the replayed output text, or choose a file with the replayed "
                         "response's bytes.")
    if fields.get("basis") == "bijotel":  # BIJOTEL's claim instead of the record's digest
        body["basis"] = "bijotel"
    return body


def _verify_form(request: Request, session: Session, status: int = 200, **context: Any
                 ) -> Response:
    values = {"stream": "", "seq": "", "event_id": "", "basis": "", **context.pop("values", {})}
    return render(request, "verify.html", status, session, values=values,
                  max_bytes=request.app.state.settings.max_body_bytes,
                  result=context.pop("result", None), problem=context.pop("problem", None),
                  **context)


@router.get("/verify")
async def verify_form(request: Request, visitor: Visitor, stream: str = "", seq: str = "",
                      event_id: str = "") -> Response:
    return _verify_form(request, visitor, values={"stream": stream[:200], "seq": seq[:20],
                                                  "event_id": event_id[:40]})


@router.post("/verify")
async def verify_post(request: Request, visitor: Visitor, db: Db, metrics: Metrics
                      ) -> Response:
    settings = request.app.state.settings
    fields, files = await posted_upload(request, visitor, settings.max_body_bytes)
    values = {k: fields.get(k, "").strip() for k in ("stream", "seq", "event_id", "basis")}
    try:
        body = verify_body(fields, files)
    except ValueError as e:
        return _verify_form(request, visitor, 422, values=values, problem=str(e))
    inner = internal_request(request, "/replay/verify", json.dumps(body).encode())
    try:
        answer = await replay_verify(inner, visitor.key, db, metrics)
    except RequestValidationError as e:
        return _verify_form(request, visitor, 422, values=values, problem=_invalid(e))
    except ApiError as e:
        return _verify_form(request, visitor, e.status, values=values, problem=e.message,
                            error=e.code)
    result = _json(answer)
    replayed = ("the uploaded response bytes" if "replayed_response_b64" in body
                else "the pasted output text")
    return _verify_form(request, visitor, values=values, result=result, replayed=replayed,
                        copies=answer.headers.get("evidence-event-copies"))


# -- replay fidelity -------------------------------------------------------------------------

@router.get("/fidelity")
async def fidelity_record(request: Request, visitor: Visitor, db: Db, stream: str = "",
                          seq: str = "", event_id: str = "") -> Response:
    values = {"stream": stream[:200], "seq": seq[:20], "event_id": event_id[:40]}
    report, problem, status = None, None, 200
    if stream or seq or event_id:
        try:
            report = await _record_fidelity(visitor.key, db, **values)
        except ValueError as e:
            problem, status = str(e), 422
    return render(request, "fidelity.html", status, visitor, values=values, report=report,
                  manifest=None, problem=problem, manifest_problems=None, manifest_text="")


async def _record_fidelity(key: ApiKey, db: Database, stream: str, seq: str, event_id: str
                           ) -> dict[str, Any]:
    if event_id:
        if not valid_event_id(event_id):
            raise ValueError("That event id is not a UUID in canonical form.")
        record = await get_event(event_id, key, db)
        stream, seq = record["stream"], str(record["seq"])
    if not stream or not seq.isdigit() or not 1 <= int(seq) <= 2**63 - 1:
        raise ValueError("Name the record: its stream and seq (a whole number, 1 or more), "
                         "or its event id.")
    if not re.fullmatch(STREAM_PATTERN, stream):
        raise ValueError("That is not a stream id.")
    return await record_fidelity(stream, int(seq), key, db)


@router.post("/fidelity")
async def fidelity_manifest(request: Request, visitor: Visitor) -> Response:
    settings = request.app.state.settings
    fields, files = await posted_upload(request, visitor, settings.max_body_bytes)
    raw = files.get("manifest")
    pasted = fields.get("manifest_text", "")
    values = {"stream": "", "seq": "", "event_id": ""}
    context: dict[str, Any] = {"values": values, "report": None, "problem": None,
                               "manifest": None, "manifest_problems": None,
                               "manifest_text": pasted[:100_000]}
    if (raw is None) == (not pasted.strip()):
        context["problem"] = "Upload a manifest file or paste its JSON (one of the two)."
        return render(request, "fidelity.html", 422, visitor, **context)
    inner = internal_request(request, "/fidelity/analyze",
                             raw if raw is not None else pasted.encode("utf-8"))
    try:
        answer = await fidelity_analyze(inner, visitor.key)
    except ApiError as e:
        context["problem"] = e.message
        return render(request, "fidelity.html", e.status, visitor, **context)
    if isinstance(answer, JSONResponse):  # 422 invalid_manifest, its problems named
        body = _json(answer)
        context.update(problem=body["message"], manifest_problems=body.get("problems"))
        return render(request, "fidelity.html", answer.status_code, visitor, **context)
    context["manifest"] = answer
    return render(request, "fidelity.html", 200, visitor, **context)


# -- a stream's audit, with progress ---------------------------------------------------------

@dataclass
class Audit:
    """One audit started from a page: who started it, how far it got, how it ended."""

    id: str
    key: bytes
    """The digest of the API key that started it: only that key sees it."""
    stream: str
    first: int | None
    last: int | None
    total: int | None
    started: float = field(default_factory=time.time)
    checked: int = 0
    result: dict[str, Any] | None = None
    error: tuple[int, str] | None = None
    task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self.result is None and self.error is None

    def findings(self) -> list[dict[str, Any]]:
        """The audit's findings and the projector's, within the seq range asked for."""
        assert self.result is not None
        found = [*self.result["findings"], *self.result["projector_findings"]]
        if self.first is None and self.last is None:
            return found
        lo, hi = self.first or 1, self.last or 2**63
        return [f for f in found if f.get("seq") is None or lo <= f["seq"] <= hi]


class Audits:
    """The audits of one process, the last :data:`AUDITS_KEPT`."""

    def __init__(self, kept: int = AUDITS_KEPT) -> None:
        self.kept = kept
        self._audits: OrderedDict[str, Audit] = OrderedDict()

    def add(self, audit: Audit) -> None:
        self._audits[audit.id] = audit
        for old in [a for a in self._audits.values() if not a.running]:
            if len(self._audits) <= self.kept:
                break
            del self._audits[old.id]

    def get(self, audit_id: str, key: ApiKey) -> Audit | None:
        audit = self._audits.get(audit_id)
        return audit if audit is not None and audit.key == key.digest else None


def _audits(request: Request) -> Audits:
    state = request.app.state
    audits = getattr(state, "page_audits", None)
    if audits is None:
        audits = state.page_audits = Audits()
    return audits


class _Counted:
    """The database as the audit route sees it, with the rows it reads counted."""

    def __init__(self, db: Database, audit: Audit) -> None:
        self._db, self._audit = db, audit

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    async def audit_chunks(self, stream: str, chunk: int = 500
                           ) -> AsyncIterator[list[tuple[Any, ...]]]:
        async for rows in self._db.audit_chunks(stream, chunk):
            yield rows
            self._audit.checked += len(rows)  # the route has checked them when it asks again


async def _run(audit: Audit, key: ApiKey, db: Database, limit: Any) -> None:
    try:
        audit.result = await audit_stream(audit.stream, key, _Counted(db, audit), limit)
        audit.checked = audit.result["records"]
    except ApiError as e:
        audit.error = (e.status, e.message)
    except Exception:  # noqa: BLE001 - shown on the page; the API log has the traceback
        from server.logs import event_logger

        event_logger("evidence.api")("error", "page_audit_failed", stream=audit.stream,
                                     exc_info=True)
        audit.error = (500, "The audit failed; the API log has the details.")


def _seq_bound(text: str, name: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    if not text.isdigit() or not 1 <= int(text) <= 2**63 - 1:
        raise ValueError(f"{name} is a whole number, 1 or more.")
    return int(text)


@router.get("/audit")
async def audit_form(request: Request, visitor: Visitor, stream: str = "") -> Response:
    return render(request, "audit.html", 200, visitor, audit=None, problem=None,
                  values={"stream": stream[:200], "first": "", "last": ""})


@router.post("/audit")
async def audit_start(request: Request, visitor: Visitor, db: Db, limit: AuditLimit
                      ) -> Response:
    fields = await posted_form(request, visitor)
    values = {k: fields.get(k, "").strip() for k in ("stream", "first", "last")}
    try:
        if not values["stream"]:
            raise ValueError("Name the stream to audit.")
        first = _seq_bound(values["first"], "The first seq")
        last = _seq_bound(values["last"], "The last seq")
        if first is not None and last is not None and first > last:
            raise ValueError("The first seq comes after the last.")
    except ValueError as e:
        return render(request, "audit.html", 422, visitor, audit=None, problem=str(e),
                      values=values)
    stream = values["stream"]
    total = await db.head_seq(stream) if visitor.key.scope.allows(stream) else None
    audit = Audit(secrets.token_urlsafe(16), visitor.key.digest, stream, first, last, total)
    _audits(request).add(audit)
    audit.task = asyncio.create_task(_run(audit, visitor.key, db, limit))
    return RedirectResponse(f"{PREFIX}/audit/{audit.id}", status_code=303)


@router.get("/audit/{audit_id}")
async def audit_page(request: Request, audit_id: str, visitor: Visitor) -> Response:
    audit = _audits(request).get(audit_id, visitor.key)
    if audit is None:
        raise PageError(404, "no such audit")
    status = 200
    if audit.error is not None:
        status = audit.error[0]
    response = render(request, "audit.html", status, visitor, audit=audit, problem=None,
                      values={"stream": audit.stream, "first": audit.first or "",
                              "last": audit.last or ""},
                      findings=None if audit.result is None else audit.findings(),
                      refresh=REFRESH_SECONDS if audit.running else None)
    if audit.running:
        response.headers["Refresh"] = str(REFRESH_SECONDS)
    return response
