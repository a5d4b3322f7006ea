"""A request or response body as a page shows it: never as HTML (pure).

:func:`show` decides how to show a body from its bytes and content type:

- ``json``: parsed and pretty-printed (2-space indent, keys in their order);
- ``sse``: a ``text/event-stream`` split into its events as the WHATWG rules split them
  (:func:`split_sse`: events end at a blank line; ``data`` lines joined by ``\\n``; lines
  starting with ``:`` are comments), each event's data pretty-printed when it is JSON;
- ``text``: UTF-8 text as text;
- ``binary``: anything else, as a hex preview (:func:`hex_rows`: offset, 16 bytes in hex,
  their printable ASCII) of its first :data:`HEX_PREVIEW` bytes.

What comes out is plain strings: the templates autoescape every one of them, so a body holding
``<script>`` shows those characters and runs nothing. Long bodies are cut at :data:`TEXT_LIMIT`
characters (``truncated`` says so); the whole body is in the export bundle.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

__all__ = ["HEX_PREVIEW", "TEXT_LIMIT", "Body", "SseEvent", "hex_rows", "show", "split_sse"]

TEXT_LIMIT = 256 * 1024
"""Characters of a body shown at most."""
HEX_PREVIEW = 1024
"""Bytes of a binary body shown in the hex preview."""

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class SseEvent:
    """One server-sent event: its ``event`` type and ``id`` when named, its data (pretty
    when JSON), and its comment lines."""

    event: str | None
    id: str | None
    data: str
    comments: tuple[str, ...] = ()


@dataclass(frozen=True)
class Body:
    """How a page shows a body: ``kind`` is ``none``, ``json``, ``sse``, ``text`` or
    ``binary``; ``text`` the text to show (json, text), ``events`` (sse), ``rows`` (binary:
    offset, hex, ascii)."""

    kind: str
    size: int
    content_type: str | None = None
    text: str = ""
    events: tuple[SseEvent, ...] = ()
    rows: tuple[tuple[str, str, str], ...] = ()
    truncated: bool = False
    note: str | None = None


def _media(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def _pretty(text: str) -> str | None:
    """``text`` pretty-printed when it is one JSON value, else None."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return json.dumps(value, indent=2, ensure_ascii=False)


def _text(data: bytes) -> str | None:
    """``data`` as text when it is UTF-8 without control characters (tabs and newlines are
    text), else None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if _CONTROL.search(text) else text


def split_sse(text: str) -> list[SseEvent]:
    """The events of an event stream, in order (an unterminated last event counts too)."""
    events: list[SseEvent] = []
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    kind = ident = None
    data: list[str] = []
    comments: list[str] = []
    seen = False
    for line in [*lines, ""]:
        if line == "":
            if seen:
                joined = "\n".join(data)
                shown = (_pretty(joined) or joined) if joined.strip() else joined
                events.append(SseEvent(kind, ident, shown, tuple(comments)))
            kind = ident = None
            data, comments, seen = [], [], False
            continue
        seen = True
        if line.startswith(":"):
            comments.append(line[1:].removeprefix(" "))
            continue
        name, colon, value = line.partition(":")
        value = value.removeprefix(" ") if colon else ""
        if name == "data":
            data.append(value)
        elif name == "event":
            kind = value
        elif name == "id":
            ident = value
        else:  # retry and unknown fields: kept visible as comments say what was there
            comments.append(line)
    return events


def hex_rows(data: bytes, limit: int = HEX_PREVIEW) -> list[tuple[str, str, str]]:
    """``(offset, hex, ascii)`` per 16 bytes of the first ``limit`` bytes of ``data``."""
    rows = []
    for at in range(0, min(len(data), limit), 16):
        chunk = data[at:at + 16]
        rows.append((f"{at:08x}", " ".join(f"{b:02x}" for b in chunk),
                     "".join(chr(b) if 0x20 <= b < 0x7f else "." for b in chunk)))
    return rows


def _cut(text: str) -> tuple[str, bool]:
    return (text[:TEXT_LIMIT], True) if len(text) > TEXT_LIMIT else (text, False)


def show(data: bytes | None, content_type: str | None) -> Body:
    """How to show ``data``, sent or served with ``content_type`` (see the module docstring)."""
    if data is None:
        return Body("none", 0, content_type)
    size, media = len(data), _media(content_type)
    text = _text(data)
    if text is None:
        return Body("binary", size, content_type, rows=tuple(hex_rows(data)),
                    truncated=size > HEX_PREVIEW)
    if media == "text/event-stream" or (not media and text.startswith(("data:", "event:"))):
        cut, truncated = _cut(text)
        return Body("sse", size, content_type, events=tuple(split_sse(cut)), truncated=truncated)
    if media.endswith("json") or media.endswith("+json") or not media:
        pretty = _pretty(text) if size <= TEXT_LIMIT else None
        if pretty is not None:
            cut, truncated = _cut(pretty)
            return Body("json", size, content_type, text=cut, truncated=truncated)
        note = "not valid JSON; shown as text" if media.endswith("json") and text else None
        cut, truncated = _cut(text)
        return Body("text", size, content_type, text=cut, truncated=truncated, note=note)
    cut, truncated = _cut(text)
    return Body("text", size, content_type, text=cut, truncated=truncated)
