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

__all__ = ["MASKED", "Policy", "RedactionError", "apply", "from_env", "load", "parse"]

MASKED = ("request_bytes", "response_bytes", "error_bytes", "input_bytes", "prompt_bytes",
          "params")
"""The ``records`` columns a policy masks (what the API serves as bodies)."""

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

        return parse(yaml.safe_load(text))
    try:
        return parse(json.loads(text))
    except json.JSONDecodeError as e:
        raise RedactionError(f"{path}: not JSON: {e}") from None


def from_env(env: Mapping[str, str]) -> Policy | None:
    path = env.get("EVIDENCE_REDACTION_FILE", "")
    return load(path) if path else None


def apply(row: tuple[Any, ...], policy: Policy | None) -> tuple[Any, ...]:
    """``row`` (``RECORD_COLUMNS``) with :data:`MASKED` columns masked by ``policy``."""
    if policy is None:
        return row
    from .rows import RECORD_COLUMNS, STREAM

    if row[RECORD_COLUMNS.index("key_id")] is not None or not policy.covers(row[STREAM]):
        return row
    out = list(row)
    for name in MASKED:
        i = RECORD_COLUMNS.index(name)
        v = out[i]
        if v is None:
            continue
        if isinstance(v, str):
            out[i] = policy.mask_bytes(v.encode("utf-8")).decode("utf-8", "replace")
        else:
            out[i] = policy.mask_bytes(bytes(v))
    return tuple(out)
