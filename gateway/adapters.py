"""Provider adapters: what a capture can say about a call, read from its bytes. Pure, no I/O.

Three wire formats are understood, each streamed (SSE) or not:

    kind                  path ends with        output text
    openai.chat           /chat/completions     choices[index 0].message.content / delta.content
    openai.responses      /responses            output[type=message].content[type=output_text].text
                                                / response.output_text.delta events
    anthropic.messages    /messages             content[type=text].text / text_delta events

Anything else is kind ``None``: the capture is still complete, only the fields below are null.

``params`` is the JSON request object minus the prompt content, which the record already keeps
verbatim (or as a hash) in ``request_bytes``; dropped keys per kind are in ``PROMPT_KEYS``.
Every other key is kept, ``model`` and ``stream`` included, in the order sent.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from evidence_contract import seed_text

__all__ = [
    "ANTHROPIC_MESSAGES",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "PROMPT_KEYS",
    "RequestFacts",
    "ResponseFacts",
    "Route",
    "detect",
    "output_text_for_body",
    "parse_request",
    "parse_response",
    "parse_sse",
    "stream_complete",
]

OPENAI_CHAT = "openai.chat"
OPENAI_RESPONSES = "openai.responses"
ANTHROPIC_MESSAGES = "anthropic.messages"

PROMPT_KEYS: dict[str | None, frozenset[str]] = {
    OPENAI_CHAT: frozenset({"messages"}),
    OPENAI_RESPONSES: frozenset({"input", "instructions"}),
    ANTHROPIC_MESSAGES: frozenset({"messages", "system"}),
    None: frozenset({"messages", "input", "instructions", "system", "prompt"}),
}
"""Request keys left out of ``params``: the prompt itself, not a setting of the call."""

_KNOWN_HOSTS = (
    # (host suffix, provider name)
    ("api.openai.com", "openai"),
    (".openai.azure.com", "azure-openai"),
    ("api.anthropic.com", "anthropic"),
)
_PATH_KINDS = (
    ("/chat/completions", OPENAI_CHAT, "openai-compatible"),
    ("/responses", OPENAI_RESPONSES, "openai-compatible"),
    ("/messages", ANTHROPIC_MESSAGES, "anthropic-compatible"),
)
_PATH_VERSION = re.compile(r"/(v\d+[a-z0-9]*)(?=/|$)")


@dataclass(frozen=True)
class Route:
    """Who a request goes to: provider name, wire format (``kind``) and API version."""

    provider: str
    kind: str | None
    api_version: str | None


@dataclass(frozen=True)
class RequestFacts:
    model_id: str | None = None
    params: str | None = None
    seed: str | None = None
    """An integer seed of any size as decimal text (``replay.seed``); never a bool or float."""
    temperature: float | None = None
    top_p: float | None = None


@dataclass(frozen=True)
class ResponseFacts:
    fingerprint: str | None = None
    response_model: str | None = None
    output_text: str | None = None


def detect(host: str, path: str, headers: Mapping[str, str] | None = None,
           query: Mapping[str, str] | None = None) -> Route:
    """Name the provider and wire format of a request from its host, path and headers.

    ``headers`` must have lowercase names. The API version is the ``anthropic-version``
    header, else an ``api-version`` query parameter (Azure), else a ``/v1``-style path segment.
    """
    host = host.lower()
    path = path.rstrip("/")
    kind, compatible = None, "unknown"
    for suffix, k, name in _PATH_KINDS:
        if path.endswith(suffix):
            kind, compatible = k, name
            break
    provider = next((name for suffix, name in _KNOWN_HOSTS if host.endswith(suffix)), compatible)
    version = (headers or {}).get("anthropic-version") or (query or {}).get("api-version")
    if version is None:
        m = _PATH_VERSION.search(path)
        version = m.group(1) if m else None
    return Route(provider, kind, version)


def _json_object(data: bytes | None) -> dict[str, Any] | None:
    if not data:
        return None
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def parse_request(kind: str | None, body: bytes | None) -> RequestFacts:
    """Model, params (JSON text) and replay context of a request body; nulls when unreadable."""
    obj = _json_object(body)
    if obj is None:
        return RequestFacts()
    model = obj.get("model")
    drop = PROMPT_KEYS.get(kind, PROMPT_KEYS[None])
    params = {k: v for k, v in obj.items() if k not in drop}
    return RequestFacts(
        model_id=model if isinstance(model, str) else None,
        params=json.dumps(params, ensure_ascii=False, separators=(",", ":")),
        seed=seed_text(obj.get("seed")),  # decimal text: a seed >= 2**63 is kept, not dropped
        temperature=_number(obj.get("temperature")),
        top_p=_number(obj.get("top_p")),
    )


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
    obj = _json_object(body)
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


def output_text_for_body(body: Mapping[str, Any]) -> str | None:
    """The output text of a recorded CaptureEvent body, extracted as at capture time.

    What an audit or an export recomputes ``output_digest`` from: the endpoint names the wire
    format, ``capture.streamed`` says whether the response bytes are SSE.
    """
    from urllib.parse import urlsplit

    url = urlsplit(body["provider"]["endpoint"])
    route = detect(url.hostname or "", url.path)
    return parse_response(route.kind, body["response_bytes"],
                          bool(body["capture"]["streamed"])).output_text
