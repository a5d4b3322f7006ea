"""Output text per provider wire format: what ``output_digest`` (0x04) is computed over. Pure.

``output_digest`` = sha256(0x04 ‖ UTF-8 of the model's output text). This module is the one
definition of "the output text" for each wire format, used by the capturing client (at capture
time), the writer, the auditor, exports and the API (to recompute and compare):

    kind                  endpoint path ends with  output text
    openai.chat           /chat/completions        choices[index 0].message.content / delta.content
    openai.responses      /responses               output[type=message].content[type=output_text].text
                                                   / response.output_text.delta events
    anthropic.messages    /messages                content[type=text].text / text_delta events

For an SSE stream (``capture.streamed``) the text is the deltas concatenated in arrival order.
Any other endpoint is an *unknown* wire format: :func:`extract` says so (``UNKNOWN_FORMAT``),
so a verifier reports "not verifiable" instead of silently skipping the check.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping
from urllib.parse import urlsplit

__all__ = [
    "ANTHROPIC_MESSAGES",
    "EXTRACTED",
    "Extraction",
    "KINDS",
    "NO_TEXT",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "ResponseFacts",
    "UNKNOWN_FORMAT",
    "extract",
    "json_object",
    "parse_response",
    "parse_sse",
    "stream_complete",
    "wire_format",
]

OPENAI_CHAT = "openai.chat"
OPENAI_RESPONSES = "openai.responses"
ANTHROPIC_MESSAGES = "anthropic.messages"
KINDS = (OPENAI_CHAT, OPENAI_RESPONSES, ANTHROPIC_MESSAGES)

_PATH_KINDS = (
    ("/chat/completions", OPENAI_CHAT),
    ("/responses", OPENAI_RESPONSES),
    ("/messages", ANTHROPIC_MESSAGES),
)


def wire_format(path: str) -> str | None:
    """The wire format (``kind``) of an endpoint path, or None when it is not one we know."""
    path = path.rstrip("/")
    return next((k for suffix, k in _PATH_KINDS if path.endswith(suffix)), None)


@dataclass(frozen=True)
class ResponseFacts:
    """What a success response says: backend fingerprint, answering model, output text."""

    fingerprint: str | None = None
    response_model: str | None = None
    output_text: str | None = None


def json_object(data: bytes | None) -> dict[str, Any] | None:
    """``data`` as a JSON object, or None when it is empty, not JSON, or not an object."""
    if not data:
        return None
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def parse_sse(data: bytes) -> Iterator[tuple[str | None, str]]:
    """Yield ``(event, data)`` per server-sent event in ``data`` (WHATWG rules, no retry/id).

    A trailing event without its terminating blank line is not yielded: it is incomplete.
    """
    text = data.decode("utf-8", errors="replace")
    event: str | None = None
    lines: list[str] = []
    for line in re.split(r"\r\n|\r|\n", text)[:-1]:  # the last piece has no line ending
        if line == "":
            if lines:
                yield event, "\n".join(lines)
            event, lines = None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            lines.append(value)


def _sse_json(data: bytes) -> Iterator[tuple[str | None, str, dict[str, Any] | None]]:
    for event, payload in parse_sse(data):
        try:
            obj = json.loads(payload)
        except ValueError:
            obj = None
        yield event, payload, obj if isinstance(obj, dict) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _text_parts(content: object) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):  # some compatible servers send content parts
        return [p["text"] for p in content
                if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)]
    return []


def _first_choice(choices: object) -> dict[str, Any] | None:
    if not isinstance(choices, list):
        return None
    for c in choices:
        if isinstance(c, dict) and c.get("index", 0) == 0:
            return c
    return None


def _chat(obj: dict[str, Any]) -> ResponseFacts:
    choice = _first_choice(obj.get("choices"))
    message = choice.get("message") if choice else None
    parts = _text_parts(message.get("content")) if isinstance(message, dict) else []
    return ResponseFacts(_str(obj.get("system_fingerprint")), _str(obj.get("model")),
                         "".join(parts) if parts else None)


def _chat_stream(data: bytes) -> ResponseFacts:
    fingerprint = model = None
    parts: list[str] = []
    for _, payload, obj in _sse_json(data):
        if obj is None:
            continue
        fingerprint = _str(obj.get("system_fingerprint")) or fingerprint
        model = model or _str(obj.get("model"))
        choice = _first_choice(obj.get("choices"))
        delta = choice.get("delta") if choice else None
        if isinstance(delta, dict):
            parts += _text_parts(delta.get("content"))
    return ResponseFacts(fingerprint, model, "".join(parts) if parts else None)


def _responses(obj: dict[str, Any]) -> ResponseFacts:
    parts: list[str] = []
    for item in obj.get("output") or []:
        if isinstance(item, dict) and item.get("type") == "message":
            for c in item.get("content") or []:
                if isinstance(c, dict) and c.get("type") == "output_text" and isinstance(c.get("text"), str):
                    parts.append(c["text"])
    return ResponseFacts(None, _str(obj.get("model")), "".join(parts) if parts else None)


def _responses_stream(data: bytes) -> ResponseFacts:
    model = None
    parts: list[str] = []
    for event, _, obj in _sse_json(data):
        if obj is None:
            continue
        kind = obj.get("type") or event
        if kind == "response.output_text.delta" and isinstance(obj.get("delta"), str):
            parts.append(obj["delta"])
        response = obj.get("response")
        if isinstance(response, dict):
            model = _str(response.get("model")) or model
    return ResponseFacts(None, model, "".join(parts) if parts else None)


def _anthropic(obj: dict[str, Any]) -> ResponseFacts:
    parts = [b["text"] for b in obj.get("content") or []
             if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)]
    return ResponseFacts(None, _str(obj.get("model")), "".join(parts) if parts else None)


def _anthropic_stream(data: bytes) -> ResponseFacts:
    model = None
    parts: list[str] = []
    for event, _, obj in _sse_json(data):
        if obj is None:
            continue
        kind = obj.get("type") or event
        if kind == "message_start" and isinstance(obj.get("message"), dict):
            model = _str(obj["message"].get("model"))
        elif kind == "content_block_delta" and isinstance(obj.get("delta"), dict):
            delta = obj["delta"]
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                parts.append(delta["text"])
    return ResponseFacts(None, model, "".join(parts) if parts else None)


_PARSERS = {
    OPENAI_CHAT: (_chat, _chat_stream),
    OPENAI_RESPONSES: (_responses, _responses_stream),
    ANTHROPIC_MESSAGES: (_anthropic, _anthropic_stream),
}


def parse_response(kind: str | None, body: bytes | None, streamed: bool) -> ResponseFacts:
    """Fingerprint, answering model and output text of a success response body.

    For a stream the output text is the text deltas concatenated in arrival order.
    """
    if kind not in _PARSERS or not body:
        return ResponseFacts()
    whole, stream = _PARSERS[kind]
    if streamed:
        return stream(body)
    obj = json_object(body)
    return whole(obj) if obj is not None else ResponseFacts()


_TERMINAL_EVENTS = {
    OPENAI_RESPONSES: frozenset({"response.completed", "response.incomplete", "response.failed", "error"}),
    ANTHROPIC_MESSAGES: frozenset({"message_stop", "error"}),
}


def stream_complete(kind: str | None, body: bytes) -> bool:
    """True if an SSE body already holds the format's final event.

    An SDK may stop reading at that event and close the response without waiting for the
    end of the HTTP body (openai's sync client does, at ``[DONE]``); such a close is not early.
    """
    if kind == OPENAI_CHAT:
        return any(payload.startswith("[DONE]") for _, payload in parse_sse(body))
    terminal = _TERMINAL_EVENTS.get(kind)
    if terminal is None:
        return False
    for event, _, obj in _sse_json(body):
        if event in terminal or (obj is not None and obj.get("type") in terminal):
            return True
    return False


EXTRACTED, NO_TEXT, UNKNOWN_FORMAT = "extracted", "no_text", "unknown_format"


@dataclass(frozen=True)
class Extraction:
    """The output text of a recorded body, or why there is none.

    ``state``: ``EXTRACTED`` (``text`` is set), ``NO_TEXT`` (a known format, but the response
    holds no output text, or is not kept), ``UNKNOWN_FORMAT`` (the endpoint is no wire format
    this contract defines: the output digest cannot be recomputed here).
    """

    state: str
    kind: str | None
    text: str | None = None


def extract(body: Mapping[str, Any]) -> Extraction:
    """The output text of a recorded CaptureEvent body, extracted as at capture time: the
    endpoint names the wire format, ``capture.streamed`` whether the bytes are SSE."""
    kind = wire_format(urlsplit(body["provider"]["endpoint"]).path)
    if kind is None:
        return Extraction(UNKNOWN_FORMAT, None)
    text = parse_response(kind, body["response_bytes"], bool(body["capture"]["streamed"])).output_text
    return Extraction(EXTRACTED, kind, text) if text is not None else Extraction(NO_TEXT, kind)
