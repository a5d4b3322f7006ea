"""The evidence API's answer to a replay, read: what a refusal means (:class:`ReplayMiss`,
:class:`ReplayErased`, :class:`ReplayRedacted`, a ``ReplayError``) and the application's
response built from an answer, unverified (``verify=False``) or from a verified bundle.

The application only ever gets bytes from here: a recorded response, as recorded, with the
evidence headers (``_PASS_HEADERS``); an encrypted record's envelope is opened with the
subject's key (``SubjectKeys``) before it is handed over.
"""

from __future__ import annotations

from typing import Any

from evidence_contract import iso_micros

from .errors import EvidenceTampered, ReplayError

__all__ = ["ReplayErased", "ReplayMiss", "ReplayRedacted", "bundle_doc", "check_status",
           "consistency_doc", "unverified_response", "verified_response"]

# Headers of the evidence API's answer passed on to the application with the recorded bytes.
_PASS_HEADERS = ("content-type", "evidence-stream", "evidence-seq", "evidence-record-digest",
                 "evidence-content-key", "evidence-event-id")


class ReplayMiss(ReplayError, LookupError):
    """No committed record has the request's content key: nothing to replay."""

    def __init__(self, key_hex: str, method: str, url: str, why: str = ""):
        self.content_key = key_hex
        super().__init__(f"no recorded response for {method} {url} "
                         f"(content_key {key_hex}){why}; replay never calls the provider")


class ReplayErased(ReplayError, LookupError):
    """The recorded content was erased (its subject's key destroyed): it cannot be replayed,
    by anyone, ever. ``erased_at`` (µs since the epoch) and ``request_id`` name the erasure
    when known."""

    def __init__(self, method: str, url: str, erased_at: int | None = None,
                 request_id: str | None = None, subject: str | None = None,
                 content_key: str | None = None) -> None:
        self.erased_at, self.request_id = erased_at, request_id
        self.subject, self.content_key = subject, content_key
        when = f" at {iso_micros(erased_at)}" if erased_at is not None else ""
        under = f" under request {request_id}" if request_id else ""
        whose = f" of subject {subject!r}" if subject else ""
        super().__init__(f"the recorded response for {method} {url} was erased{when}{under}"
                         f"{whose}: the key that sealed it is destroyed; replay never calls "
                         f"the provider")


class ReplayRedacted(ReplayError, LookupError):
    """The record is on a stream the read side redacts: the API withholds its verbatim
    bytes, so there is nothing verbatim to replay (the masked bytes are not the recording).
    Its place in the signed log was verified (``stream``, ``seq``)."""

    def __init__(self, method: str, url: str, stream: str, seq: int) -> None:
        self.stream, self.seq = stream, seq
        super().__init__(f"the recorded response for {method} {url} is {stream} #{seq}, on a "
                         f"stream the evidence API redacts: its verbatim bytes are withheld, "
                         f"and masked bytes are not the recording; replay it where the "
                         f"redaction policy does not apply")


def _erased_answer(api_response: Any) -> dict[str, Any] | None:
    """The body of a 410 with the evidence API's JSON ``erased`` error, else None."""
    if api_response.status_code != 410:
        return None
    try:
        doc = api_response.json()
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and doc.get("error") == "erased" else None


def _is_miss(api_response: Any) -> bool:
    """A 404 with the evidence API's JSON ``not_found`` error; the 404 page of some other
    server (a wrong api_url) is a ReplayError instead."""
    try:
        return api_response.json().get("error") == "not_found"
    except (ValueError, AttributeError):
        return False


def check_status(api_response: Any, key_hex: str, request: Any) -> None:
    """Raise the ReplayError a non-200 answer of the evidence API means."""
    if api_response.status_code == 404 and _is_miss(api_response):
        raise ReplayMiss(key_hex, request.method, str(request.url))
    erased = _erased_answer(api_response)
    if erased is not None:
        at = erased.get("erased_at")
        raise ReplayErased(request.method, str(request.url),
                           at if isinstance(at, int) and not isinstance(at, bool) else None,
                           erased.get("request_id") if isinstance(erased.get("request_id"),
                                                                  str) else None,
                           content_key=key_hex)
    if api_response.status_code != 200:
        raise ReplayError(f"evidence API at {api_response.url.copy_with(path='/')} answered "
                          f"{api_response.status_code} for /replay/{key_hex} (is api_url the "
                          f"evidence API, and is the key valid?): {api_response.text[:300]}")


def _open(keys: Any, content: bytes, stream: str, event_id: str, key_hex: str) -> bytes:
    """An encrypted record's response envelope, opened with the subject's key."""
    from evidence_contract.sealing import OpenError

    try:
        return keys.open(content, stream, event_id, "response_bytes")
    except OpenError as e:
        raise ReplayError(f"the recorded response for /replay/{key_hex} does not open with "
                          f"key {keys.key_id}: {e}") from None


def unverified_response(mod: Any, api_response: Any, key_hex: str, request: Any,
                        keys: Any = None) -> Any:
    """An unverified answer (``verify=False``) as the application's response; with ``keys``
    (a SubjectKeys) the recorded bytes are an envelope, opened here."""
    check_status(api_response, key_hex, request)
    headers = [(k, v) for k, v in api_response.headers.items() if k.lower() in _PASS_HEADERS]
    content = api_response.content
    if keys is not None:
        content = _open(keys, content, api_response.headers.get("evidence-stream", ""),
                        api_response.headers.get("evidence-event-id", ""), key_hex)
    return mod.Response(200, headers=headers, content=content, request=request)


def bundle_doc(api_response: Any, key_hex: str, request: Any) -> dict[str, Any]:
    """The JSON object of a bundle answer; the ReplayError of any other answer."""
    check_status(api_response, key_hex, request)
    try:
        doc = api_response.json()
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise EvidenceTampered(f"the evidence API's bundle for /replay/{key_hex} is not a JSON "
                               f"object")
    return doc


def consistency_doc(answer: Any) -> dict[str, Any]:
    """The JSON of a consistency proof answer, for a bundle that needs one."""
    if answer.status_code != 200:
        raise ReplayError(f"the evidence API answered {answer.status_code} for a "
                          f"consistency proof: {answer.text[:300]}")
    try:
        return answer.json()
    except ValueError:
        raise EvidenceTampered("the evidence API's consistency proof is not JSON") from None


def verified_response(mod: Any, doc: dict[str, Any], verified: Any, key_hex: str,
                      request: Any, keys: Any) -> Any:
    """The application's response from a verified bundle: the response bytes are the
    verified record's own, never a copy the API served beside them."""
    if verified.record is None:
        raise ReplayRedacted(request.method, str(request.url), verified.stream, verified.seq)
    body, seal = verified.body, verified.decoded["seal"]
    if body["outcome"] != "COMMITTED":
        raise EvidenceTampered(f"the evidence API answered /replay/{key_hex} with "
                               f"{verified.stream} #{verified.seq}, a {body['outcome']} record")
    content = body["response_bytes"]
    if content is None:
        raise ReplayError(f"the recorded response for {request.method} {request.url} "
                          f"({verified.stream} #{verified.seq}) was not kept verbatim (the "
                          f"record keeps its digests only): nothing to replay")
    if keys is not None:
        content = _open(keys, bytes(content), verified.stream, body["event_id"], key_hex)
    ctype = doc.get("content_type")
    cp = verified.checkpoint
    headers = [("content-type", ctype if isinstance(ctype, str) and ctype.isprintable()
                else "application/octet-stream"),
               ("evidence-stream", verified.stream), ("evidence-seq", str(verified.seq)),
               ("evidence-record-digest", bytes(seal["record_digest"]).hex()),
               ("evidence-content-key", key_hex), ("evidence-event-id", body["event_id"]),
               ("evidence-verified", f"{cp.origin} {cp.size}")]
    return mod.Response(200, headers=headers, content=bytes(content), request=request)
