"""Redaction as a projection (pure): masking of the read model's plaintext columns, never of
the log.

A policy (``EVIDENCE_REDACTION_FILE``, JSON, or YAML when PyYAML is installed) says what the
read side must not serve of a plain stream's content::

    {"streams": ["acme:*"],                      # fnmatch patterns; default: every stream
     "json_paths": ["$.messages[*].content", "$.user"],   # JSON values replaced by the mask
     "patterns": ["[0-9]{4}-[0-9]{4}-[0-9]{4}", "(?i)ada lovelace"],   # regexes, masked
     "mask": "[REDACTED]"}

:func:`apply` masks the served body columns of a ``records`` row (:data:`MASKED`: request,
response, error, input and prompt bytes, and ``params``): JSON paths first (over a body that
parses as JSON; it is re-serialized compactly), then the patterns over the bytes. It never
touches ``record_bytes`` (the log message, verbatim: the audit compares it with the log and
recomputes every digest from it), the digests, the chain or anything else; an encrypted
record (``key_id`` set) holds envelopes, nothing to mask.

A *streamed* response (:func:`is_stream`: the capture's ``streamed`` flag, or a content type
of events such as ``text/event-stream`` or NDJSON) is not masked piece by piece: its response
and error bodies are each replaced whole by the mask. A reader joins a stream's deltas into
the text, and what is split across deltas (``"ada.lo"`` + ``"velace@example.com"``) matches
no pattern in any one of them, while JSON paths name fields of one document, not of the
events of a stream; masking the deltas would serve "redacted" bodies that give the content
back once joined. The body's digests, length and the log message's hashes still prove the
record; its bodies are in the log for whoever may read that. (A projection built before this
rule keeps the deltas of such records until it is rebuilt, and the audit, which recomputes
each row with today's rule, reports them as ``projection_altered`` meanwhile: rebuild.)

The policy's :attr:`Policy.digest` (SHA-256 of its canonical JSON) is stored with the
generation it built (``redaction`` table): a rebuild re-applies the policy configured then
(and says when it differs from the live one's), and the audit recomputes each row from its
record bytes *with the generation's policy*, so a redacted projection is not reported as
altered, and a row masked other than the policy says is.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .columns import RECORD_COLUMNS, STREAM

__all__ = ["MASKED", "STREAM_TYPES", "WHOLE_WHEN_STREAMED", "Policy", "RedactionError",
           "apply", "is_stream", "load", "parse"]

MASKED = ("request_bytes", "response_bytes", "error_bytes", "input_bytes", "prompt_bytes",
          "params")
"""The ``records`` columns a policy masks (what the API serves as bodies)."""

WHOLE_WHEN_STREAMED = ("response_bytes", "error_bytes")
"""The columns replaced whole by the mask in a streamed record (:func:`is_stream`)."""

STREAM_TYPES = frozenset({"text/event-stream", "application/x-ndjson", "application/ndjson",
                          "application/jsonl", "application/x-jsonlines",
                          "application/json-seq", "application/vnd.amazon.eventstream"})
"""Response content types whose body is a sequence of events a reader joins (media type only,
lowercase): a record with one is streamed even when its producer did not say so."""

_PATH_RE = re.compile(r"\$((?:\.[A-Za-z_][A-Za-z0-9_-]*|\[\*\]|\[[0-9]+\])+)")
_STEP_RE = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\*|[0-9]+)\]")


class RedactionError(ValueError):
    """The redaction policy is malformed; the message says where."""


@dataclass(frozen=True)
class Policy:
    streams: tuple[str, ...]
    json_paths: tuple[str, ...]
    patterns: tuple[str, ...]
    mask: str = "[REDACTED]"

    def __post_init__(self) -> None:
        for p in self.json_paths:
            if not _PATH_RE.fullmatch(p):
                raise RedactionError(f"json path {p!r}: use $.name, [*] and [index] steps")
        try:
            compiled = tuple(re.compile(p.encode("utf-8")) for p in self.patterns)
        except re.error as e:
            raise RedactionError(f"pattern: {e}") from None
        object.__setattr__(self, "_compiled", compiled)
        object.__setattr__(self, "_steps", tuple(
            tuple((m.group(1), m.group(2)) for m in _STEP_RE.finditer(p))
            for p in self.json_paths))

    def canonical(self) -> dict[str, Any]:
        return {"streams": list(self.streams), "json_paths": list(self.json_paths),
                "patterns": list(self.patterns), "mask": self.mask}

    @property
    def digest(self) -> bytes:
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(b"evidence-store redaction policy\n" + text.encode()).digest()

    def covers(self, stream: str) -> bool:
        return not self.streams or any(fnmatch.fnmatchcase(stream, p) for p in self.streams)

    def _mask_json(self, doc: Any) -> Any:
        for steps in self._steps:  # type: ignore[attr-defined]
            doc = _set(doc, steps, self.mask)
        return doc

    def mask_bytes(self, data: bytes) -> bytes:
        if self._steps:  # type: ignore[attr-defined]
            try:
                doc = json.loads(data)
            except (ValueError, UnicodeDecodeError):
                doc = _NOT_JSON
            if doc is not _NOT_JSON:
                masked = self._mask_json(doc)
                if masked != doc:
                    data = json.dumps(masked, ensure_ascii=False,
                                      separators=(",", ":")).encode("utf-8")
        mask = self.mask.encode("utf-8")
        for rx in self._compiled:  # type: ignore[attr-defined]
            data = rx.sub(lambda _m: mask, data)
        return data

    def mask_response(self, data: bytes, streamed: bool | None,
                      content_type: str | None) -> bytes:
        """A response or error body of a covered plain record, masked as :func:`apply` masks
        it: replaced whole by the mask when the record is a stream (:func:`is_stream`), else
        :meth:`mask_bytes`. For whoever serves such a body from elsewhere than the rows (the
        log's record in place of an altered row), so it is masked the same way."""
        if is_stream(streamed, content_type):
            return self.mask.encode("utf-8")
        return self.mask_bytes(data)


_NOT_JSON = object()


def _set(doc: Any, steps: tuple[tuple[str | None, str | None], ...], mask: str) -> Any:
    """``doc`` with the values at ``steps`` replaced by ``mask`` (copies; absent: as is)."""
    if not steps:
        return mask
    (name, index), rest = steps[0], steps[1:]
    if name is not None:
        if isinstance(doc, dict) and name in doc:
            return {**doc, name: _set(doc[name], rest, mask)}
        return doc
    if not isinstance(doc, list):
        return doc
    if index == "*":
        return [_set(x, rest, mask) for x in doc]
    i = int(index)
    if i >= len(doc):
        return doc
    return [*doc[:i], _set(doc[i], rest, mask), *doc[i + 1:]]


def parse(doc: Mapping[str, Any]) -> Policy:
    if not isinstance(doc, Mapping) or set(doc) - {"streams", "json_paths", "patterns", "mask"}:
        raise RedactionError("a redaction policy is an object of streams, json_paths, "
                             "patterns and mask")

    def strings(name: str) -> tuple[str, ...]:
        v = doc.get(name, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise RedactionError(f"{name} is a list of strings")
        return tuple(v)

    mask = doc.get("mask", "[REDACTED]")
    if not isinstance(mask, str):
        raise RedactionError("mask is a string")
    return Policy(strings("streams"), strings("json_paths"), strings("patterns"), mask)


def load(path: str | Path) -> Policy:
    text = Path(path).read_text(encoding="utf-8")
    if str(path).endswith((".yaml", ".yml")):
        import yaml  # optional: JSON needs nothing

        try:
            return parse(yaml.safe_load(text))
        except yaml.YAMLError as e:
            raise RedactionError(f"{path}: not YAML: {e}") from None
    try:
        return parse(json.loads(text))
    except json.JSONDecodeError as e:
        raise RedactionError(f"{path}: not JSON: {e}") from None


def is_stream(streamed: bool | None, content_type: str | None) -> bool:
    """Whether a record's response is a stream of events (see the module docstring): its
    capture says ``streamed``, or its content type is one of :data:`STREAM_TYPES`."""
    media = (content_type or "").split(";")[0].strip().lower()
    return bool(streamed) or media in STREAM_TYPES


def apply(row: tuple[Any, ...], policy: Policy | None) -> tuple[Any, ...]:
    """``row`` (``RECORD_COLUMNS``) with :data:`MASKED` columns masked by ``policy``; of a
    streamed record, the :data:`WHOLE_WHEN_STREAMED` columns replaced by the mask."""
    if policy is None:
        return row
    if row[RECORD_COLUMNS.index("key_id")] is not None or not policy.covers(row[STREAM]):
        return row
    streamed = row[RECORD_COLUMNS.index("streamed")]
    content_type = row[RECORD_COLUMNS.index("response_content_type")]
    out = list(row)
    for name in MASKED:
        i = RECORD_COLUMNS.index(name)
        v = out[i]
        if v is None:
            continue
        if name in WHOLE_WHEN_STREAMED:
            out[i] = policy.mask_response(bytes(v), streamed, content_type)
        elif isinstance(v, str):
            out[i] = policy.mask_bytes(v.encode("utf-8")).decode("utf-8", "replace")
        else:
            out[i] = policy.mask_bytes(bytes(v))
    return tuple(out)
