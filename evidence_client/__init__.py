"""The capture gateway: what a Python service embeds to record its LLM calls.

    from evidence_client import Recorder

    recorder = Recorder(bootstrap_servers="127.0.0.1:9092", stream="acme:support-bot")
    client = openai.OpenAI(http_client=recorder.http_client())           # httpx2.Client
    aclient = anthropic.AsyncAnthropic(http_client=recorder.async_http_client())
    ...
    recorder.close()   # flushes; anything undelivered stays in the local spool

Modules, from the outside in:

    recorder   Recorder: the front (clients, lifecycle) over the rooms below; Metrics, LIBRARY
    settings   RecorderSettings: the Recorder's arguments and environment, validated once
    sender     the sender thread: producer, hand-off of each capture (Durable), group commit
    tracking   the own spool's captures until Kafka acknowledged them; degraded mode
    orphans    adopting and resending the spools of processes that ended
    encoder    a finished exchange to the encoded (sized, maybe sealed) CaptureEvent
    keycache   subject keys of content_policy="encrypt", per epoch, cached
    context    stream() and call_context(): per-call stream, subject and application context
    keystore   FileKeyStore, load_kek: per-subject data keys in local files (content_policy
               "encrypt"; the sealing itself needs the [encrypt] extra)
    replay     Replayer: clients that answer from the evidence API and never call out; every
               answer verified (record -> leaf -> inclusion -> signed checkpoint) by default
    trust      LogVerifier: the pinned log key, required witnesses, last checkpoint per origin
    transport  capture transports for httpx2 and httpx: the one network seam
    otel       Spans: each call's span (joined or started), evidence attributes, trace ids
    semconv    the GenAI semantic conventions' attributes of a call, from its bytes (pure)
    genai_hook EvidenceCompletionHook for opentelemetry-util-genai (the [genai-hook] extra)
    capture    Exchange and build_event: an HTTP exchange -> CaptureEvent dict (pure)
    sizing     the size policy: which bytes are kept verbatim, truncation (pure)
    adapters   provider detection and field extraction per wire format (pure)
    producer   IntakeProducer and error classes: the only module importing confluent_kafka
    spool      Spool: the local durable append-only spool, one per process; orphan adoption
    exposition the Recorder's counters as Prometheus metrics, for the embedding service
    errors     GatewayError and its subclasses, under evidence_contract.EvidenceError
"""

from .adapters import PROMPT_KEYS, RequestFacts, ResponseFacts, Route
from .capture import HASH_ONLY, VALUE, Exchange, build_event
from .context import CallContext, Chunk, call_context, current_call, current_stream, stream
from .errors import (
    CheckpointRolledBack,
    ConfigError,
    EvidenceTampered,
    EvidenceUncovered,
    EvidenceUnverified,
    EvidenceUnwitnessed,
    GatewayError,
    ProducerError,
    QueueFull,
    RecorderUnavailable,
    SpoolError,
    SpoolLockedError,
)
from .recorder import LIBRARY, Metrics, Recorder
from .replay import ReplayErased, ReplayError, ReplayMiss, ReplayRedacted, Replayer
from .sizing import DEFAULT_MAX_VERBATIM_BYTES
from .spool import Spool, SpoolEntry
from .transport import transport_classes
from .trust import LogVerifier

__all__ = [
    "CallContext",
    "CheckpointRolledBack",
    "Chunk",
    "ConfigError",
    "DEFAULT_MAX_VERBATIM_BYTES",
    "EvidenceTampered",
    "EvidenceUncovered",
    "EvidenceUnverified",
    "EvidenceUnwitnessed",
    "Exchange",
    "GatewayError",
    "HASH_ONLY",
    "LIBRARY",
    "LogVerifier",
    "Metrics",
    "PROMPT_KEYS",
    "ProducerError",
    "QueueFull",
    "Recorder",
    "RecorderUnavailable",
    "ReplayErased",
    "ReplayError",
    "ReplayMiss",
    "ReplayRedacted",
    "Replayer",
    "RequestFacts",
    "ResponseFacts",
    "Route",
    "Spool",
    "SpoolEntry",
    "SpoolError",
    "SpoolLockedError",
    "VALUE",
    "build_event",
    "call_context",
    "current_call",
    "current_stream",
    "stream",
    "transport_classes",
]
