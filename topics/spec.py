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

from evidence_contract.errors import EvidenceError
from evidence_contract.topics import TopicNames

MIB = 1024 * 1024
DAY_MS = 24 * 60 * 60 * 1000


class TopicConfigError(EvidenceError):
    """An existing topic's partitions or configs differ from what evidence-store requires."""


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
    def from_env(cls, environ: dict[str, str] | None = None) -> "TopicSettings":
        env = os.environ if environ is None else environ
        return cls(
            names=TopicNames(env.get("EVIDENCE_TOPIC_PREFIX", "evidence")),
            partitions=int(env.get("EVIDENCE_TOPIC_PARTITIONS", "6")),
            replication_factor=int(env.get("EVIDENCE_REPLICATION_FACTOR", "1")),
            intake_retention_ms=int(env.get("EVIDENCE_INTAKE_RETENTION_MS", str(7 * DAY_MS))),
            max_message_bytes=int(env.get("EVIDENCE_MAX_MESSAGE_BYTES", str(64 * MIB))),
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


def topic_specs(settings: TopicSettings) -> list[TopicSpec]:
    """The four topics, in the order they are created."""
    n = settings.names
    forever = {"retention.ms": "-1", "retention.bytes": "-1"}
    return [
        TopicSpec(
            n.intake,
            settings.partitions,
            settings.replication_factor,
            {
                "cleanup.policy": "delete",
                "retention.ms": str(settings.intake_retention_ms),
                "max.message.bytes": str(settings.max_message_bytes),
            },
        ),
        TopicSpec(
            n.log,
            settings.partitions,
            settings.replication_factor,
            {
                "cleanup.policy": "delete",
                **forever,
                "unclean.leader.election.enable": "false",
                "max.message.bytes": str(settings.max_message_bytes),
            },
        ),
        TopicSpec(
            n.writer_state,
            settings.partitions,
            settings.replication_factor,
            {"cleanup.policy": "compact"},
        ),
        TopicSpec(
            n.rejected,
            settings.partitions,
            settings.replication_factor,
            {
                "cleanup.policy": "delete",
                **forever,
                "unclean.leader.election.enable": "false",
                "max.message.bytes": str(settings.rejected_max_message_bytes),
            },
        ),
    ]


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
