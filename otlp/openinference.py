"""OpenInference's ``llm.*`` spans (openinference-instrumentation-openai 0.1.x) as call fields.

Names from openinference-semantic-conventions: ``llm.input_messages.{i}.message.role`` /
``.content`` / ``.contents.{j}.message_content.{type,text}``, the same under
``llm.output_messages``; ``input.value`` / ``output.value`` (the request and response JSON when
``input.mime_type`` is application/json); ``llm.invocation_parameters`` (the request's
parameters as JSON); ``llm.model_name`` (the response's model), ``llm.provider`` /
``llm.system``, ``llm.token_count.*``, ``llm.finish_reason``. OpenInference names no
operation: the span kind ``LLM`` is the only sign of an inference call.
"""

from __future__ import annotations

import json
import re
from typing import Any

from otlp import messages
from otlp.attributes import Attributes
from otlp.model import Content, Params, Usage

_MESSAGE = re.compile(r"^llm\.(input|output)_messages\.(\d+)\.message\.(.+)$")
_CONTENTS = re.compile(r"^contents\.(\d+)\.message_content\.(\w+)$")
REDACTED = "__REDACTED__"  # what a hidden input or output is replaced with (TraceConfig)


def fields(attrs: Attributes) -> dict[str, Any]:
    """The MappedCall fields an OpenInference LLM span gives (all but the span's own)."""
    params_text = attrs.str("llm.invocation_parameters")
    params = _json(params_text)
    request = _json(attrs.str("input.value")) if _is_json(attrs, "input") else None
    response = _json(attrs.str("output.value")) if _is_json(attrs, "output") else None
    inputs, outputs = _flat_messages(attrs)
    if inputs is None and isinstance(request, dict):
        inputs = messages.rebuilt(request.get("messages"), ("input.value",))
    if outputs is None and isinstance(response, dict):
        choice = next(iter(response.get("choices") or []), None)
        message = choice.get("message") if isinstance(choice, dict) else None
        outputs = messages.rebuilt([message] if message else None, ("output.value",))
    finish = attrs.str("llm.finish_reason")
    return dict(
        operation=None,
        provider=attrs.str("llm.provider") or attrs.str("llm.system"),
        server_address=None, server_port=None,
        request_model=_str(params, "model"),
        response_model=attrs.str("llm.model_name"),
        response_id=_str(response, "id"),
        finish_reasons=(finish,) if finish else (),
        params=Params(
            seed=_seed_text(params_text),
            temperature=_float(params, "temperature"),
            top_p=_float(params, "top_p"),
            max_tokens=_int(params, "max_completion_tokens") or _int(params, "max_tokens"),
            stream=params.get("stream") if isinstance(params, dict) and isinstance(
                params.get("stream"), bool) else None,
            choice_count=_int(params, "n"),
            frequency_penalty=_float(params, "frequency_penalty"),
            presence_penalty=_float(params, "presence_penalty"),
        ),
        usage=Usage(
            input_tokens=attrs.int("llm.token_count.prompt"),
            output_tokens=attrs.int("llm.token_count.completion"),
            total_tokens=attrs.int("llm.token_count.total"),
            cache_read_input_tokens=attrs.int("llm.token_count.prompt_details.cache_read"),
            cache_creation_input_tokens=attrs.int("llm.token_count.prompt_details.cache_write"),
            reasoning_output_tokens=attrs.int("llm.token_count.completion_details.reasoning"),
        ),
        input_messages=inputs, system_instructions=None, output_messages=outputs,
        output_text=messages.output_text(outputs),
    )


def _flat_messages(attrs: Attributes) -> tuple[Content | None, Content | None]:
    found: dict[str, dict[int, dict]] = {"input": {}, "output": {}}
    keys: dict[str, list[str]] = {"input": [], "output": []}
    for key in attrs:
        if not (m := _MESSAGE.match(key)):
            continue
        side, index, field = m.group(1), int(m.group(2)), m.group(3)
        message = found[side].setdefault(index, {})
        if c := _CONTENTS.match(field):
            parts = message.setdefault("content", []) if isinstance(
                message.get("content", []), list) else []
            while len(parts) <= int(c.group(1)):
                parts.append({})
            parts[int(c.group(1))][c.group(2)] = attrs.value(key)
        elif field in ("role", "content", "name", "tool_call_id"):
            message[field] = attrs.value(key)
        else:
            continue
        keys[side].append(key)
    as_list = {s: [found[s][i] for i in sorted(found[s])] for s in found}
    return (messages.rebuilt(as_list["input"], tuple(sorted(keys["input"]))),
            messages.rebuilt(as_list["output"], tuple(sorted(keys["output"]))))


def _is_json(attrs: Attributes, side: str) -> bool:
    value = attrs.str(f"{side}.value")
    return value is not None and value != REDACTED and (
        attrs.str(f"{side}.mime_type") == "application/json")


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _seed_text(params_text: str | None) -> str | None:
    """The seed's decimal text as the parameters' JSON carries it (never through a float)."""
    if params_text is None:
        return None
    try:
        params = json.loads(params_text, parse_int=str, parse_float=str)
    except ValueError:
        return None
    seed = params.get("seed") if isinstance(params, dict) else None
    return seed if isinstance(seed, str) else None


def _str(obj: Any, key: str) -> str | None:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, str) else None


def _float(obj: Any, key: str) -> float | None:
    value = obj.get(key) if isinstance(obj, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(obj: Any, key: str) -> int | None:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None
