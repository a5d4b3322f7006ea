"""GenAI spans and inference events to :class:`otlp.model.MappedCall`, one dialect at a time.

Dialects (the attribute names read from each package's source):

    gen_ai         the GenAI conventions since v1.37 (``gen_ai.provider.name``; content as
                   ``gen_ai.input.messages`` / ``gen_ai.output.messages`` /
                   ``gen_ai.system_instructions`` on the span or the
                   ``gen_ai.client.inference.operation.details`` event):
                   opentelemetry-util-genai 1.3b0 with genai-openai / genai-anthropic, and
                   openai-v2 under ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``
    gen_ai_1_36    the conventions up to v1.36 (``gen_ai.system``; content in per-message log
                   events ``gen_ai.{system,user,assistant,tool}.message`` / ``gen_ai.choice``):
                   openai-v2 2.4b0 by default
    openllmetry    traceloop's opentelemetry-instrumentation-openai: 0.62.x writes the
                   conventions' ``gen_ai.input.messages`` JSON (or, with use_attributes=False,
                   the legacy per-message events); earlier releases the flat
                   ``gen_ai.prompt.{i}.*`` / ``gen_ai.completion.{i}.*``
    openinference  ``llm.*``, ``input.value`` / ``output.value``,
                   ``llm.input_messages.{i}.message.*`` (see otlp.openinference)
    logfire        Logfire 5.x: the conventions' attributes (finish reasons as a JSON string),
                   or in its first format ``request_data`` / ``response_data``
    bijotel        BIJOTEL's ``trace_genai`` spans (``bijotel.decorators``): input messages in
                   the OpenAI shape, ``gen_ai.request.system``; its ``bijotel.replay.*`` claims
                   are read on a span of any dialect

Only inference calls map (operations chat, text_completion, generate_content; OpenInference's
LLM span kind); embeddings, tools and agents give None.
"""

from __future__ import annotations

import re
from dataclasses import replace

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from otlp import messages, openinference
from otlp.attributes import Attributes
from otlp.model import BijotelClaims, Content, MappedCall, Params, Usage

GENAI = "gen_ai"
GENAI_LEGACY = "gen_ai_1_36"
OPENLLMETRY = "openllmetry"
OPENINFERENCE = "openinference"
LOGFIRE = "logfire"
BIJOTEL = "bijotel"

DETAILS_EVENT = "gen_ai.client.inference.operation.details"
INFERENCE_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
# The per-message events of the conventions up to v1.36 (openai-v2's default, OpenLLMetry's
# use_attributes=False), keyed by event name: the role they carry.
LEGACY_MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
LEGACY_CHOICE_EVENT = "gen_ai.choice"

_FLAT = re.compile(r"^gen_ai\.(prompt|completion)\.(\d+)\.(\w+)$")


def dialect_of(scope_name: str, attrs: Attributes) -> str | None:
    """The dialect of a span or event from its scope and attributes; None: not GenAI."""
    if scope_name.startswith("bijotel"):
        return BIJOTEL
    if scope_name.startswith("logfire"):
        return LOGFIRE
    if scope_name.startswith("openinference") or "openinference.span.kind" in attrs:
        return OPENINFERENCE
    if scope_name == "opentelemetry.instrumentation.openai" or scope_name.startswith(
            "opentelemetry.instrumentation.openai.") or any(_FLAT.match(k) for k in attrs):
        return OPENLLMETRY
    if "gen_ai.provider.name" in attrs:
        return GENAI
    if "gen_ai.system" in attrs:
        return GENAI_LEGACY
    return None


def _is_inference(dialect: str, attrs: Attributes) -> bool:
    if dialect == OPENINFERENCE:
        return attrs.str("openinference.span.kind") == "LLM"
    operation = attrs.str("gen_ai.operation.name")
    if operation is None:  # OpenLLMetry before the conventions' operation name
        return attrs.str("llm.request.type") in ("chat", "completion")
    return operation in INFERENCE_OPERATIONS


def map_span(span: Span, scope: InstrumentationScope) -> MappedCall | None:
    """The call a span describes, or None when it is not a GenAI inference span."""
    attrs = Attributes(span.attributes)
    dialect = dialect_of(scope.name, attrs)
    if dialect is None or not _is_inference(dialect, attrs):
        return None
    failed = span.status.code == Status.STATUS_CODE_ERROR or "error.type" in attrs
    error_type = attrs.str("error.type") or (
        (span.status.message or "error") if failed else None)
    base = dict(
        dialect=dialect, scope_name=scope.name, scope_version=scope.version, source="span",
        trace_id=span.trace_id, span_id=span.span_id, parent_span_id=span.parent_span_id,
        start_time_ns=span.start_time_unix_nano, end_time_ns=span.end_time_unix_nano,
        status="error" if failed else "ok", error_type=error_type,
        evidence_event_id=attrs.str("evidence.event_id"), bijotel=bijotel_claims(attrs),
        span_bytes=span.SerializeToString(deterministic=True),
    )
    if dialect == OPENINFERENCE:
        return MappedCall(**base, **openinference.fields(attrs))
    return MappedCall(**base, **_semconv_fields(dialect, attrs))


def map_log_event(record: LogRecord, scope: InstrumentationScope) -> MappedCall | None:
    """The call a ``gen_ai.client.inference.operation.details`` event describes, or None for
    any other log record."""
    attrs = Attributes(record.attributes)
    name = record.event_name or attrs.str("event.name")
    if name != DETAILS_EVENT:
        return None
    dialect = dialect_of(scope.name, attrs) or GENAI
    if not _is_inference(dialect, attrs):
        return None
    at = record.time_unix_nano or record.observed_time_unix_nano
    return MappedCall(
        dialect=dialect, scope_name=scope.name, scope_version=scope.version,
        source="log_event", trace_id=record.trace_id, span_id=record.span_id,
        parent_span_id=b"", start_time_ns=at, end_time_ns=at,
        status="error" if "error.type" in attrs else "ok", error_type=attrs.str("error.type"),
        evidence_event_id=attrs.str("evidence.event_id"), bijotel=bijotel_claims(attrs),
        span_bytes=record.SerializeToString(deterministic=True),
        **_semconv_fields(dialect, attrs),
    )


def _semconv_fields(dialect: str, attrs: Attributes) -> dict:
    inputs = messages.from_attribute(attrs, "gen_ai.input.messages")
    outputs = messages.from_attribute(attrs, "gen_ai.output.messages")
    system = messages.from_attribute(attrs, "gen_ai.system_instructions")
    if dialect == BIJOTEL and system is None:
        system = messages.from_attribute(attrs, "gen_ai.request.system")
    if dialect == OPENLLMETRY and inputs is None and outputs is None:
        inputs, outputs = _flat_messages(attrs)
    if dialect == LOGFIRE and inputs is None and outputs is None:
        inputs, outputs = _logfire_v1_messages(attrs)
    return dict(
        operation=attrs.str("gen_ai.operation.name") or attrs.str("llm.request.type"),
        provider=attrs.str("gen_ai.provider.name") or attrs.str("gen_ai.system"),
        server_address=attrs.str("server.address"), server_port=attrs.int("server.port"),
        request_model=attrs.str("gen_ai.request.model"),
        response_model=attrs.str("gen_ai.response.model"),
        response_id=attrs.str("gen_ai.response.id"),
        finish_reasons=attrs.strings("gen_ai.response.finish_reasons") or (),
        params=Params(
            seed=attrs.decimal("gen_ai.request.seed"),
            temperature=attrs.float("gen_ai.request.temperature"),
            top_p=attrs.float("gen_ai.request.top_p"),
            top_k=attrs.float("gen_ai.request.top_k"),
            max_tokens=attrs.int("gen_ai.request.max_tokens"),
            stream=_stream(attrs),
            choice_count=attrs.int("gen_ai.request.choice.count"),
            frequency_penalty=attrs.float("gen_ai.request.frequency_penalty"),
            presence_penalty=attrs.float("gen_ai.request.presence_penalty"),
            stop_sequences=attrs.strings("gen_ai.request.stop_sequences"),
        ),
        usage=Usage(
            input_tokens=attrs.int("gen_ai.usage.input_tokens"),
            output_tokens=attrs.int("gen_ai.usage.output_tokens"),
            total_tokens=attrs.int("gen_ai.usage.total_tokens"),
            cache_read_input_tokens=attrs.int("gen_ai.usage.cache_read.input_tokens"),
            cache_creation_input_tokens=attrs.int("gen_ai.usage.cache_creation.input_tokens"),
            reasoning_output_tokens=attrs.int("gen_ai.usage.reasoning.output_tokens"),
        ),
        input_messages=inputs, system_instructions=system, output_messages=outputs,
        output_text=messages.output_text(outputs),
    )


def _stream(attrs: Attributes) -> bool | None:
    for key in ("gen_ai.request.stream", "gen_ai.is_streaming"):  # the latter: OpenLLMetry
        if (value := attrs.bool(key)) is not None:
            return value
    return None


def _flat_messages(attrs: Attributes) -> tuple[Content | None, Content | None]:
    """OpenLLMetry's flat ``gen_ai.prompt.{i}.{role,content}`` and
    ``gen_ai.completion.{i}.{role,content,finish_reason}``, as OpenAI-shaped messages."""
    found: dict[str, dict[int, dict]] = {"prompt": {}, "completion": {}}
    keys: dict[str, list[str]] = {"prompt": [], "completion": []}
    for key in attrs:
        if m := _FLAT.match(key):
            kind, index, field = m.group(1), int(m.group(2)), m.group(3)
            found[kind].setdefault(index, {})[field] = attrs.value(key)
            keys[kind].append(key)
    as_list = {k: [found[k][i] for i in sorted(found[k])] for k in found}
    return (messages.rebuilt(as_list["prompt"], tuple(sorted(keys["prompt"]))),
            messages.rebuilt(as_list["completion"], tuple(sorted(keys["completion"]))))


def _logfire_v1_messages(attrs: Attributes) -> tuple[Content | None, Content | None]:
    """Logfire's first format: the request's messages inside ``request_data``, the first
    choice's message inside ``response_data``."""
    request = messages.from_attribute(attrs, "request_data")
    response = messages.from_attribute(attrs, "response_data")
    inputs = outputs = None
    if request is not None and isinstance(request.value, dict):
        inputs = messages.rebuilt(request.value.get("messages"), ("request_data",))
    if response is not None and isinstance(response.value, dict):
        message = response.value.get("message")
        outputs = messages.rebuilt([message] if message else None, ("response_data",))
    return inputs, outputs


def bijotel_claims(attrs: Attributes) -> BijotelClaims | None:
    """BIJOTEL's ``bijotel.replay.*`` attributes, when the span carries any."""
    if not any(key.startswith("bijotel.replay.") for key in attrs):
        return None
    return BijotelClaims(
        prompt_hash=attrs.str("bijotel.replay.prompt_hash"),
        output_hash=attrs.str("bijotel.replay.output_hash"),
        seed=attrs.decimal("bijotel.replay.seed"),
        temperature=attrs.float("bijotel.replay.temperature"),
        top_p=attrs.float("bijotel.replay.top_p"),
        model_version=attrs.str("bijotel.replay.model_version"),
        deterministic=attrs.bool("bijotel.replay.deterministic"),
    )


def with_message_events(call: MappedCall, records: list[LogRecord]) -> MappedCall:
    """A span's call with the content of its per-message events (the conventions up to v1.36:
    ``gen_ai.user.message``... and ``gen_ai.choice``, each a log record on the span's trace and
    span id), when the span itself carries none. The messages are rebuilt: one per record."""
    inputs: list[dict] = []
    choices: list[tuple[int, dict]] = []
    names: list[str] = []
    for record in records:
        if record.trace_id != call.trace_id or record.span_id != call.span_id:
            continue
        attrs = Attributes(record.attributes)
        name = record.event_name or attrs.str("event.name") or ""
        body = messages.any_body(record.body)
        if name in LEGACY_MESSAGE_EVENTS:
            inputs.append({"role": LEGACY_MESSAGE_EVENTS[name], **body})
        elif name == LEGACY_CHOICE_EVENT:
            message = body.get("message") if isinstance(body.get("message"), dict) else {}
            choices.append((body.get("index", 0), {
                "role": message.get("role", "assistant"), **{
                    k: v for k, v in message.items() if k != "role"},
                "finish_reason": body.get("finish_reason")}))
        else:
            continue
        names.append(name)
    outputs = [m for _, m in sorted(choices, key=lambda c: c[0])]
    sources = tuple(dict.fromkeys(names))
    in_content = call.input_messages or messages.rebuilt(
        [m for m in inputs if "content" in m or "tool_calls" in m], sources)
    out_content = call.output_messages or messages.rebuilt(
        [m for m in outputs if "content" in m or "tool_calls" in m], sources)
    return replace(call, input_messages=in_content, output_messages=out_content,
                   output_text=messages.output_text(out_content))


def calls_in_traces(request: ExportTraceServiceRequest) -> list[MappedCall]:
    """Every GenAI inference call among a trace export's spans, in the order sent."""
    return [call
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
            if (call := map_span(span, scope_spans.scope)) is not None]


def calls_in_logs(request: ExportLogsServiceRequest) -> list[MappedCall]:
    """Every ``gen_ai.client.inference.operation.details`` call among a logs export's records."""
    return [call
            for resource_logs in request.resource_logs
            for scope_logs in resource_logs.scope_logs
            for record in scope_logs.log_records
            if (call := map_log_event(record, scope_logs.scope)) is not None]


def log_records(request: ExportLogsServiceRequest) -> list[LogRecord]:
    """All log records of a logs export (for :func:`with_message_events`)."""
    return [record for resource_logs in request.resource_logs
            for scope_logs in resource_logs.scope_logs for record in scope_logs.log_records]
