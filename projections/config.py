"""Settings of the projector and of rebuilds: a frozen dataclass from ``EVIDENCE_*`` and flags.

The only module of the projections that reads their variables (the connection's through
:class:`server.settings.Connection`). Flags win over env vars, env vars over defaults; a value
that cannot work is a ``ProjectionError`` naming its variable. Every name the projections put in the
database is configurable (meta schema, views schema, generation prefix) so tests and
side-by-side stacks isolate themselves.

Why ``batch_max_messages=5000``: a batch is one PostgreSQL transaction (one COPY, a few
upserts, one commit); at 1 KiB records that is ~10 MB, large enough that the commit and the
per-batch queries are a small share of the time during a rebuild, and small enough that a
discarded batch (generation swap, kill -9) is cheap to redo. When the log is quiet a batch
is whatever arrived within ``poll_timeout_s``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from evidence_contract.note import NoteError, parse_skey, parse_vkey
from evidence_contract.tlog import DEFAULT_LOG_NAME
from server.settings import (DEFAULT_BOOTSTRAP, DEFAULT_DATABASE_URL, DEFAULT_VIEWS_SCHEMA,
                             Connection, SettingsError, read)
from topics import TopicSettings

from .errors import ProjectionError
from .redact import load as load_policy

__all__ = ["STALE_HEARTBEAT_S", "ProjectorConfig"]

STALE_HEARTBEAT_S = 10.0
"""A projector heartbeat older than this means the projector is down or cut off from Kafka or
PostgreSQL: the projection is not ready, whatever its stored positions say (the API's /readyz
and ``evidence projections status`` both go by it). Five beats at the default ``heartbeat_s``."""

_NAME_RE = re.compile(r"[a-z_][a-z0-9_]{0,50}")


@dataclass(frozen=True)
class ProjectorConfig:
    """Everything the projector and a rebuild need; see the module docstring."""

    database_url: str = DEFAULT_DATABASE_URL
    bootstrap: str = DEFAULT_BOOTSTRAP
    topics: TopicSettings = field(default_factory=TopicSettings)
    meta_schema: str = "evidence_meta"
    views_schema: str = DEFAULT_VIEWS_SCHEMA
    generation_prefix: str = "evidence_g"
    batch_max_messages: int = 5000
    poll_timeout_s: float = 0.5
    idle_update_s: float = 1.0
    """How often an idle projector refreshes high watermarks and checks for a swap."""
    heartbeat_s: float = 2.0
    """How often the projector stores the log's end offsets from Kafka and the time (its
    heartbeat, which readiness reads: the API's bound on its age must be well above this)."""
    metrics_port: int = 9465
    """Prometheus /metrics port; 0 disables the endpoint."""
    metrics_host: str = "127.0.0.1"
    """The address the /metrics endpoint listens on."""
    application_name: str = "evidence-projector"
    """The connection's ``application_name`` in ``pg_stat_activity``: how an operator finds
    (or a test terminates) this projector's backends; several projectors on one database may
    each name themselves."""
    synchronous_commit: str = "off"
    """``EVIDENCE_PROJECTOR_SYNCHRONOUS_COMMIT``: PostgreSQL's ``synchronous_commit`` for the
    projector's and the rebuild's connection. ``off`` (the default) lets a batch's commit
    return before its WAL reaches the disk (PostgreSQL flushes it within ~3 x
    ``wal_writer_delay``), which takes a disk flush off every batch, most of a quiet batch's
    time: capture-to-queryable latency. It is safe for a projection: a batch's rows and its
    positions commit in one transaction and the WAL is replayed in order, so a PostgreSQL
    crash can lose only the last batches whole, rows and positions together, and the
    projector reads them from the log again (the log, not the projection, is the record).
    ``on`` restores flush-before-acknowledge."""
    drop_lock_timeout_ms: int = 2000
    drop_attempts: int = 30
    log_name: str = DEFAULT_LOG_NAME
    """The log's name: checkpoint origins are ``<log_name>/<stream>``."""
    log_verifier_key_file: str = ""
    """The log's note verifier key; else derived from ``log_signing_key_file``. With one, the
    projector verifies every checkpoint's log signature (a forged one is a finding); without,
    it only parses them."""
    log_signing_key_file: str = ""
    redaction_file: str = ""
    """``EVIDENCE_REDACTION_FILE``: the redaction policy (:mod:`projections.redact`) applied
    to every row projected; empty: none."""
    group_id: str = ""
    """``EVIDENCE_PROJECTOR_GROUP``: the consumer group through which the projectors of one
    projection split the log's partitions (:mod:`projections.service`); empty: derived,
    see :attr:`consumer_group`. Offsets are never committed to it."""
    group_session_timeout_ms: int = 10_000
    """``EVIDENCE_PROJECTOR_SESSION_TIMEOUT_MS``: how long a projector that stopped
    answering (kill -9, a stalled host) keeps its partitions before the group hands them to
    the others."""

    @property
    def consumer_group(self) -> str:
        """The projectors' consumer group: ``EVIDENCE_PROJECTOR_GROUP``, else
        ``<prefix>.projector.<meta schema>``, one per projection (its meta schema is where its
        generations and positions live), so that projectors of two projections on the same
        topics never split partitions between them. Two projections in two databases that
        share a prefix and a meta schema name need distinct groups set explicitly."""
        return self.group_id or f"{self.topics.names.prefix}.projector.{self.meta_schema}"

    @property
    def log_topic(self) -> str:
        return self.topics.names.log

    @property
    def checkpoint_topic(self) -> str:
        return self.topics.names.checkpoints

    @property
    def erasure_topic(self) -> str:
        return self.topics.names.erasures

    @property
    def tree_topic(self) -> str:
        """The deployment log's one partition (docs/witnessing.md)."""
        return self.topics.names.tree

    def log_key(self):
        """The log's verifier key (``evidence_contract.note.VerifierKey``) or None; raises
        ``ProjectionError`` for a key file that cannot be read or names another log."""
        for path, parse in ((self.log_verifier_key_file, parse_vkey),
                            (self.log_signing_key_file, lambda t: parse_skey(t).verifier)):
            if not path:
                continue
            try:
                key = parse(Path(path).read_text(encoding="utf-8").strip())
            except (OSError, UnicodeDecodeError, NoteError) as e:
                raise ProjectionError(f"log key {path}: {e}") from e
            if key.name != self.log_name:
                raise ProjectionError(f"log key {path} is named {key.name!r}, the log "
                                      f"{self.log_name!r} (EVIDENCE_LOG_NAME)")
            return key
        return None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "ProjectorConfig":
        """The settings the variables give (``os.environ`` when None); ``ProjectionError``
        naming the variable whose value cannot work."""
        env = os.environ if environ is None else environ
        try:
            conn = Connection.from_env(env)
            topics = replace(TopicSettings.from_env(dict(env)), names=conn.names)
            values = read(env, _ENV)
        except (SettingsError, ValueError) as e:
            raise ProjectionError(str(e)) from e
        return replace(cls(database_url=str(conn.database_url), bootstrap=str(conn.bootstrap),
                           views_schema=conn.views_schema, topics=topics), **values)

    def redaction(self):
        """The redaction policy (loaded on each call: a rebuild re-reads it), or None."""
        return load_policy(self.redaction_file) if self.redaction_file else None

    def with_args(self, args: object) -> "ProjectorConfig":
        """Apply the CLI flags that were given (argparse leaves the others None)."""
        try:
            conn = self.connection().with_args(args)
        except SettingsError as e:
            raise ProjectionError(str(e)) from e
        cfg = replace(self, **{name: getattr(args, name) for name in _ENV
                               if getattr(args, name, None) is not None})
        return replace(cfg, database_url=str(conn.database_url), bootstrap=str(conn.bootstrap),
                       views_schema=conn.views_schema,
                       topics=replace(cfg.topics, names=conn.names)).checked()

    def connection(self) -> Connection:
        """The connection settings of this configuration (:mod:`server.settings`)."""
        return Connection(bootstrap=self.bootstrap, topic_prefix=self.topics.names.prefix,
                          database_url=self.database_url, views_schema=self.views_schema)

    def checked(self) -> "ProjectorConfig":
        """Return self, or raise ``ProjectionError`` for names unsafe to put in SQL."""
        for label, value in (("meta schema", self.meta_schema),
                             ("views schema", self.views_schema),
                             ("generation prefix", self.generation_prefix)):
            if not _NAME_RE.fullmatch(value):
                raise ProjectionError(f"{label} {value!r} must match {_NAME_RE.pattern}")
        if self.batch_max_messages < 1:
            raise ProjectionError("batch size must be at least 1")
        if not self.heartbeat_s > 0:
            raise ProjectionError("the heartbeat interval must be positive")
        if self.synchronous_commit not in _SYNCHRONOUS_COMMIT:
            raise ProjectionError(f"synchronous_commit {self.synchronous_commit!r} must be one "
                                  f"of {', '.join(_SYNCHRONOUS_COMMIT)}")
        return self

    def env(self) -> dict[str, str]:
        """The environment that makes a child process use this configuration."""
        return {**self.connection().env(),
                **{var: str(getattr(self, name)) for name, (var, *_rest) in _ENV.items()}}


_SYNCHRONOUS_COMMIT = ("off", "local", "remote_write", "on", "remote_apply")

_ENV = {
    "synchronous_commit": ("EVIDENCE_PROJECTOR_SYNCHRONOUS_COMMIT", str),
    "meta_schema": ("EVIDENCE_PG_META_SCHEMA", str),
    "generation_prefix": ("EVIDENCE_PG_GENERATION_PREFIX", str),
    "batch_max_messages": ("EVIDENCE_PROJECTOR_BATCH", int, 1),
    "heartbeat_s": ("EVIDENCE_PROJECTOR_HEARTBEAT_S", float, 0.0),
    "application_name": ("EVIDENCE_PG_APPLICATION_NAME", str),
    "metrics_port": ("EVIDENCE_PROJECTOR_METRICS_PORT", int, 0),
    "metrics_host": ("EVIDENCE_METRICS_HOST", str),
    "log_name": ("EVIDENCE_LOG_NAME", str),
    "log_verifier_key_file": ("EVIDENCE_LOG_VERIFIER_KEY_FILE", str),
    "log_signing_key_file": ("EVIDENCE_LOG_SIGNING_KEY_FILE", str),
    "redaction_file": ("EVIDENCE_REDACTION_FILE", str),
    "group_id": ("EVIDENCE_PROJECTOR_GROUP", str),
    "group_session_timeout_ms": ("EVIDENCE_PROJECTOR_SESSION_TIMEOUT_MS", int, 1),
}
