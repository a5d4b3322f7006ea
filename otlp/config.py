"""The receiver's settings: a frozen dataclass from ``EVIDENCE_*`` variables and flags.

The only module of the receiver that reads its variables (the connection's through
:class:`server.settings.Connection`); a value that cannot work is a ``ValueError`` naming its
variable, raised once, before the server starts."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from evidence_contract.topics import TopicNames
from server.settings import DEFAULT_BOOTSTRAP, DEFAULT_TOPIC_PREFIX, Connection, read

from otlp.capture import DEFAULT_STREAM, Streams
from otlp.decode import DEFAULT_MAX_BODY

__all__ = ["DEFAULT_PORT", "ReceiverConfig"]

DEFAULT_PORT = 4318
"""OTLP/HTTP's default port."""


def _flag(raw: str) -> bool:
    if raw.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if raw.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


@dataclass(frozen=True)
class ReceiverConfig:
    """Everything ``evidence otlp`` needs (docs/otlp.md)."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    bootstrap: str = DEFAULT_BOOTSTRAP
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    stream: str = DEFAULT_STREAM
    """``EVIDENCE_OTLP_STREAM``: the stream mapped captures are chained in."""
    stream_by_service: bool = False
    """``EVIDENCE_OTLP_STREAM_BY_SERVICE``: chain each resource's captures in
    ``<stream>.<service.name>`` instead (a service name that makes no stream id is rejected)."""
    max_body_bytes: int = DEFAULT_MAX_BODY
    """``EVIDENCE_OTLP_MAX_BODY_BYTES``: the cap on a request body once decompressed (413)."""
    delivery_timeout_s: float = 10.0
    """``EVIDENCE_OTLP_DELIVERY_TIMEOUT_S``: how long a request waits for Kafka to acknowledge
    its captures before it is answered 503."""
    retry_after_s: int = 5
    """``EVIDENCE_OTLP_RETRY_AFTER_S``: the ``Retry-After`` of a 503 (Kafka away) or 429
    (the producer's queue full)."""
    queue_max_messages: int = 100_000
    """``EVIDENCE_OTLP_QUEUE_MAX_MESSAGES``: captures the producer holds for Kafka at most;
    past it requests are answered 429."""

    def __post_init__(self) -> None:
        Streams(self.stream, self.stream_by_service)  # a stream id, or a ValueError naming it
        if not 0 < self.port < 65536:
            raise ValueError(f"EVIDENCE_OTLP_PORT {self.port} is not a TCP port")
        for name, value in (("EVIDENCE_OTLP_MAX_BODY_BYTES", self.max_body_bytes),
                            ("EVIDENCE_OTLP_DELIVERY_TIMEOUT_S", self.delivery_timeout_s),
                            ("EVIDENCE_OTLP_RETRY_AFTER_S", self.retry_after_s),
                            ("EVIDENCE_OTLP_QUEUE_MAX_MESSAGES", self.queue_max_messages)):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value}")

    @property
    def streams(self) -> Streams:
        return Streams(self.stream, self.stream_by_service)

    @property
    def names(self) -> TopicNames:
        return TopicNames(self.topic_prefix)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "ReceiverConfig":
        env = os.environ if environ is None else environ
        conn = Connection.from_env(env)
        return cls(bootstrap=str(conn.bootstrap), topic_prefix=conn.topic_prefix,
                   **read(env, _ENV))

    def with_args(self, args: Any) -> "ReceiverConfig":
        """Flags override the environment (those given)."""
        given = {f.name: getattr(args, f.name) for f in fields(self)
                 if getattr(args, f.name, None) is not None}
        conn = Connection(bootstrap=self.bootstrap, topic_prefix=self.topic_prefix).with_args(args)
        given.update(bootstrap=conn.bootstrap, topic_prefix=conn.topic_prefix)
        return replace(self, **given)


_ENV: dict[str, tuple[Any, ...]] = {
    "port": ("EVIDENCE_OTLP_PORT", int),
    "stream": ("EVIDENCE_OTLP_STREAM", str),
    "stream_by_service": ("EVIDENCE_OTLP_STREAM_BY_SERVICE", _flag),
    "max_body_bytes": ("EVIDENCE_OTLP_MAX_BODY_BYTES", int, 1),
    "delivery_timeout_s": ("EVIDENCE_OTLP_DELIVERY_TIMEOUT_S", float, 0.0),
    "retry_after_s": ("EVIDENCE_OTLP_RETRY_AFTER_S", int, 1),
    "queue_max_messages": ("EVIDENCE_OTLP_QUEUE_MAX_MESSAGES", int, 1),
}
