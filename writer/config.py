"""The writer's settings: a frozen dataclass built from ``EVIDENCE_*`` env vars and CLI flags.

The only module of the writer that reads its variables (the connection's through
:class:`server.settings.Connection`). Flags win over env vars, env vars over defaults; a value
that cannot work is a ``SettingsError`` naming its variable. Why the batching defaults are what they are:

- A Kafka transaction costs a fixed few milliseconds to commit (AddPartitions, EndTxn, the
  markers), whatever it holds, so sealing one capture per transaction would cap throughput
  at a few hundred records/s. Batching amortises that cost.
- ``batch_max_messages=5000``: under load the commit (a flush of every record to all
  in-sync replicas, then EndTxn and the markers) is a fixed cost per batch, so bigger batches
  amortise it: 500 → 5000 roughly doubled sealing throughput in ``bench/`` (the writer is
  CPU-bound in Python past that). A batch of 5000 1 KiB captures is ~7 MB, well under the
  transaction's limits, and an aborted batch is still only a second or so of work to redo.
  The size only matters under load: a quiet writer's batches are whatever the linger caught.
- ``batch_linger_ms=20``: a batch is committed at most this long after its first message
  arrived (the linger starts with the first message, as Kafka's producer linger.ms does).
  The writer's share of capture-to-queryable latency is then about the linger plus one
  commit, ~30–40 ms, while at 1k captures/s a batch still carries ~20 captures, so the
  broker sees tens of transactions a second, not thousands.
- ``transaction_interval_ms`` (default 0, off): under steady load a transaction starts at
  most this often (its batch lingers until this long after the previous one began), so the
  writer commits
  about ten transactions a second at any rate, not one per linger. Each transaction costs
  the broker, the writer, the projector and PostgreSQL a fixed amount whatever it holds (the
  offsets commit, EndTxn, a marker on every partition it touched; one projector batch: a
  PostgreSQL transaction of a dozen statements); at 5k captures/s the ~30 transactions a
  second of the linger alone cost more CPU than the records they carried (docs/performance.md,
  "CPU per capture"). A capture waits at most this plus one commit in the writer; a capture
  that comes alone after a quiet spell (no transaction within the interval) waits only the
  linger. A full batch (``batch_max_messages``) never waits. 0: each batch starts as soon as
  its linger ends. Off by default: on a quiet machine, 100 ms lowered neither the CPU a
  capture at 1k/s nor at 5k/s and raised p99 at 5k/s from ~1 s to 3-7 s (two alternating
  pairs of quick bench runs, docs/performance.md "CPU per capture").
- ``fetch_wait_ms=20``: how long the broker holds the intake consumer's fetch for more
  captures (``fetch.wait.max.ms``, with ``fetch.min.bytes`` 512 KiB: writer.kafka_io). Under
  load the bytes fill a fetch first; below that rate every fetch waits this long, so a lone
  capture waits at most this much more, and an idle writer asks its partitions' leaders
  1000/this times a second. Those empty fetches cost the broker 2.4–3.8% of a core for one
  idle consumer at 20 ms, 0.8% at 100 ms and 0.1–0.35% at 500 ms (a lone broker, two runs of
  ``python -m bench.idle_fetch`` on the development machine). Raise it where many writers
  sit idle on a shared cluster and a quiet capture may take that much longer to seal.

Why the takeover settings are what they are (a writer killed -9 beside a live one in its group;
docs/sizing.md, "Scale-out"). The survivor has sealed the dead writer's partitions' next
captures within max(session timeout, transaction timeout + the broker's abort check) + its
restore + one batch: 25 s + restore with these defaults, the restore reading the dedup
window's records of the partitions it takes:

- ``session_timeout_ms=10_000`` (librdkafka's heartbeat every 3 s): the dead writer's static
  membership ends after this, and the group hands its partitions to the others.
- ``transaction_timeout_ms=15_000``: the dead writer's open transaction (its records, heads
  and intake offsets) holds its partitions until the coordinator aborts it, at this timeout
  after it began plus up to the broker's
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` (10 s by default): until
  then the survivor cannot read stable committed offsets for them, and readers of the log
  stop at the open transaction. So this is the larger part of a takeover. It must stay above
  the writer's longest transaction: one batch consumed, sealed and committed, well under a
  second here (5,000 records at 37k/s, plus one commit). A transaction that outlives it is
  aborted by the coordinator, which fences the writer's producer: nothing uncommitted was
  visible, so exactly-once holds, and the writer heals (``writer.service``) and seals the
  batch again; only time is lost. That is what happens when a broker restart takes longer
  than this timeout while a commit is waiting on it (the loop waits up to
  ``loop.COMMIT_GIVE_UP_S`` for a commit). A zombie (a writer paused past its session) is
  fenced twice over: its offsets commit carries its group generation, which the rebalance
  made stale, and the coordinator aborts its transaction at this timeout.
- ``max.poll.interval.ms`` stays librdkafka's 300 s (``kafka_io.consumer_config``): a
  partition assignment runs between two polls, its wait for stable offsets (at most
  ``transaction_timeout_ms`` + ``ABORT_CHECK_S`` + 5 s) and its restore. A restore that
  outlasts the rest (full dedup windows of many partitions: docs/sizing.md) makes the
  consumer leave the group and restore again; ``dedup_max_ids`` bounds it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, replace
from typing import Mapping

from server.settings import DEFAULT_BOOTSTRAP, Connection, SettingsError, read
from topics import TopicSettings

__all__ = ["DEFAULT_GROUP_ID", "DEFAULT_TRANSACTIONAL_ID", "WriterConfig"]

DEFAULT_TRANSACTIONAL_ID = "evidence-writer"
DEFAULT_GROUP_ID = "evidence-writer"
DAY_S = 24 * 3600
ABORT_CHECK_S = 10.0
"""The broker's ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` (Kafka's
default): how long after its timeout a dead writer's transaction may still be open."""
TRANSACTION_TIMEOUT_MS = (5_000, 900_000)
"""The accepted range: above the writer's longest transaction (see the module docstring),
at most the brokers' default ``transaction.max.timeout.ms`` (15 min)."""
FETCH_WAIT_MAX_MS = 1000
"""The longest intake fetch wait accepted: past Kafka's own default (500 ms), a quiet capture
would wait seconds to be sealed."""
SESSION_TIMEOUT_MS = (1, 300_000)
"""The accepted range: positive, at most the consumer's ``max.poll.interval.ms`` (300 s); the
brokers refuse less than their ``group.min.session.timeout.ms`` (6 s by default)."""


@dataclass(frozen=True)
class WriterConfig:
    """Everything the writer needs to know; see the module docstring for the defaults."""

    bootstrap: str = DEFAULT_BOOTSTRAP
    topics: TopicSettings = field(default_factory=TopicSettings)
    transactional_id: str = DEFAULT_TRANSACTIONAL_ID
    """One per writer deployment: a second writer with the same id fences the first."""
    group_id: str = DEFAULT_GROUP_ID
    group_instance_id: str | None = None
    """Static group membership; defaults to the transactional id, so a restarted writer takes
    its partitions back at once and a second writer with the same identity fences the first's
    consumer as well as its producer."""
    writer_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    batch_max_messages: int = 5000
    batch_linger_ms: int = 20
    transaction_interval_ms: int = 0  # off: measured, pacing raised p99 at 5k/s (performance.md)
    """Under load, the shortest time between the starts of two transactions (module
    docstring); 0 paces nothing."""
    fetch_wait_ms: int = 20
    """The longest the broker holds an intake fetch that has less than 512 KiB for it
    (module docstring)."""
    dedup_window_s: int = 7 * DAY_S
    dedup_max_ids: int = 1_000_000
    """Per partition; bounds memory and the start-up scan of the log."""
    transaction_timeout_ms: int = 15_000
    """How long a dead writer's open transaction holds its partitions (module docstring)."""
    session_timeout_ms: int = 10_000
    """How long a dead writer keeps its partitions before the group hands them on."""
    metrics_port: int = 9464
    """Prometheus /metrics port; 0 disables the endpoint."""
    metrics_host: str = "127.0.0.1"
    """The address the /metrics endpoint listens on."""
    log_signing_key_file: str | None = None
    """The log's Ed25519 signer key (C2SP note signer key text, a file only its owner may
    read); without it the writer signs no checkpoints."""
    log_name: str = "evidence-store.local/log"
    """The log's name: the signer key's name, and the prefix of every checkpoint origin."""
    checkpoint_interval_s: float = 5.0
    """The longest a stream that grew waits for its next signed checkpoint."""

    @property
    def instance_id(self) -> str:
        return self.group_instance_id or self.transactional_id

    @property
    def stable_offsets_wait_s(self) -> float:
        """How long a writer that takes partitions over waits for their committed offsets to
        be stable: a dead writer's transaction is aborted within its timeout plus the
        broker's check interval; 5 s more for the abort's markers."""
        return self.transaction_timeout_ms / 1000 + ABORT_CHECK_S + 5.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "WriterConfig":
        """The settings the variables give (``os.environ`` when None); ``SettingsError``
        (a ``ValueError``) naming the variable whose value cannot work."""
        env = os.environ if environ is None else environ
        conn = Connection.from_env(env)
        topics = replace(TopicSettings.from_env(dict(env)), names=conn.names)
        cfg = replace(cls(bootstrap=str(conn.bootstrap), topics=topics), **read(env, _ENV))
        cfg.check()
        return cfg

    def with_args(self, args: object) -> "WriterConfig":
        """Apply CLI flags that were given (argparse leaves the others None)."""
        overrides = {name: getattr(args, name) for name in _ENV
                     if getattr(args, name, None) is not None}
        conn = Connection(bootstrap=self.bootstrap,
                          topic_prefix=self.topics.names.prefix).with_args(args)
        cfg = replace(self, bootstrap=str(conn.bootstrap),
                      topics=replace(self.topics, names=conn.names), **overrides)
        cfg.check()
        return cfg

    def check(self) -> None:
        """Raise ``SettingsError`` (a ``ValueError``) naming the variable (and flag) of a
        setting that cannot work."""
        if self.batch_max_messages < 1:
            raise SettingsError("EVIDENCE_WRITER_BATCH_MAX_MESSAGES (--batch-max-messages) "
                                "must be at least 1")
        if self.batch_linger_ms < 0:
            raise SettingsError("EVIDENCE_WRITER_BATCH_LINGER_MS (--batch-linger-ms) must be "
                                ">= 0")
        if not 0 <= self.transaction_interval_ms <= 10_000:
            raise SettingsError("EVIDENCE_WRITER_TRANSACTION_INTERVAL_MS must be between 0 and "
                                "10000 (a capture waits up to this long in the writer)")
        if not 1 <= self.fetch_wait_ms <= FETCH_WAIT_MAX_MS:
            raise SettingsError(f"EVIDENCE_WRITER_FETCH_WAIT_MS {self.fetch_wait_ms} must be "
                                f"between 1 and {FETCH_WAIT_MAX_MS} (a quiet capture waits up "
                                f"to this long for its fetch)")
        if self.dedup_window_s < 1 or self.dedup_max_ids < 1:
            raise SettingsError("the dedup window must be positive in time and count "
                                "(EVIDENCE_WRITER_DEDUP_WINDOW_S, EVIDENCE_WRITER_DEDUP_MAX_IDS)")
        if not self.checkpoint_interval_s > 0:
            raise SettingsError("EVIDENCE_CHECKPOINT_INTERVAL_S must be positive")
        if not self.log_name:
            raise SettingsError("EVIDENCE_LOG_NAME must not be empty")
        if not self.transactional_id or not self.group_id:
            raise SettingsError("EVIDENCE_WRITER_TRANSACTIONAL_ID and EVIDENCE_WRITER_GROUP_ID "
                                "must not be empty")
        lo, hi = TRANSACTION_TIMEOUT_MS
        if not lo <= self.transaction_timeout_ms <= hi:
            raise SettingsError(f"EVIDENCE_WRITER_TRANSACTION_TIMEOUT_MS "
                                f"{self.transaction_timeout_ms} must be between {lo} and {hi}: "
                                f"above the writer's longest transaction, within the brokers' "
                                f"transaction.max.timeout.ms")
        lo, hi = SESSION_TIMEOUT_MS
        if not lo <= self.session_timeout_ms <= hi:
            raise SettingsError(f"EVIDENCE_WRITER_SESSION_TIMEOUT_MS {self.session_timeout_ms} "
                                f"must be between {lo} and {hi} (at most the consumer's "
                                f"max.poll.interval.ms)")
        if not 0 <= self.metrics_port <= 65535:
            raise SettingsError(f"EVIDENCE_WRITER_METRICS_PORT (--metrics-port) "
                                f"{self.metrics_port} is not a port (0 disables it)")


_ENV = {
    "transactional_id": ("EVIDENCE_WRITER_TRANSACTIONAL_ID", str),
    "group_id": ("EVIDENCE_WRITER_GROUP_ID", str),
    "group_instance_id": ("EVIDENCE_WRITER_GROUP_INSTANCE_ID", str),
    "writer_id": ("EVIDENCE_WRITER_ID", str),
    "batch_max_messages": ("EVIDENCE_WRITER_BATCH_MAX_MESSAGES", int),
    "batch_linger_ms": ("EVIDENCE_WRITER_BATCH_LINGER_MS", int),
    "transaction_interval_ms": ("EVIDENCE_WRITER_TRANSACTION_INTERVAL_MS", int),
    "fetch_wait_ms": ("EVIDENCE_WRITER_FETCH_WAIT_MS", int),
    "dedup_window_s": ("EVIDENCE_WRITER_DEDUP_WINDOW_S", int),
    "dedup_max_ids": ("EVIDENCE_WRITER_DEDUP_MAX_IDS", int),
    "transaction_timeout_ms": ("EVIDENCE_WRITER_TRANSACTION_TIMEOUT_MS", int),
    "session_timeout_ms": ("EVIDENCE_WRITER_SESSION_TIMEOUT_MS", int),
    "metrics_port": ("EVIDENCE_WRITER_METRICS_PORT", int),
    "metrics_host": ("EVIDENCE_METRICS_HOST", str),
    "log_signing_key_file": ("EVIDENCE_LOG_SIGNING_KEY_FILE", str),
    "log_name": ("EVIDENCE_LOG_NAME", str),
    "checkpoint_interval_s": ("EVIDENCE_CHECKPOINT_INTERVAL_S", float),
}
