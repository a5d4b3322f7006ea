"""The Kafka topics of evidence-store: their names, their configs, and how they are made.

- :class:`TopicNames` — the four topic names under one prefix (``evidence`` by default).
- :class:`TopicSettings` and :func:`topic_specs` — what each topic must look like (pure).
- :func:`config_problems` — how an existing topic differs from its spec (pure).
- :func:`cluster_problems` — what a cluster of three or more brokers refuses in a topic:
  replication factor < 3, ``min.insync.replicas`` < 2, unclean election (``topics.cluster``,
  pure); :func:`check_topics` applies it to the cluster it finds.
- :func:`ensure_topics` / :func:`check_topics` — create or verify them with the AdminClient
  (``topics.admin``, the only module here that imports confluent-kafka).
- :class:`TopicConfigError` — an existing topic has the wrong partitions or configs;
  :class:`TopicPartitionsError` (a subclass) when the partition count differs, which is never
  fixed in place (:data:`PARTITION_MIGRATION`; :func:`topics_error` builds either, pure).
"""

from topics.admin import check_topics, ensure_topics
from topics.cluster import cluster_problems
from topics.spec import (
    MIB,
    PARTITION_MIGRATION,
    TopicConfigError,
    TopicNames,
    TopicPartitionsError,
    TopicSettings,
    TopicSpec,
    config_problems,
    partition_mismatches,
    topic_specs,
    topics_error,
)

__all__ = [
    "MIB",
    "PARTITION_MIGRATION",
    "TopicConfigError",
    "TopicNames",
    "TopicPartitionsError",
    "TopicSettings",
    "TopicSpec",
    "check_topics",
    "cluster_problems",
    "config_problems",
    "ensure_topics",
    "partition_mismatches",
    "topic_specs",
    "topics_error",
]
