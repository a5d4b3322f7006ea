"""What a GenAI span or inference event says about one call: :class:`MappedCall`.

Frozen dataclasses, no behaviour beyond reading: the dialect mappers build them, the receiver
turns them into captures. Every value is what the telemetry carried; nothing is inferred.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Source = Literal["span", "log_event"]
Outcome = Literal["ok", "error"]


@dataclass(frozen=True)
class Content:
    """Messages (or system instructions) as a span or event carried them.

    ``value`` is the structured content (parsed JSON, or the AnyValue tree of a log event's
    attribute). ``raw`` is the exact bytes it came from: the UTF-8 of a string attribute's
    value, or the deterministic protobuf serialization of a structured AnyValue; it is None
    when ``rebuilt``: the dialect spreads the content over several attributes or events
    (OpenLLMetry's flat ``gen_ai.prompt.{i}.*``, OpenInference's ``llm.input_messages.{i}.*``,
    one log record per message), so no single value holds it, or the messages are one field
    inside a larger attribute value. ``attributes`` names where it came from (attribute names,
    or event names for per-message events).
    """

    value: Any
    attributes: tuple[str, ...]
    raw: bytes | None
    rebuilt: bool


@dataclass(frozen=True)
class Params:
    """Request parameters as carried; ``seed`` is the decimal text of the value, never a float."""

    seed: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: float | None = None
    max_tokens: int | None = None
    stream: bool | None = None
    choice_count: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    stop_sequences: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Usage:
    """Token counts as carried (None: not reported)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    reasoning_output_tokens: int | None = None


@dataclass(frozen=True)
class BijotelClaims:
    """BIJOTEL's ``bijotel.replay.*`` attributes, kept as claims (recomputed in otlp.bijotel)."""

    prompt_hash: str | None
    output_hash: str | None
    seed: str | None
    temperature: float | None
    top_p: float | None
    model_version: str | None
    deterministic: bool | None


@dataclass(frozen=True)
class MappedCall:
    """One GenAI inference call as a span or a ``gen_ai.client.inference.operation.details``
    event described it, labelled with the dialect and the instrumentation that wrote it.

    ``span_bytes`` is ``SerializeToString(deterministic=True)`` of the Span (or, for a log
    event, the LogRecord) message as received: the digest of the telemetry's own bytes.
    ``output_text`` is the concatenated text parts of the first output message (the first
    choice), the text the gateway's ``output_digest`` and BIJOTEL's ``output_hash`` hash.
    """

    dialect: str
    scope_name: str
    scope_version: str
    source: Source
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    start_time_ns: int
    end_time_ns: int
    status: Outcome
    error_type: str | None
    operation: str | None
    provider: str | None
    server_address: str | None
    server_port: int | None
    request_model: str | None
    response_model: str | None
    response_id: str | None
    finish_reasons: tuple[str, ...]
    params: Params
    usage: Usage
    input_messages: Content | None
    system_instructions: Content | None
    output_messages: Content | None
    output_text: str | None
    evidence_event_id: str | None
    bijotel: BijotelClaims | None
    span_bytes: bytes
