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
PROJECT_SERVICES = [s.name for s in SERVICES]


def _published(service: str) -> set[int]:
    return {int(p.split(":")[-2]) for p in SVC[service].get("ports", [])}


def test_compose_runs_the_same_services_as_the_devstack():
    assert {"kafka", "postgres", *PROJECT_SERVICES} <= set(SVC)
    for name in PROJECT_SERVICES:
        assert SVC[name]["build"] == "."
        assert SVC[name]["command"][0] == name, "each service runs `evidence <name>`"


def test_compose_uses_the_devstack_kafka_version_in_kraft_mode():
    assert SVC["kafka"]["image"] == f"apache/kafka:{KAFKA_VERSION}"
    env = SVC["kafka"]["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"


def test_compose_publishes_the_devstack_ports_on_loopback():
    cfg = StackConfig(root=ROOT)
    assert _published("kafka") == {cfg.kafka_port}
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
