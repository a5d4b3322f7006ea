"""Spans out: every captured call is findable from its trace, and its trace from the capture.

Needs only ``opentelemetry-api``. An application that does not trace (no SDK, or the API's
no-op provider) gets nothing but a check per call: no span, no parsing, no attribute.

When the application traces, the capture transport asks :meth:`Spans.begin` for the span of
each call, before the request is sent:

1. **join** the current span when it is recording and is a GenAI inference span that no
   capture has joined yet (:func:`is_genai_span`): an instrumentation (the official
   ``opentelemetry-instrumentation-genai-*``, OpenLLMetry, OpenInference, Logfire...) already
   describes the call, so only the evidence attributes are added to it;
2. otherwise **start** a CLIENT span of our own, a child of the current span, named and
   described by the GenAI semantic conventions from the request bytes
   (:mod:`~evidence_client.semconv`); it is the current span while the request is sent, and
   ends when the capture finishes, with the response's attributes (and ``error.type`` when
   the call failed).

A second capture in a span already joined (an SDK retry inside one instrumented call) starts
its own child span, so each capture has a span of its own to name it.

Evidence attributes (never any content):

    evidence.event_id            the capture's event id (the record's, fixed at begin)
    evidence.stream              the stream it is recorded in
    evidence.content_key         the content key, lowercase hex  (content_policy "plain")
    evidence.response_digest     the response digest, lowercase hex, when there is a response
                                 (content_policy "plain")
    gen_ai.input.messages_ref    the record, where its verbatim request is (request policy
                                 VALUE only: under HASH_ONLY the record does not hold it)
    gen_ai.output.messages_ref   the record, where its verbatim response is (when one came)

The two ``*_ref`` attributes follow the proposal for external content references
(open-telemetry/semantic-conventions-genai PR 490, not merged: experimental). Their value is
``<api_url>/events/<event_id>``, the evidence API's URL of the record (``Recorder(api_url=)``
or ``$EVIDENCE_API_URL``), or the reference ``/events/<event_id>`` relative to it when no URL
is configured. Under ``content_policy="encrypt"`` the record's digests are keyed commitments
made on the sender thread: a plain digest on a span would let whoever reads the trace confirm a
guessed prompt, and would outlive the subject's erasure, so neither digest goes on the span.

The trace id and span id of the span (joined or started) are put on the
:class:`~evidence_client.capture.Exchange` (``trace_id``, ``span_id``: 16 and 8 raw bytes)
when it is recording. Every failure here is the transport's to catch and count: telemetry
never fails or delays a call.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import version
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider, SpanKind
from opentelemetry.trace.status import Status, StatusCode

from evidence_contract import digests as plain_digests

from . import adapters, semconv
from .capture import VALUE, Exchange, outcome

__all__ = [
    "CONTENT_KEY",
    "EVENT_ID",
    "INFERENCE_OPERATIONS",
    "INPUT_MESSAGES_REF",
    "OUTPUT_MESSAGES_REF",
    "RESPONSE_DIGEST",
    "SCHEMA_URL",
    "STREAM",
    "CallSpan",
    "Spans",
    "is_genai_span",
]

EVENT_ID = "evidence.event_id"
STREAM = "evidence.stream"
CONTENT_KEY = "evidence.content_key"
RESPONSE_DIGEST = "evidence.response_digest"
INPUT_MESSAGES_REF = "gen_ai.input.messages_ref"    # proposed, not merged: experimental
OUTPUT_MESSAGES_REF = "gen_ai.output.messages_ref"  # proposed, not merged: experimental

SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
"""The semantic conventions version the spans follow (GenAI: status Development)."""

INFERENCE_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
"""``gen_ai.operation.name`` values of a model call: a span with another operation (an
agent, a tool, a workflow) may hold many calls, so a capture never joins it."""


def is_genai_span(span: Any) -> bool:
    """True if ``span`` describes one model call in some GenAI dialect.

    The API cannot read a span's attributes; the SDK's spans (and every SDK-compatible one)
    expose them as ``attributes``, a mapping. A span is a GenAI inference span if that mapping
    says so in one of the dialects in use:

    - ``gen_ai.operation.name`` is an inference operation (:data:`INFERENCE_OPERATIONS`): the
      official instrumentations, OpenLLMetry, Logfire, openai-v2;
    - ``openinference.span.kind`` is ``LLM`` (OpenInference);
    - ``llm.request.type`` is ``chat`` or ``completion`` (OpenLLMetry before it adopted the
      operation name).

    A span whose attributes cannot be read is never joined.
    """
    attrs = getattr(span, "attributes", None)
    if not isinstance(attrs, Mapping):
        return False
    operation = attrs.get("gen_ai.operation.name")
    if operation is not None:
        return operation in INFERENCE_OPERATIONS
    return (attrs.get("openinference.span.kind") == "LLM"
            or attrs.get("llm.request.type") in ("chat", "completion"))


def _joined(span: Any) -> bool:
    attrs = getattr(span, "attributes", None)
    return isinstance(attrs, Mapping) and EVENT_ID in attrs


def _error_type(ex: Exchange, error: BaseException | None) -> str | None:
    """``error.type`` of a finished call: the HTTP status of a provider error, else the
    exception's class when the call or its body failed."""
    if ex.status is not None and ex.status >= 400:
        return str(ex.status)
    if error is not None:
        return type(error).__qualname__
    return None


class CallSpan:
    """The span of one captured call: joined (the instrumentation ends it) or our own."""

    __slots__ = ("span", "own", "_spans", "_route")

    def __init__(self, span: Any, own: bool, spans: "Spans", route: adapters.Route) -> None:
        self.span, self.own, self._spans, self._route = span, own, spans, route

    def activate(self) -> object | None:
        """Make our own span the current one while the request is sent (an HTTP-level
        instrumentation then nests under it); returns the token for :meth:`deactivate`."""
        if not self.own:
            return None
        return otel_context.attach(trace.set_span_in_context(self.span))

    @staticmethod
    def deactivate(token: object | None) -> None:
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]

    def end(self, ex: Exchange, error: BaseException | None = None) -> None:
        """Add what the finished call ``ex`` tells (its response, its failure); end our own
        span at the call's end."""
        span, kind = self.span, self._route.kind
        _, response, _, _ = outcome(ex, kind)
        attrs: dict[str, Any] = {}
        if response is not None:
            attrs[OUTPUT_MESSAGES_REF] = self._spans.record_ref(ex)
            if self._spans.digests:
                attrs[RESPONSE_DIGEST] = plain_digests.response_digest(response).hex()
        if self.own:
            if ex.status is not None and ex.status < 400:
                attrs.update(semconv.response_attributes(kind, response, ex.streamed))
            failure = _error_type(ex, error)
            if failure is not None:
                attrs["error.type"] = failure
                span.set_status(Status(StatusCode.ERROR))
        span.set_attributes(attrs)
        if self.own:
            finished = ex.finished_at if ex.finished_at is not None else ex.started_at
            span.end(end_time=finished * 1000)  # µs -> ns


class Spans:
    """The spans of one Recorder's calls (or of a transport's, with the global provider).

    ``tracer_provider``: where spans go (default: the global one, as set by the
    application's SDK setup); ``api_url``: the evidence API's URL, for the record references;
    ``digests``: put the plain content key and response digest on spans (False under
    ``content_policy="encrypt"``). Construction does no I/O.
    """

    def __init__(self, tracer_provider: Any = None, *, api_url: str | None = None,
                 digests: bool = True) -> None:
        self._provider = tracer_provider
        self._tracer = trace.get_tracer("evidence_client", version("evidence-store-client"),
                                        tracer_provider, schema_url=SCHEMA_URL)
        self.api_url = api_url.rstrip("/") if api_url else ""
        self.digests = digests

    def _traces(self) -> bool:
        """Is there an SDK to record spans? (The no-op path parses nothing.)"""
        provider = self._provider if self._provider is not None else trace.get_tracer_provider()
        return not isinstance(provider, (ProxyTracerProvider, NoOpTracerProvider))

    def record_ref(self, ex: Exchange) -> str:
        """Where the record of ``ex`` is: its URL under the evidence API."""
        return f"{self.api_url}/events/{ex.event_id}"

    def _evidence(self, ex: Exchange) -> dict[str, Any]:
        attrs: dict[str, Any] = {EVENT_ID: ex.event_id, STREAM: ex.stream}
        if self.digests:
            attrs[CONTENT_KEY] = ex.content_key.hex()
        if ex.request_policy == VALUE:
            attrs[INPUT_MESSAGES_REF] = self.record_ref(ex)
        return attrs

    def begin(self, ex: Exchange) -> CallSpan | None:
        """The span of the call ``ex`` (its ``event_id`` set), joined or started; None when
        nothing records it. Sets ``ex.trace_id`` and ``ex.span_id``."""
        current = trace.get_current_span()
        join = current.is_recording() and is_genai_span(current) and not _joined(current)
        if not join and not self._traces():
            return None
        route = adapters.detect(ex.host, ex.path, ex.request_headers, ex.query)
        if join:
            span, own = current, False
        else:
            attrs = semconv.request_attributes(route, ex.url, ex.request_bytes)
            span = self._tracer.start_span(semconv.span_name(attrs), kind=SpanKind.CLIENT,
                                           attributes=attrs,
                                           start_time=ex.started_at * 1000)
            own = True
            if not span.is_recording():  # sampled out
                span.end()
                return None
        span.set_attributes(self._evidence(ex))
        ctx = span.get_span_context()
        ex.trace_id = ctx.trace_id.to_bytes(16, "big")
        ex.span_id = ctx.span_id.to_bytes(8, "big")
        return CallSpan(span, own, self, route)
