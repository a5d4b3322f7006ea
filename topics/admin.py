"""Create and verify the topics with confluent-kafka's AdminClient.

Creation is idempotent: a topic that exists is left alone and checked instead. A topic that
exists with the wrong configs is never altered silently: for the record topic a wrong
``cleanup.policy`` or retention would be a loss of evidence someone chose, so it is reported
loudly and start-up stops. On a cluster of three brokers or more, a topic replicated less
than :mod:`topics.cluster` requires is refused the same way. A wrong partition count is a :class:`~topics.spec.TopicPartitionsError`
with the migration spelled out, because altering it in place would move streams.
"""

from __future__ import annotations

import time
from typing import Any, Callable, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from topics.cluster import cluster_problems, creation_configs, settings_problem
from topics.spec import (
    TopicConfigError, TopicSettings, TopicSpec, config_problems, topic_specs, topics_error,
)


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def ensure_topics(bootstrap: str, settings: TopicSettings, timeout: float = 30.0) -> list[str]:
    """Create missing topics, then check all of them; returns the names that were created."""
    admin = _admin(bootstrap)
    specs = topic_specs(settings)
    metadata = admin.list_topics(timeout=timeout)
    existing = set(metadata.topics)
    missing = [s for s in specs if s.name not in existing]
    created = []
    weak = settings_problem(settings.replication_factor, len(metadata.brokers))
    if missing and weak:
        # Never create a topic the check below would refuse: say why before making it.
        raise TopicConfigError(f"not creating {', '.join(s.name for s in missing)}: {weak}")
    if missing:
        futures = admin.create_topics(
            [
                NewTopic(s.name, num_partitions=s.partitions,
                         replication_factor=s.replication_factor,
                         config=creation_configs(s.configs, s.replication_factor))
                for s in missing
            ],
            request_timeout=timeout,
        )
        for name, fut in futures.items():
            try:
                fut.result()
                created.append(name)
            except KafkaException as e:
                # Another process created it between list and create: that is fine, the
                # check below decides whether it is right.
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
    _await_metadata(admin, specs, timeout)
    _check(admin, specs, timeout)
    return created


def _await_metadata(admin: AdminClient, specs: list[TopicSpec], timeout: float) -> None:
    # CreateTopics returns when the controller has the topics; the brokers' metadata caches
    # catch up a moment later, each at its own pace (on a cluster just started, one broker
    # can lag the others), and each metadata request goes to any of them. Checking before
    # then would report them missing: wait until several answers in a row list them.
    deadline = time.monotonic() + timeout
    seen = 0
    while seen < 3:
        md = admin.list_topics(timeout=timeout).topics
        if all(s.name in md and len(md[s.name].partitions) > 0 and md[s.name].error is None
               for s in specs):
            seen += 1
            continue
        seen = 0
        if time.monotonic() > deadline:
            return  # _check names what is missing
        time.sleep(0.1)


def check_topics(bootstrap: str, settings: TopicSettings, timeout: float = 30.0) -> None:
    """Raise :class:`TopicConfigError` unless every topic exists with its spec's configs and,
    on a cluster of three brokers or more, replicated as :mod:`topics.cluster` requires."""
    _check(_admin(bootstrap), topic_specs(settings), timeout)


SETTLING = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.NOT_LEADER_FOR_PARTITION,
            KafkaError.LEADER_NOT_AVAILABLE)
"""What a broker answers about topics just created until its metadata has caught up."""

T = TypeVar("T")


def while_settling(call: Callable[[], T], timeout: float, codes: tuple[int, ...] = SETTLING) -> T:
    """``call()``, asked again every 0.2 s while it raises a KafkaException with one of
    ``codes``, until ``timeout`` has passed; then that error goes through. Any other error goes
    through at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except KafkaException as e:
            if e.args[0].code() not in codes or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _describe_configs(admin: AdminClient, resources: list[ConfigResource], timeout: float
                      ) -> dict[str, Any]:
    """``{topic: configs}``. DescribeConfigs goes to any broker, and one whose metadata cache
    has not caught up with a topic just created answers UNKNOWN_TOPIC_OR_PART (seen on a
    cluster of three just started, after the listing had shown the topic)."""
    def ask() -> dict[str, Any]:
        results = admin.describe_configs(resources, request_timeout=timeout)
        return {r.name: fut.result() for r, fut in results.items()}
    return while_settling(ask, timeout, (KafkaError.UNKNOWN_TOPIC_OR_PART,))


def _check(admin: AdminClient, specs: list[TopicSpec], timeout: float) -> None:
    cluster = admin.list_topics(timeout=timeout)
    metadata, brokers = cluster.topics, len(cluster.brokers)
    problems: list[str] = []
    present = [s for s in specs if s.name in metadata]
    counts = {s.name: len(metadata[s.name].partitions) for s in present}
    problems += [f"{s.name}: topic does not exist" for s in specs if s.name not in metadata]
    if present:
        resources = [ConfigResource(ResourceType.TOPIC, s.name) for s in present]
        by_name = _describe_configs(admin, resources, timeout)
        for s in present:
            actual = {k: v.value for k, v in by_name[s.name].items()}
            problems += config_problems(s, counts[s.name], actual)
            replicas = min((len(p.replicas) for p in metadata[s.name].partitions.values()),
                           default=0)
            problems += cluster_problems(s.name, brokers, replicas, actual, pinned=s.configs)
    error = topics_error(specs, counts, problems)
    if error is not None:
        raise error
