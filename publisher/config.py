"""The publisher's settings: a frozen dataclass from ``EVIDENCE_*`` variables and flags.

The only module of the publisher that reads its variables (the connection's through
:class:`server.settings.Connection`); a value that cannot work is a ``ValueError`` naming its
variable."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from evidence_contract.tlog import DEFAULT_LOG_NAME
from server.settings import (DEFAULT_BOOTSTRAP, DEFAULT_DATABASE_URL, DEFAULT_VIEWS_SCHEMA,
                             Connection, read)
from topics import TopicSettings

__all__ = ["PublisherConfig"]


@dataclass(frozen=True)
class PublisherConfig:
    """Everything ``evidence publisher`` needs (docs/witnessing.md)."""

    bootstrap: str = DEFAULT_BOOTSTRAP
    topics: TopicSettings = field(default_factory=TopicSettings)
    database_url: str = DEFAULT_DATABASE_URL
    views_schema: str = DEFAULT_VIEWS_SCHEMA
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
            raise ValueError(f"EVIDENCE_WITNESS_TIMEOUT_S (the witness request timeout) must be "
                             f"positive, got {self.http_timeout_s}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "PublisherConfig":
        env = os.environ if environ is None else environ
        conn = Connection.from_env(env)
        return cls(topics=replace(TopicSettings.from_env(dict(env)), names=conn.names),
                   bootstrap=str(conn.bootstrap), database_url=str(conn.database_url),
                   views_schema=conn.views_schema, **read(env, _ENV))

    def with_args(self, args: Any) -> "PublisherConfig":
        """Flags override the environment (those given)."""
        given = {f.name: getattr(args, f.name) for f in fields(self)
                 if getattr(args, f.name, None) is not None}
        conn = Connection(bootstrap=self.bootstrap, topic_prefix=self.topics.names.prefix,
                          database_url=self.database_url,
                          views_schema=self.views_schema).with_args(args)
        given.update(bootstrap=conn.bootstrap, database_url=conn.database_url,
                     views_schema=conn.views_schema,
                     topics=replace(self.topics, names=conn.names))
        return replace(self, **given)


_ENV: dict[str, tuple[str, type]] = {
    "log_name": ("EVIDENCE_LOG_NAME", str),
    "log_signing_key_file": ("EVIDENCE_LOG_SIGNING_KEY_FILE", str),
    "interval_s": ("EVIDENCE_LOG_CHECKPOINT_INTERVAL_S", float),
    "witnesses_file": ("EVIDENCE_WITNESSES_FILE", str),
    "http_timeout_s": ("EVIDENCE_WITNESS_TIMEOUT_S", float),
}
