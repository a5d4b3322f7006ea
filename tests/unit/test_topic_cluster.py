"""The rule a cluster of three or more brokers holds the project's topics to (topics.cluster)."""

import pytest

from topics.cluster import cluster_problems, creation_configs, settings_problem

SAFE = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}


@pytest.mark.parametrize("brokers", [1, 2])
def test_below_three_brokers_anything_goes(brokers):
    assert cluster_problems("t", brokers, 1, {"min.insync.replicas": "1",
                                              "unclean.leader.election.enable": "true"}) == []
    assert settings_problem(1, brokers) is None


@pytest.mark.parametrize("brokers", [3, 5])
def test_three_replicas_two_in_sync_and_clean_election_pass(brokers):
    assert cluster_problems("t", brokers, 3, SAFE) == []
    assert cluster_problems("t", brokers, 5, {**SAFE, "min.insync.replicas": "3"}) == []


def test_each_weaker_setting_is_named_with_its_topic():
    assert cluster_problems("evidence.log", 3, 2, SAFE) == [
        "evidence.log: replication factor 2 on a cluster of 3 brokers, at least 3 required "
        "(one broker lost would lose acknowledged records)"]
    [isr] = cluster_problems("evidence.intake", 3, 3, {**SAFE, "min.insync.replicas": "1"})
    assert isr.startswith("evidence.intake: min.insync.replicas=1 on a cluster of 3 brokers, "
                          "at least 2 required")
    [unclean] = cluster_problems("evidence.writer-state", 4, 3,
                                 {**SAFE, "unclean.leader.election.enable": "true"})
    assert unclean.startswith("evidence.writer-state: unclean.leader.election.enable=true on a "
                              "cluster of 4 brokers, must be false")


def test_everything_wrong_at_once_is_three_lines():
    assert len(cluster_problems("t", 3, 1, {"min.insync.replicas": "1",
                                            "unclean.leader.election.enable": "true"})) == 3


@pytest.mark.parametrize("isr", [None, "", "x"])
def test_an_unknown_min_insync_replicas_is_refused(isr):
    [line] = cluster_problems("t", 3, 3, {**SAFE, "min.insync.replicas": isr})
    assert "min.insync.replicas" in line


def test_a_setting_the_spec_pins_is_reported_once_by_the_spec_check():
    unclean = {**SAFE, "unclean.leader.election.enable": "true"}
    assert cluster_problems("t", 3, 3, unclean,
                            pinned={"unclean.leader.election.enable": "false"}) == []


def test_topics_are_never_created_weaker_on_a_cluster():
    assert "EVIDENCE_REPLICATION_FACTOR=1 on a cluster of 3 brokers" in settings_problem(1, 3)
    assert settings_problem(3, 3) is None
    assert creation_configs({"cleanup.policy": "delete"}, 3) == {
        "cleanup.policy": "delete", "min.insync.replicas": "2"}
    assert creation_configs({"cleanup.policy": "delete"}, 1) == {"cleanup.policy": "delete"}


class _FlakyDescribe:
    """An AdminClient whose DescribeConfigs meets a broker that has not seen the topic yet
    ``lagging`` times, then answers."""

    def __init__(self, lagging: int, code: int) -> None:
        self.lagging, self.code, self.calls = lagging, code, 0

    def describe_configs(self, resources, request_timeout):
        from concurrent.futures import Future

        from confluent_kafka import KafkaError, KafkaException
        self.calls += 1
        out = {}
        for r in resources:
            fut: Future = Future()
            if self.calls <= self.lagging:
                fut.set_exception(KafkaException(KafkaError(self.code)))
            else:
                fut.set_result({"cleanup.policy": "delete"})
            out[r] = fut
        return out


def test_describe_configs_asks_again_while_a_broker_has_not_seen_a_new_topic():
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import ConfigResource, ResourceType

    from topics.admin import _describe_configs
    admin = _FlakyDescribe(2, KafkaError.UNKNOWN_TOPIC_OR_PART)
    got = _describe_configs(admin, [ConfigResource(ResourceType.TOPIC, "t")], timeout=30)
    assert (got, admin.calls) == ({"t": {"cleanup.policy": "delete"}}, 3)


def test_describe_configs_lets_any_other_error_through_at_once():
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ConfigResource, ResourceType

    from topics.admin import _describe_configs
    admin = _FlakyDescribe(1, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        _describe_configs(admin, [ConfigResource(ResourceType.TOPIC, "t")], timeout=30)
    assert admin.calls == 1
