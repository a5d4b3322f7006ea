"""docker-compose.yml cannot run here (no Docker engine); this keeps it in step with the
devstack: same services, ports, Kafka version, topic names and EVIDENCE_* variables."""

from pathlib import Path

import yaml

from devstack import StackConfig
from devstack.config import KAFKA_VERSION
from devstack.services import SERVICES
from topics import TopicSettings

ROOT = Path(__file__).parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SVC = COMPOSE["services"]
# Services that run only when configured (the retention shredder) are not in compose yet.
PROJECT_SERVICES = [s.name for s in SERVICES if s.needs is None]


def _published(service: str) -> set[int]:
    return {int(p.split(":")[-2]) for p in SVC[service].get("ports", [])}


def test_compose_runs_the_same_services_as_the_devstack():
    assert {"kafka", "postgres", *PROJECT_SERVICES} <= set(SVC)
    for name in PROJECT_SERVICES:
        assert SVC[name]["build"] == "."
        assert SVC[name]["command"][0] == name, "each service runs `evidence <name>`"


BROKERS = ("kafka", "kafka-2", "kafka-3")


def test_compose_uses_the_devstack_kafka_version_in_kraft_mode():
    for name in BROKERS:
        assert SVC[name]["image"] == f"apache/kafka:{KAFKA_VERSION}"
        env = SVC[name]["environment"]
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"


def test_compose_kafka_is_three_brokers_one_quorum_replicated_three_ways():
    envs = [SVC[name]["environment"] for name in BROKERS]
    assert sorted(e["KAFKA_NODE_ID"] for e in envs) == [1, 2, 3]
    assert len({e["CLUSTER_ID"] for e in envs}) == 1
    voters = {e["KAFKA_CONTROLLER_QUORUM_VOTERS"] for e in envs}
    assert voters == {"1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093"}
    for name, e in zip(BROKERS, envs):
        assert f"INTERNAL://{name}:19092" in e["KAFKA_ADVERTISED_LISTENERS"]
        assert e["KAFKA_MIN_INSYNC_REPLICAS"] == 2
        assert e["KAFKA_DEFAULT_REPLICATION_FACTOR"] == 3
        assert e["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 3
        assert e["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == 3
        assert e["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == 2
    assert len({v for name in BROKERS for v in SVC[name]["volumes"]}) == 3, "a disk each"
    for name in ("kafka-2", "kafka-3"):
        assert SVC["topics"]["depends_on"][name]["condition"] == "service_healthy"
    for name in [*PROJECT_SERVICES, "topics"]:
        env = SVC[name]["environment"]
        assert set(env["EVIDENCE_KAFKA_BOOTSTRAP"].split(",")) == {
            f"{b}:19092" for b in BROKERS}, name
        assert TopicSettings.from_env({k: str(v) for k, v in env.items()}
                                      ).replication_factor == 3


def test_writers_and_projectors_scale_with_an_identity_per_writer():
    for name in ("writer", "projector"):
        assert "container_name" not in SVC[name] and not SVC[name].get("ports"), \
            f"--scale {name}=N needs no fixed name or host port"
    entry = " ".join(SVC["writer"]["entrypoint"])
    assert "EVIDENCE_WRITER_TRANSACTIONAL_ID=evidence-writer-$$HOSTNAME" in entry
    assert 'exec evidence "$$@"' in entry
    assert "EVIDENCE_WRITER_TRANSACTIONAL_ID" not in SVC["writer"]["environment"]
    assert "EVIDENCE_PROJECTOR_GROUP" not in SVC["projector"]["environment"], \
        "one derived group for every projector replica"


def test_compose_publishes_the_devstack_ports_on_loopback():
    cfg = StackConfig(root=ROOT)
    assert _published("kafka") == {cfg.kafka_port}
    assert len(_published("kafka") | _published("kafka-2") | _published("kafka-3")) == 3
    assert _published("postgres") == {cfg.postgres_port}
    assert _published("api") == {cfg.api_port}
    for svc in SVC.values():
        for p in svc.get("ports", []):
            assert p.startswith("127.0.0.1:"), f"{p} must bind loopback only"


def test_compose_database_matches_the_devstack_credentials():
    cfg = StackConfig(root=ROOT)
    env = SVC["postgres"]["environment"]
    assert (env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], env["POSTGRES_DB"]) == (
        cfg.db_user, cfg.db_password, cfg.db_name)


def test_project_services_get_the_stack_env_variables_and_topic_names():
    required = {"EVIDENCE_KAFKA_BOOTSTRAP", "EVIDENCE_DATABASE_URL", "EVIDENCE_API_URL",
                "EVIDENCE_API_KEY", "EVIDENCE_TOPIC_PREFIX"}
    for name in [*PROJECT_SERVICES, "topics"]:
        env = SVC[name]["environment"]
        assert required <= set(env), name
        settings = TopicSettings.from_env({k: str(v) for k, v in env.items()})
        assert settings.names.all() == TopicSettings().names.all()
        assert settings.partitions == TopicSettings().partitions


def test_topics_are_created_by_the_project_before_services_start():
    assert SVC["topics"]["command"] == ["topics", "ensure"]
    for name in ("writer", "projector"):
        assert SVC[name]["depends_on"]["topics"]["condition"] == "service_completed_successfully"


def test_the_writer_gets_the_log_key_variables_and_a_mounted_key_file():
    env = SVC["writer"]["environment"]
    assert {"EVIDENCE_LOG_NAME", "EVIDENCE_LOG_SIGNING_KEY_FILE",
            "EVIDENCE_LOG_VERIFIER_KEY_FILE"} <= set(env)
    mounts = {v.rsplit(":", 2)[1] for v in SVC["writer"]["volumes"]}  # host:container:ro
    assert env["EVIDENCE_LOG_SIGNING_KEY_FILE"] in mounts
    assert env["EVIDENCE_LOG_VERIFIER_KEY_FILE"] in mounts
