from types import SimpleNamespace

import pytest

from topics import (
    MIB,
    TopicConfigError,
    TopicNames,
    TopicPartitionsError,
    TopicSettings,
    config_problems,
    partition_mismatches,
    topic_specs,
    topics_error,
)


def test_names_share_a_prefix():
    assert TopicNames().all() == ("evidence.intake", "evidence.log",
                                  "evidence.writer-state", "evidence.rejected",
                                  "evidence.checkpoints", "evidence.erasures", "evidence.tree")
    assert TopicNames("t1").log == "t1.log"


def test_settings_from_env():
    s = TopicSettings.from_env({"EVIDENCE_TOPIC_PARTITIONS": "12",
                                "EVIDENCE_MAX_MESSAGE_BYTES": str(32 * MIB),
                                "EVIDENCE_TOPIC_PREFIX": "acme"})
    assert (s.partitions, s.max_message_bytes, s.names.prefix) == (12, 32 * MIB, "acme")
    assert TopicSettings.from_env({}).partitions == 6


def test_every_topic_but_the_tree_has_the_same_partition_count():
    specs = topic_specs(TopicSettings(partitions=9))
    assert {s.partitions for s in specs if s.name != "evidence.tree"} == {9}
    assert [s.partitions for s in specs if s.name == "evidence.tree"] == [1]


def test_record_and_rejected_topics_keep_everything_forever():
    specs = {s.name: s for s in topic_specs(TopicSettings())}
    for name in ("evidence.log", "evidence.rejected", "evidence.checkpoints",
                 "evidence.erasures"):
        c = specs[name].configs
        assert c["cleanup.policy"] == "delete"
        assert c["retention.ms"] == c["retention.bytes"] == "-1"
        assert c["unclean.leader.election.enable"] == "false"
    assert specs["evidence.log"].configs["max.message.bytes"] == str(64 * MIB)
    assert int(specs["evidence.rejected"].configs["max.message.bytes"]) > 64 * MIB


def test_config_problems_names_each_difference():
    spec = topic_specs(TopicSettings())[1]
    actual = dict(spec.configs, **{"cleanup.policy": "compact", "retention.ms": "604800000"})
    assert config_problems(spec, 6, actual) == [
        "evidence.log: cleanup.policy=compact, expected delete",
        "evidence.log: retention.ms=604800000, expected -1",
    ]
    assert config_problems(spec, 3, spec.configs) == ["evidence.log: 3 partitions, expected 6"]
    assert config_problems(spec, 6, spec.configs) == []


def _counts(n: int, **overrides: int) -> dict[str, int]:
    # The tree topic has one partition whatever the count (docs/witnessing.md).
    return {name: overrides.get(name, 1 if name == TopicNames().tree else n)
            for name in TopicNames().all()}


def test_topics_error_is_none_when_nothing_is_wrong():
    specs = topic_specs(TopicSettings())
    assert topics_error(specs, _counts(6), []) is None


def test_a_wrong_config_alone_is_not_a_partition_error():
    specs = topic_specs(TopicSettings())
    e = topics_error(specs, _counts(6), ["evidence.log: cleanup.policy=compact, expected delete"])
    assert type(e) is TopicConfigError
    assert "kafka-configs" in str(e)


def test_a_partition_count_change_is_refused_with_the_migration():
    specs = topic_specs(TopicSettings(partitions=12))
    counts = _counts(6)
    problems = [line for s in specs for line in config_problems(s, counts[s.name], s.configs)]
    e = topics_error(specs, counts, problems)
    assert isinstance(e, TopicPartitionsError) and isinstance(e, TopicConfigError)
    text = str(e)
    for name in TopicNames().all()[:-1]:
        assert f"{name}: 6 partitions, expected 12" in text
    assert "evidence.tree:" not in text
    assert "EVIDENCE_TOPIC_PARTITIONS=12; the existing topics have 6" in text
    assert "set EVIDENCE_TOPIC_PARTITIONS=6" in text
    assert "kafka-topics --alter --partitions" in text
    assert "new EVIDENCE_TOPIC_PREFIX" in text and "docs/sizing.md" in text
    assert partition_mismatches(specs, counts) == {
        k: v for k, v in counts.items() if k != TopicNames().tree}


def test_topics_that_disagree_among_themselves_are_each_named():
    specs = topic_specs(TopicSettings())
    counts = _counts(6, **{"evidence.log": 12})
    e = topics_error(specs, counts, ["evidence.log: 12 partitions, expected 6"])
    assert isinstance(e, TopicPartitionsError)
    assert "disagree among themselves" in str(e)
    assert "evidence.intake 6" in str(e) and "evidence.log 12" in str(e)
    assert "evidence.tree" not in str(e)
    assert "set EVIDENCE_TOPIC_PARTITIONS=" not in str(e)
    assert partition_mismatches(specs, counts) == {"evidence.log": 12}


class _Future:
    def __init__(self, value):
        self._value = value

    def result(self):
        return self._value


class _FakeAdmin:
    """What ``topics.admin._check`` reads of an AdminClient: metadata and configs."""

    def __init__(self, specs, partitions: int, brokers: int = 1, replicas: int = 1,
                 configs: dict[str, str] | None = None):
        self._specs = {s.name: s for s in specs}
        self._partitions = partitions
        self._brokers = brokers
        self._replicas = replicas
        self._configs = configs or {}

    def list_topics(self, timeout):
        def partitions(name):
            return {i: SimpleNamespace(replicas=list(range(1, self._replicas + 1)))
                    for i in range(1 if name.endswith(".tree") else self._partitions)}
        return SimpleNamespace(
            brokers=dict.fromkeys(range(1, self._brokers + 1)),
            topics={name: SimpleNamespace(partitions=partitions(name), error=None)
                    for name in self._specs})

    def describe_configs(self, resources, request_timeout):
        return {r: _Future({k: SimpleNamespace(value=v) for k, v in
                            {**self._specs[r.name].configs, **self._configs}.items()})
                for r in resources}


def test_check_topics_refuses_a_cluster_with_another_partition_count(monkeypatch):
    import topics.admin

    existing = topic_specs(TopicSettings(partitions=6))
    monkeypatch.setattr(topics.admin, "_admin", lambda bootstrap: _FakeAdmin(existing, 6))
    topics.admin.check_topics("fake:9092", TopicSettings(partitions=6))
    with pytest.raises(TopicPartitionsError, match="6 partitions, expected 8"):
        topics.admin.check_topics("fake:9092", TopicSettings(partitions=8))


def test_check_topics_on_a_cluster_refuses_a_topic_replicated_less_than_three(monkeypatch):
    import topics.admin

    specs = topic_specs(TopicSettings(replication_factor=3))
    good = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    monkeypatch.setattr(topics.admin, "_admin", lambda bootstrap: _FakeAdmin(
        specs, 6, brokers=3, replicas=3, configs=good))
    topics.admin.check_topics("fake:9092", TopicSettings(replication_factor=3))
    monkeypatch.setattr(topics.admin, "_admin", lambda bootstrap: _FakeAdmin(
        specs, 6, brokers=3, replicas=1, configs={**good, "min.insync.replicas": "1"}))
    with pytest.raises(TopicConfigError) as e:
        topics.admin.check_topics("fake:9092", TopicSettings(replication_factor=3))
    assert "evidence.log: replication factor 1 on a cluster of 3 brokers" in str(e.value)
    assert "evidence.intake: min.insync.replicas=1 on a cluster of 3 brokers" in str(e.value)
    # one broker: a single replica is all there can be, as before
    monkeypatch.setattr(topics.admin, "_admin", lambda bootstrap: _FakeAdmin(
        topic_specs(TopicSettings()), 6, configs={"min.insync.replicas": "1"}))
    topics.admin.check_topics("fake:9092", TopicSettings())
