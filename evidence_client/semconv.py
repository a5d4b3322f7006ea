"""What a capture can tell a trace, in the words of the OpenTelemetry GenAI semantic
conventions. Pure: bytes in, attribute dicts out; no OpenTelemetry import.

The span a call runs in (:mod:`~evidence_client.otel`) gets these attributes, read from the
very bytes the capture records: the request side through :mod:`~evidence_client.adapters`
(provider, wire format, model, params, seed, temperature, top_p), the response side here
(response id, finish reasons, token usage), the answering model through the contract's parser.
Content (messages, instructions, output text) is never among them.

    wire format           gen_ai.operation.name   gen_ai.provider.name
    openai.chat           chat                    openai, azure.ai.openai (by host)
    openai.responses      chat                    openai, azure.ai.openai
    anthropic.messages    chat                    anthropic
    anything else         (no GenAI attributes: the span only carries the evidence ones)

A server that speaks a provider's wire format at another host (an OpenAI-compatible server)
is named after the API it speaks, as the providers' own SDK instrumentations name it.
"""

from __future__ import annotations

import json
from typing import Any, Iterator
from urllib.parse import urlsplit

from evidence_contract.outputs import json_object

from . import adapters

__all__ = ["INT64_MAX", "OPERATION", "PROVIDERS", "request_attributes", "response_attributes",
           "span_name"]

OPERATION = {adapters.OPENAI_CHAT: "chat", adapters.OPENAI_RESPONSES: "chat",
             adapters.ANTHROPIC_MESSAGES: "chat"}
"""``gen_ai.operation.name`` per wire format."""

PROVIDERS = {"openai": "openai", "azure-openai": "azure.ai.openai", "anthropic": "anthropic",
             "openai-compatible": "openai", "anthropic-compatible": "anthropic"}
"""``gen_ai.provider.name`` per provider name of the record (``adapters.detect``)."""

INT64_MAX = 2**63 - 1
_MAX_TOKENS_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > INT64_MAX:
        return None
    return value


def _put(attrs: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        attrs[key] = value


def _server(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    out: dict[str, Any] = {}
    _put(out, "server.address", parts.hostname)
    _put(out, "server.port", port)
    return out


def request_attributes(route: adapters.Route, url: str, body: bytes) -> dict[str, Any]:
    """The attributes known before the call is sent: operation, provider, request settings,
    server; only ``server.*`` for a request in no wire format we know."""
    attrs = _server(url)
    operation = OPERATION.get(route.kind) if route.kind else None
    if operation is None:
        return attrs
    req = adapters.parse_request(route.kind, body)
    attrs["gen_ai.operation.name"] = operation
    _put(attrs, "gen_ai.provider.name", PROVIDERS.get(route.provider))
    _put(attrs, "gen_ai.request.model", req.model_id)
    _put(attrs, "gen_ai.request.seed", _int(int(req.seed)) if req.seed is not None else None)
    _put(attrs, "gen_ai.request.temperature", req.temperature)
    _put(attrs, "gen_ai.request.top_p", req.top_p)
    params = json.loads(req.params) if req.params else {}  # the prompt is not in params
    max_tokens = next((v for k in _MAX_TOKENS_KEYS if (v := _int(params.get(k))) is not None),
                      None)
    _put(attrs, "gen_ai.request.max_tokens", max_tokens)
    if isinstance(params.get("stream"), bool):
        attrs["gen_ai.request.stream"] = params["stream"]
    n = _int(params.get("n"))
    if n is not None and n != 1:  # the conventions: set it when it is not 1
        attrs["gen_ai.request.choice.count"] = n
    return attrs


def span_name(attrs: dict[str, Any]) -> str:
    """``{gen_ai.operation.name} {gen_ai.request.model}``, or what of it is known."""
    operation = attrs.get("gen_ai.operation.name")
    if operation is None:
        return "evidence capture"
    model = attrs.get("gen_ai.request.model")
    return f"{operation} {model}" if model else str(operation)


# -- the response side ---------------------------------------------------------------------

def _events(body: bytes) -> Iterator[dict[str, Any]]:
    for _, payload in adapters.parse_sse(body):
        try:
            obj = json.loads(payload)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def _usage(usage: object, inp: str, out: str) -> dict[str, int]:
    """Token counts of a provider's ``usage`` object, under the conventions' names."""
    if not isinstance(usage, dict):
        return {}
    counts = {"gen_ai.usage.input_tokens": _int(usage.get(inp)),
              "gen_ai.usage.output_tokens": _int(usage.get(out))}
    for details, key, name in (
            ("prompt_tokens_details", "cached_tokens", "gen_ai.usage.cache_read.input_tokens"),
            ("input_tokens_details", "cached_tokens", "gen_ai.usage.cache_read.input_tokens"),
            ("completion_tokens_details", "reasoning_tokens",
             "gen_ai.usage.reasoning.output_tokens"),
            ("output_tokens_details", "reasoning_tokens", "gen_ai.usage.reasoning.output_tokens")):
        part = usage.get(details)
        if isinstance(part, dict):
            counts[name] = _int(part.get(key))
    for key, name in (("cache_read_input_tokens", "gen_ai.usage.cache_read.input_tokens"),
                      ("cache_creation_input_tokens",
                       "gen_ai.usage.cache_creation.input_tokens")):  # anthropic's names
        if _int(usage.get(key)) is not None:
            counts[name] = usage[key]
    return {k: v for k, v in counts.items() if v is not None}


def _chat(objs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    reasons: dict[int, str] = {}
    for obj in objs:
        if isinstance(obj.get("id"), str):
            out.setdefault("gen_ai.response.id", obj["id"])
        for choice in obj.get("choices") or ():
            if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str):
                reasons[_int(choice.get("index")) or 0] = choice["finish_reason"]
        out.update(_usage(obj.get("usage"), "prompt_tokens", "completion_tokens"))
    if reasons:
        out["gen_ai.response.finish_reasons"] = tuple(reasons[i] for i in sorted(reasons))
    return out


_ANTHROPIC_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                      "tool_use": "tool_call"}
_RESPONSES_REASONS = {"completed": "stop", "failed": "error", "cancelled": "error"}
_INCOMPLETE_REASONS = {"max_output_tokens": "length"}
"""Finish reasons in the conventions' words (``stop``, ``length``, ``tool_call``, ``error``),
as the official GenAI instrumentations normalise them; an unknown reason is kept as sent."""


def _responses_reason(response: dict[str, Any]) -> str | None:
    status = response.get("status")
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return _INCOMPLETE_REASONS.get(reason, reason) if isinstance(reason, str) else status
    return _RESPONSES_REASONS.get(status) if isinstance(status, str) else None


def _responses(objs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for obj in objs:
        response = obj.get("response") if isinstance(obj.get("response"), dict) else obj
        if isinstance(response.get("id"), str):
            out["gen_ai.response.id"] = response["id"]
        reason = _responses_reason(response)
        if reason is not None:
            out["gen_ai.response.finish_reasons"] = (reason,)
        out.update(_usage(response.get("usage"), "input_tokens", "output_tokens"))
    return out


def _anthropic(objs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    usage: dict[str, Any] = {}
    for obj in objs:
        message = obj.get("message") if isinstance(obj.get("message"), dict) else obj
        if isinstance(message.get("id"), str):
            out["gen_ai.response.id"] = message["id"]
        delta = obj.get("delta") if isinstance(obj.get("delta"), dict) else message
        reason = delta.get("stop_reason")
        if isinstance(reason, str):
            out["gen_ai.response.finish_reasons"] = (_ANTHROPIC_REASONS.get(reason, reason),)
        for source in (message.get("usage"), obj.get("usage")):
            if isinstance(source, dict):
                usage.update(source)  # message_delta's counts are the final ones
    out.update(_usage(usage, "input_tokens", "output_tokens"))
    return out


_PARSERS = {adapters.OPENAI_CHAT: _chat, adapters.OPENAI_RESPONSES: _responses,
            adapters.ANTHROPIC_MESSAGES: _anthropic}


def response_attributes(kind: str | None, body: bytes | None, streamed: bool) -> dict[str, Any]:
    """Response id and model, finish reasons and token usage of a success response body
    (whole or SSE); empty for a format we do not know or a body we cannot read."""
    parse = _PARSERS.get(kind) if kind else None
    if parse is None or not body:
        return {}
    if streamed:
        objs = list(_events(body))
    else:
        obj = json_object(body)
        objs = [obj] if obj is not None else []
    attrs = parse(objs)
    model = adapters.parse_response(kind, body, streamed).response_model
    _put(attrs, "gen_ai.response.model", model)
    return attrs
