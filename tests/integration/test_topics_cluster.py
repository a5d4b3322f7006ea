"""The topic check on a real cluster of three brokers (Kafka alone, on free ports under the
test's directory): topics made by `ensure_topics` pass, a weaker one is refused naming the
topic and the setting, and nothing is created weaker."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from devstack import StackConfig, kafka
from tests.fixtures.kafka import one_cluster_at_a_time
from tests.fixtures.log import wait_until
from topics import TopicConfigError, TopicNames, TopicSettings, check_topics, ensure_topics
from topics import topic_specs

# The first test waits for the other clusters of the suite (one_cluster_at_a_time).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cfg = StackConfig.on_free_ports(tmp_path_factory.mktemp("cluster"), brokers=3)
    with one_cluster_at_a_time():
        try:
            kafka.start(cfg)
            yield cfg.bootstrap
        finally:
            kafka.stop(cfg)


def _settings(rf: int) -> TopicSettings:
    return TopicSettings(names=TopicNames(f"t{uuid.uuid4().hex[:8]}"), partitions=2,
                         replication_factor=rf)


def _make(bootstrap: str, settings: TopicSettings, rf: dict[str, int], configs: dict) -> None:
    """The topics as someone made them by hand: ``rf`` and ``configs`` by topic name."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic(s.name, s.partitions, rf.get(s.name, 3),
                 config={**s.configs, **configs.get(s.name, {})})
        for s in topic_specs(settings)])
    for f in futures.values():
        f.result()
    # CreateTopics answers once the controller has them; the brokers' metadata a moment later.
    def listed() -> bool:
        topics = admin.list_topics(timeout=5).topics
        return all(s.name in topics and topics[s.name].partitions
                   for s in topic_specs(settings))

    wait_until("the topics in the metadata", listed)


def test_topics_ensured_on_a_cluster_pass_the_check(cluster):
    settings = _settings(3)
    assert len(ensure_topics(cluster, settings)) == 7
    check_topics(cluster, settings)
    admin = AdminClient({"bootstrap.servers": cluster})
    res = ConfigResource(ResourceType.TOPIC, settings.names.intake)
    [configs] = [f.result() for f in admin.describe_configs([res]).values()]
    assert configs["min.insync.replicas"].value == "2"


def test_ensure_refuses_to_create_topics_of_one_replica_on_a_cluster(cluster):
    settings = _settings(1)
    with pytest.raises(TopicConfigError, match="EVIDENCE_REPLICATION_FACTOR=1 on a cluster "
                                               "of 3 brokers"):
        ensure_topics(cluster, settings)
    listed = AdminClient({"bootstrap.servers": cluster}).list_topics(timeout=10).topics
    assert settings.names.log not in listed, "nothing created"


def _refusal(bootstrap: str, settings: TopicSettings) -> str:
    """``check_topics``' refusal once the broker it asks has every topic in its metadata.
    ``_make`` waited until one broker listed them; the check's own client may ask another, which
    hears of new topics a moment later and says "topic does not exist" meanwhile (a fresh-clone
    run of the suite met it once)."""
    def refused() -> str | None:
        with pytest.raises(TopicConfigError) as e:
            check_topics(bootstrap, settings)
        text = str(e.value)
        return None if "topic does not exist" in text else text

    return wait_until("a refusal that names no topic as missing", refused)


def test_each_weaker_topic_is_refused_naming_it_and_its_setting(cluster):
    settings = _settings(3)
    n = settings.names
    _make(cluster, settings, rf={n.log: 2},
          configs={n.intake: {"min.insync.replicas": "1"},
                   n.writer_state: {"unclean.leader.election.enable": "true"}})
    text = _refusal(cluster, settings)
    assert f"{n.log}: replication factor 2 on a cluster of 3 brokers" in text
    assert f"{n.intake}: min.insync.replicas=1 on a cluster of 3 brokers" in text
    assert f"{n.writer_state}: unclean.leader.election.enable=true on a cluster" in text
    assert n.checkpoints not in text, "only the weaker topics are named"
