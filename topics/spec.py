"""Topic specifications: pure data, no Kafka client.

The record topic (``<prefix>.log``) is the evidence. Its configs are the guarantee that Kafka
never deletes or compacts it: ``cleanup.policy=delete`` with infinite time and size retention
(never ``compact``: compaction would drop all but the last record per key), and unclean leader
election off so an out-of-sync replica can never become leader and truncate acknowledged
records. Intake, log and writer-state share one partition count so that a stream, keyed by its
id, lands on the same partition number in each.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

from evidence_contract.errors import EvidenceError
from evidence_contract.topics import TopicNames

MIB = 1024 * 1024
DAY_MS = 24 * 60 * 60 * 1000


class TopicConfigError(EvidenceError):
    """An existing topic's partitions or configs differ from what evidence-store requires."""


class TopicPartitionsError(TopicConfigError):
    """An existing topic's partition count differs from the configured one.

    Never fixed in place: a stream's partition is murmur2(stream id) mod the count, so another
    count moves streams to other partitions, mid-chain (see :data:`PARTITION_MIGRATION`).
    """


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    """A positive integer variable; empty is unset; a bad value is a ``ValueError`` naming it
    (``topics`` sits beside ``server`` and cannot use ``server.settings``)."""
    raw = env.get(name) or ""
    if raw == "":
        return default
    if not raw.strip().isdigit() or int(raw) < 1:
        raise ValueError(f"{name}={raw!r} is not a positive integer")
    return int(raw)


@dataclass(frozen=True)
class TopicSettings:
    """Tunable numbers; :meth:`from_env` reads ``EVIDENCE_*`` overrides."""

    names: TopicNames = field(default_factory=TopicNames)
    partitions: int = 6
    replication_factor: int = 1
    intake_retention_ms: int = 7 * DAY_MS
    max_message_bytes: int = 64 * MIB
    """intake's and log's max.message.bytes: a capture's bodies up to the client's
    max_verbatim_bytes (48 MiB by default) are kept verbatim within it."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "TopicSettings":
        env = os.environ if environ is None else environ
        return cls(
            names=TopicNames(env.get("EVIDENCE_TOPIC_PREFIX") or "evidence"),
            partitions=_int(env, "EVIDENCE_TOPIC_PARTITIONS", 6),
            replication_factor=_int(env, "EVIDENCE_REPLICATION_FACTOR", 1),
            intake_retention_ms=_int(env, "EVIDENCE_INTAKE_RETENTION_MS", 7 * DAY_MS),
            max_message_bytes=_int(env, "EVIDENCE_MAX_MESSAGE_BYTES", 64 * MIB),
        )

    @property
    def rejected_max_message_bytes(self) -> int:
        # A rejected message is an intake message, verbatim, plus reason headers: give it
        # headroom so anything intake accepted can always be parked there.
        return self.max_message_bytes + MIB


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]


_KEPT = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
         "unclean.leader.election.enable": "false"}
"""The configs of a topic that is evidence: never deleted nor compacted, and never truncated
by an out-of-sync replica elected leader."""


def topic_specs(settings: TopicSettings) -> list[TopicSpec]:
    """The seven topics, in the order they are created. All but the tree share the partition
    count; the tree has one partition: its order is the deployment tree's."""
    n = settings.names
    configs = {  # by topic, in the order of creation
        n.intake: {"cleanup.policy": "delete",
                   "retention.ms": str(settings.intake_retention_ms),
                   "max.message.bytes": str(settings.max_message_bytes)},
        n.log: {**_KEPT, "max.message.bytes": str(settings.max_message_bytes)},
        n.writer_state: {"cleanup.policy": "compact"},
        n.rejected: {**_KEPT, "max.message.bytes": str(settings.rejected_max_message_bytes)},
        n.checkpoints: _KEPT,
        n.erasures: _KEPT,
        n.tree: _KEPT,
    }
    return [TopicSpec(name, 1 if name == n.tree else settings.partitions,
                      settings.replication_factor, dict(c)) for name, c in configs.items()]


PARTITION_MIGRATION = (
    "A stream's partition is murmur2(stream id) mod the partition count, so another count "
    "moves streams: a stream's next records would land on another partition, under another "
    "writer than its earlier ones, breaking per-partition single-writer order and its hash "
    "chain. evidence-store never changes the count in place: do not run "
    "`kafka-topics --alter --partitions` on these topics. To change the count, migrate: "
    "create topics under a new EVIDENCE_TOPIC_PREFIX with the new count and replay/copy the "
    "record into them, keeping the old topics read-only (docs/sizing.md, "
    "\"Changing the partition count\")."
)


def partition_mismatches(specs: list[TopicSpec], counts: dict[str, int]) -> dict[str, int]:
    """The existing topics (``counts``: name -> partitions) whose count is not their spec's."""
    return {s.name: counts[s.name] for s in specs
            if s.name in counts and counts[s.name] != s.partitions}


def topics_error(specs: list[TopicSpec], counts: dict[str, int],
                 problems: list[str]) -> TopicConfigError | None:
    """The one error for everything wrong with the existing topics, or ``None``.

    ``counts`` holds each existing topic's partition count, ``problems`` every line from
    :func:`config_problems` and the missing topics. A partition-count mismatch is its own
    :class:`TopicPartitionsError`, naming each topic with its count and the migration, because
    the usual fix for a wrong config (alter it) is the one thing that must not be done.
    """
    if not problems:
        return None
    wrong = partition_mismatches(specs, counts)
    if not wrong:
        return TopicConfigError(
            "Kafka topics do not have the configuration evidence-store requires:\n  "
            + "\n  ".join(problems)
            + "\nFix them with kafka-configs (a replication factor with "
            "kafka-reassign-partitions), or use another EVIDENCE_TOPIC_PREFIX."
        )
    expected = specs[0].partitions
    shared = {s.name for s in specs if s.partitions == expected}
    have = sorted({n for name, n in counts.items() if name in shared})
    if len(have) == 1:
        found = f"the existing topics have {have[0]}"
        hint = f"To keep these topics, set EVIDENCE_TOPIC_PARTITIONS={have[0]}. "
    else:
        found = ("the existing topics disagree among themselves ("
                 + ", ".join(f"{name} {n}" for name, n in sorted(counts.items())
                        if name in shared) + ")")
        hint = ("Topics under one prefix that disagree were changed or created by hand; "
                "which count a stream's earlier records used must be established before "
                "anything writes to them. ")
    return TopicPartitionsError(
        f"Kafka topics have a different partition count from the configured "
        f"EVIDENCE_TOPIC_PARTITIONS={expected}; {found}:\n  "
        + "\n  ".join(problems)
        + "\n" + hint + PARTITION_MIGRATION
    )


def config_problems(spec: TopicSpec, partitions: int, actual: dict[str, str]) -> list[str]:
    """What is wrong with an existing topic, one line per problem; empty when it conforms."""
    problems = []
    if partitions != spec.partitions:
        problems.append(f"{spec.name}: {partitions} partitions, expected {spec.partitions}")
    for key, want in sorted(spec.configs.items()):
        have = actual.get(key)
        if have != want:
            problems.append(f"{spec.name}: {key}={have}, expected {want}")
    return problems
