"""Provider adapters: what a capture can say about a call, read from its bytes. Pure, no I/O.

The request side lives here: which provider and API version a request goes to, and its model,
params and replay context. The response side — the wire formats (``openai.chat``,
``openai.responses``, ``anthropic.messages``), SSE parsing, and above all the output text that
``output_digest`` covers — is part of the record contract (``evidence_contract.outputs``), so
the writer, the auditor and the API use the very same definition; it is re-exported here.

Anything else is kind ``None``: the capture is still complete, only the derived fields are null.

``params`` is the JSON request object minus the prompt content, which the record already keeps
verbatim (or as a hash) in ``request_bytes``; dropped keys per kind are in ``PROMPT_KEYS``.
Every other key is kept, ``model`` and ``stream`` included, in the order sent.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from evidence_contract import seed_text
from evidence_contract.outputs import (
    ANTHROPIC_MESSAGES,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    ResponseFacts,
    json_object,
    parse_response,
    parse_sse,
    stream_complete,
    wire_format,
)

__all__ = [
    "ANTHROPIC_MESSAGES",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "PROMPT_KEYS",
    "RequestFacts",
    "ResponseFacts",
    "Route",
    "detect",
    "parse_request",
    "parse_response",
    "parse_sse",
    "stream_complete",
]


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
_COMPATIBLE = {OPENAI_CHAT: "openai-compatible", OPENAI_RESPONSES: "openai-compatible",
               ANTHROPIC_MESSAGES: "anthropic-compatible"}
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


def detect(host: str, path: str, headers: Mapping[str, str] | None = None,
           query: Mapping[str, str] | None = None) -> Route:
    """Name the provider and wire format of a request from its host, path and headers.

    ``headers`` must have lowercase names. The API version is the ``anthropic-version``
    header, else an ``api-version`` query parameter (Azure), else a ``/v1``-style path segment.
    """
    version = (headers or {}).get("anthropic-version") or (query or {}).get("api-version")
    return _route(host, path, version)


@functools.lru_cache(maxsize=256)
def _route(host: str, path: str, version: str | None) -> Route:
    """:func:`detect` once its headers are read: a process calls a handful of endpoints, so
    each is worked out once (a capture's detect took ~7 µs of the gateway's encode)."""
    host = host.lower()
    path = path.rstrip("/")
    kind = wire_format(path)
    compatible = _COMPATIBLE.get(kind, "unknown") if kind else "unknown"
    provider = next((name for suffix, name in _KNOWN_HOSTS if host.endswith(suffix)), compatible)
    if version is None:
        m = _PATH_VERSION.search(path)
        version = m.group(1) if m else None
    return Route(provider, kind, version)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


_PARAMS_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
"""``json.dumps(params, ensure_ascii=False, separators=(",", ":"))``, its encoder made once
(``json.dumps`` makes one a call when given arguments: ~0.5 µs of a capture's encode)."""


def parse_request(kind: str | None, body: bytes | None) -> RequestFacts:
    """Model, params (JSON text) and replay context of a request body; nulls when unreadable."""
    obj = json_object(body)
    if obj is None:
        return RequestFacts()
    model = obj.get("model")
    drop = PROMPT_KEYS.get(kind, PROMPT_KEYS[None])
    params = {k: v for k, v in obj.items() if k not in drop}
    return RequestFacts(
        model_id=model if isinstance(model, str) else None,
        params=_PARAMS_JSON(params),
        seed=seed_text(obj.get("seed")),  # decimal text: a seed >= 2**63 is kept, not dropped
        temperature=_number(obj.get("temperature")),
        top_p=_number(obj.get("top_p")),
    )
