"""A completion hook for ``opentelemetry-util-genai`` (the official GenAI instrumentations'
content path), pointing their content references at the evidence record. Optional: the
``genai-hook`` extra.

The official instrumentations (``opentelemetry-instrumentation-genai-openai``, ``-anthropic``)
hand each finished invocation's messages to a *completion hook*, meant to store the content
outside the trace and stamp a reference on the span and on the
``gen_ai.client.inference.operation.details`` event (``gen_ai.input.messages_ref``,
``gen_ai.output.messages_ref``; proposed, experimental). Select this one with::

    OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK=evidence

(the entry point ``evidence`` of the group ``opentelemetry_genai_completion_hook``), or pass
``EvidenceCompletionHook()`` as ``OpenAIInstrumentor().instrument(completion_hook=...)``.

What it records, and why not more. The hook is given the messages as the instrumentation
rebuilt them (``InputMessage``/``OutputMessage``), never the bytes that went to the provider.
A capture is those bytes: its content key is their digest, its response the bytes as received.
A capture made of rebuilt JSON would present a re-encoding as what was sent, so the hook makes
none. The content reaches the store through the capture transport, which the application's
SDK client already goes through (``Recorder.http_client()``): the transport joins the
invocation's span and puts the record's id and references on it
(:mod:`~evidence_client.otel`). The hook then carries those references to where the
instrumentation would have put content: the span (already there) and the event, so a trace
consumer that follows ``*_messages_ref`` finds the verbatim, sealed request and response.

An invocation whose span carries no capture (a client not wrapped by a Recorder) gets no
reference, since a reference to nothing would claim content was stored; it is counted in
:attr:`EvidenceCompletionHook.unrecorded` and logged once, naming the fix.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from .otel import EVENT_ID, INPUT_MESSAGES_REF, OUTPUT_MESSAGES_REF

__all__ = ["EvidenceCompletionHook"]

log = logging.getLogger(__name__)

_CARRIED = (EVENT_ID, INPUT_MESSAGES_REF, OUTPUT_MESSAGES_REF)


class EvidenceCompletionHook:
    """``opentelemetry.util.genai.completion_hook.CompletionHook``: the record's references
    from the invocation's span onto its event. Construction takes no arguments (the entry
    point calls it so) and does no I/O."""

    def __init__(self) -> None:
        self.recorded = 0
        """Invocations whose capture the hook found and referenced."""
        self.unrecorded = 0
        """Invocations that went through no capture transport (nothing to reference)."""
        self._lock = threading.Lock()
        self._warned = False

    def on_completion(self, *, inputs: list[Any], outputs: list[Any],
                      system_instruction: list[Any], tool_definitions: list[Any] | None = None,
                      span: Any = None, log_record: Any = None, **_: Any) -> None:
        """Copy the capture's references from ``span`` to ``log_record``; the messages
        themselves are left alone (the record holds the bytes they were made from)."""
        attrs = getattr(span, "attributes", None)
        refs = ({k: attrs[k] for k in _CARRIED if k in attrs}
                if isinstance(attrs, Mapping) else {})
        if EVENT_ID not in refs:
            self._count_unrecorded()
            return
        with self._lock:
            self.recorded += 1
        if log_record is not None:
            log_record.attributes = {**(log_record.attributes or {}), **refs}

    def _count_unrecorded(self) -> None:
        with self._lock:
            self.unrecorded += 1
            warn, self._warned = not self._warned, True
        if warn:
            log.warning("a GenAI invocation completed without a capture, so no evidence "
                        "reference is set: give its SDK client evidence_client.Recorder"
                        "(...).http_client() (counted in EvidenceCompletionHook.unrecorded)")
