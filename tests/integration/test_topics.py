"""The topics against a real broker: created with the required configs, idempotently, and a
loud error when an existing topic is wrong."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    ResourceType,
)

from topics import TopicConfigError, check_topics, ensure_topics

pytestmark = pytest.mark.integration


def _configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.TOPIC, topic)
    return {k: v.value for k, v in admin.describe_configs([res])[res].result().items()}


def _until(done, timeout: float = 20.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the broker did not apply the change in time"
        time.sleep(0.1)


def test_record_topic_is_never_compacted_and_never_expires(kafka_bootstrap, topics):
    c = _configs(kafka_bootstrap, topics.names.log)
    assert c["cleanup.policy"] == "delete"
    assert c["retention.ms"] == "-1"
    assert c["retention.bytes"] == "-1"
    assert c["unclean.leader.election.enable"] == "false"
    assert c["max.message.bytes"] == str(64 * 1024 * 1024)


def test_other_topics_have_their_configs(kafka_bootstrap, topics):
    intake = _configs(kafka_bootstrap, topics.names.intake)
    assert intake["cleanup.policy"] == "delete"
    assert intake["retention.ms"] == str(7 * 24 * 3600 * 1000)
    assert _configs(kafka_bootstrap, topics.names.writer_state)["cleanup.policy"] == "compact"
    rejected = _configs(kafka_bootstrap, topics.names.rejected)
    assert (rejected["retention.ms"], rejected["retention.bytes"]) == ("-1", "-1")


def test_intake_log_and_state_share_a_partition_count(kafka_bootstrap, make_topics):
    settings = make_topics(partitions=4)
    md = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    counts = {name: len(md[name].partitions) for name in settings.names.all()}
    tree = counts.pop(settings.names.tree)
    assert set(counts.values()) == {4}, counts
    assert tree == 1  # the deployment tree's one order (docs/witnessing.md)


def test_ensure_topics_twice_creates_nothing_the_second_time(kafka_bootstrap, topics):
    assert ensure_topics(kafka_bootstrap, topics) == []
    check_topics(kafka_bootstrap, topics)


def test_a_compacted_record_topic_is_refused_loudly(kafka_bootstrap, topics):
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    res = ConfigResource(ResourceType.TOPIC, topics.names.log, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result()
    # the broker applies an altered config a moment after it answers: wait until it reads back
    _until(lambda: _configs(kafka_bootstrap, topics.names.log)["cleanup.policy"] == "compact")
    with pytest.raises(TopicConfigError) as e:
        ensure_topics(kafka_bootstrap, topics)
    assert f"{topics.names.log}: cleanup.policy=compact, expected delete" in str(e.value)


def test_a_partition_mismatch_is_refused(kafka_bootstrap, make_topics):
    settings = make_topics(partitions=2)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_partitions([NewPartitions(settings.names.intake, 3)])[
        settings.names.intake].result()
    _until(lambda: len(admin.list_topics(settings.names.intake, timeout=10)
                       .topics[settings.names.intake].partitions) == 3)
    with pytest.raises(TopicConfigError, match="3 partitions, expected 2"):
        check_topics(kafka_bootstrap, settings)


def test_missing_topics_are_reported(kafka_bootstrap, topics):
    from dataclasses import replace

    from topics import TopicNames

    other = replace(topics, names=TopicNames("does-not-exist-" + topics.names.prefix))
    with pytest.raises(TopicConfigError, match="topic does not exist"):
        check_topics(kafka_bootstrap, other)


def test_transactions_work_on_the_broker(kafka_bootstrap, topics, group_id):
    # The writer depends on transactions; a single-broker stack needs its transaction state
    # topic sized for one replica, or init_transactions hangs.
    p = Producer({"bootstrap.servers": kafka_bootstrap,
                  "transactional.id": group_id("tx"), "enable.idempotence": True})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topics.names.log, key=b"s", value=b"aborted", partition=0)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topics.names.log, key=b"s", value=b"committed", partition=0)
    p.commit_transaction(30)

    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group_id(),
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.assign([TopicPartition(topics.names.log, 0, 0)])
    seen = []
    for _ in range(40):
        msg = c.poll(0.5)
        if msg is not None and not msg.error():
            seen.append(msg.value())
            break
    c.close()
    assert seen == [b"committed"]


def test_large_records_fit_the_record_topic(kafka_bootstrap, topics):
    p = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 17 * 1024 * 1024,
                  "enable.idempotence": True})
    errors = []
    p.produce(topics.names.log, value=b"x" * (12 * 1024 * 1024),
              on_delivery=lambda err, msg: errors.append(err))
    p.flush(60)
    assert errors == [None]
