"""Message content in the shapes the dialects carry, and the output text rule.

Shapes met: the GenAI conventions' ``[{"role", "parts": [{"type": "text", "content"}]}]``
(BIJOTEL's own extractors write ``"text"`` in place of ``"content"``), and the OpenAI chat
shape ``[{"role", "content": str | [{"type": "text", "text"}]}]`` (OpenInference, Logfire's
first format, BIJOTEL's input messages, rebuilt per-message events).
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from otlp.attributes import Attributes, any_value
from otlp.model import Content


def from_attribute(attrs: Attributes, key: str) -> Content | None:
    """The content of one attribute: a JSON string parsed, a structured AnyValue read; a string
    that is not JSON is kept as the string it is. ``raw`` is the value's exact bytes."""
    if key not in attrs:
        return None
    value = attrs.value(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    return Content(value=value, attributes=(key,), raw=attrs.raw(key), rebuilt=False)


def rebuilt(value: Any, sources: tuple[str, ...]) -> Content | None:
    """Content assembled from several attributes or events (no single value holds it)."""
    if not value:
        return None
    return Content(value=value, attributes=sources, raw=None, rebuilt=True)


def text_of_message(message: Any) -> list[str]:
    """The text parts of one message, in order, whatever shape it is in."""
    if isinstance(message, str):
        return [message]
    if not isinstance(message, dict):
        return []
    parts = message.get("parts")
    if isinstance(parts, list):
        out = []
        for part in parts:
            if isinstance(part, dict) and part.get("type") == "text":
                text = part.get("content", part.get("text"))
                if isinstance(text, str):
                    out.append(text)
        return out
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p["text"] for p in content
                if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)]
    return []


def output_text(output: Content | None) -> str | None:
    """The concatenated text parts of the first output message (the first choice), as the
    gateway's output_digest takes the first choice; None when there is no text."""
    if output is None:
        return None
    messages = output.value
    if isinstance(messages, dict):
        messages = [messages]
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, list) or not messages:
        return None
    parts = text_of_message(messages[0])
    return "".join(parts) if parts else None


def any_body(body: AnyValue) -> dict[str, Any]:
    """A per-message event's body as a dict (a bare value is the message's content)."""
    value = any_value(body)
    if value is None:
        return {}
    return value if isinstance(value, dict) else {"content": value}
