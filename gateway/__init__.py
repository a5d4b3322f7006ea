"""The capture gateway: what a Python service embeds to record its LLM calls.

    from evidence_client import Recorder

    recorder = Recorder(bootstrap_servers="127.0.0.1:9092", stream="acme:support-bot")
    client = openai.OpenAI(http_client=recorder.http_client())           # httpx2.Client
    aclient = anthropic.AsyncAnthropic(http_client=recorder.async_http_client())
    ...
    recorder.close()   # flushes; anything undelivered stays in the local spool

Modules, from the outside in:

    recorder   Recorder (clients, lifecycle, routing to Kafka or the spool), Metrics, LIBRARY
    replay     Replayer: clients that answer from the evidence API and never call out
    transport  capture transports for httpx2 and httpx: the one network seam
    capture    Exchange and build_event: an HTTP exchange -> CaptureEvent dict (pure)
    adapters   provider detection and field extraction per wire format (pure)
    producer   IntakeProducer: the only module importing confluent_kafka
    spool      Spool: the local durable append-only spool
    errors     GatewayError and its subclasses, under schemas.EvidenceError
    fake_provider  FakeProvider: a local OpenAI/Anthropic look-alike for demos and tests
"""

from .adapters import PROMPT_KEYS, RequestFacts, ResponseFacts, Route
from .capture import HASH_ONLY, VALUE, Exchange, build_event
from .errors import (
    ConfigError,
    GatewayError,
    ProducerError,
    QueueFull,
    SpoolError,
    SpoolLockedError,
)
from .recorder import LIBRARY, Metrics, Recorder
from .replay import ReplayError, ReplayMiss, Replayer
from .spool import Spool, SpoolEntry
from .transport import transport_classes

__all__ = [
    "ConfigError",
    "Exchange",
    "GatewayError",
    "HASH_ONLY",
    "LIBRARY",
    "Metrics",
    "PROMPT_KEYS",
    "ProducerError",
    "QueueFull",
    "Recorder",
    "ReplayError",
    "ReplayMiss",
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
    "transport_classes",
]
