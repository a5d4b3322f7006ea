"""The publisher's settings: a frozen dataclass from ``EVIDENCE_*`` variables and flags."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from evidence_contract.tlog import DEFAULT_LOG_NAME
from topics import TopicSettings

__all__ = ["PublisherConfig"]


@dataclass(frozen=True)
class PublisherConfig:
    """Everything ``evidence publisher`` needs (docs/witnessing.md)."""

    bootstrap: str = "127.0.0.1:9092"
    topics: TopicSettings = field(default_factory=TopicSettings)
    database_url: str = "postgresql://evidence:evidence@127.0.0.1:5432/evidence"
    views_schema: str = "evidence"
    """Where the projection's ``log_nodes`` view is: the consistency proofs' hashes (checked
    here against the roots signed before they are sent)."""
    log_name: str = DEFAULT_LOG_NAME
    """The deployment checkpoint's origin, which is the log key's name."""
    log_signing_key_file: str = ""
    interval_s: float = 10.0
    """``EVIDENCE_LOG_CHECKPOINT_INTERVAL_S``: at most one deployment checkpoint this often,
    whatever the number of streams (what witnesses are asked to follow)."""
    witnesses_file: str = ""
    """``EVIDENCE_WITNESSES_FILE``: the witnesses to push to, re-read when it changes."""
    http_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ValueError(f"EVIDENCE_LOG_CHECKPOINT_INTERVAL_S must be positive, got "
                             f"{self.interval_s}")
        if not self.http_timeout_s > 0:
            raise ValueError("the witness request timeout must be positive")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "PublisherConfig":
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {"topics": TopicSettings.from_env(dict(env))}
        for name, (var, kind) in _ENV.items():
            raw = env.get(var, "")
            if raw != "":
                try:
                    values[name] = kind(raw)
                except ValueError:
                    raise ValueError(f"{var}={raw!r} is not a {kind.__name__}") from None
        return cls(**values)

    def with_args(self, args: Any) -> "PublisherConfig":
        """Flags override the environment (those given)."""
        given = {f.name: getattr(args, f.name) for f in fields(self)
                 if getattr(args, f.name, None) is not None}
        if getattr(args, "topic_prefix", None):
            given["topics"] = replace(self.topics, names=type(self.topics.names)(
                args.topic_prefix))
        return replace(self, **given)


_ENV: dict[str, tuple[str, type]] = {
    "bootstrap": ("EVIDENCE_KAFKA_BOOTSTRAP", str),
    "database_url": ("EVIDENCE_DATABASE_URL", str),
    "views_schema": ("EVIDENCE_PG_VIEWS_SCHEMA", str),
    "log_name": ("EVIDENCE_LOG_NAME", str),
    "log_signing_key_file": ("EVIDENCE_LOG_SIGNING_KEY_FILE", str),
    "interval_s": ("EVIDENCE_LOG_CHECKPOINT_INTERVAL_S", float),
    "witnesses_file": ("EVIDENCE_WITNESSES_FILE", str),
    "http_timeout_s": ("EVIDENCE_WITNESS_TIMEOUT_S", float),
}
