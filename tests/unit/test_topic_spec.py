from topics import MIB, TopicNames, TopicSettings, config_problems, topic_specs


def test_names_share_a_prefix():
    assert TopicNames().all() == ("evidence.intake", "evidence.log",
                                  "evidence.writer-state", "evidence.rejected")
    assert TopicNames("t1").log == "t1.log"


def test_settings_from_env():
    s = TopicSettings.from_env({"EVIDENCE_TOPIC_PARTITIONS": "12",
                                "EVIDENCE_MAX_MESSAGE_BYTES": str(32 * MIB),
                                "EVIDENCE_TOPIC_PREFIX": "acme"})
    assert (s.partitions, s.max_message_bytes, s.names.prefix) == (12, 32 * MIB, "acme")
    assert TopicSettings.from_env({}).partitions == 6


def test_every_topic_has_the_same_partition_count():
    assert {s.partitions for s in topic_specs(TopicSettings(partitions=9))} == {9}


def test_record_and_rejected_topics_keep_everything_forever():
    specs = {s.name: s for s in topic_specs(TopicSettings())}
    for name in ("evidence.log", "evidence.rejected"):
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
