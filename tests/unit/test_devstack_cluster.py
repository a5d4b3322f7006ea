"""The devstack's three-broker form (`make up BROKERS=3`): its ports, its configs, and that it
matches docker-compose.yml's three brokers."""

from pathlib import Path

import pytest
import yaml

from devstack import StackConfig, StackError
from devstack.config import CLUSTER_FILE, cluster_ports
from devstack.kafka import server_properties

ROOT = Path(__file__).parents[2]


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines()
                if line and not line.startswith("#"))


def _cluster(tmp_path: Path) -> StackConfig:
    return StackConfig(root=tmp_path, kafka_port=1000, controller_port=1001,
                       more_kafka=((2000, 2001), (3000, 3001)))


def test_one_broker_is_the_default_and_unchanged(tmp_path, monkeypatch):
    monkeypatch.delenv("EVIDENCE_BROKERS", raising=False)
    cfg = StackConfig.from_env(tmp_path)
    assert cfg.brokers == 1 and cfg.bootstrap == "127.0.0.1:9092"
    props = _props(server_properties(cfg))
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["min.insync.replicas"] == "1"


def test_each_node_has_its_ports_and_data_and_one_quorum(tmp_path):
    cfg = _cluster(tmp_path)
    assert cfg.bootstrap == "127.0.0.1:1000,127.0.0.1:2000,127.0.0.1:3000"
    dirs = [n.dir for n in cfg.kafka_nodes]
    assert dirs == [tmp_path / ".stack" / "kafka", tmp_path / ".stack" / "kafka-2",
                    tmp_path / ".stack" / "kafka-3"]
    all_props = [_props(server_properties(cfg, n)) for n in cfg.kafka_nodes]
    assert [p["node.id"] for p in all_props] == ["1", "2", "3"]
    assert {p["controller.quorum.voters"] for p in all_props} == {
        "1@127.0.0.1:1001,2@127.0.0.1:2001,3@127.0.0.1:3001"}
    assert all_props[1]["listeners"] == "PLAINTEXT://127.0.0.1:2000,CONTROLLER://127.0.0.1:2001"
    assert all_props[2]["log.dirs"] == str(tmp_path / ".stack" / "kafka-3" / "data")


def test_a_cluster_replicates_everything_three_ways_two_in_sync(tmp_path):
    props = _props(server_properties(_cluster(tmp_path)))
    for key in ("default.replication.factor", "offsets.topic.replication.factor",
                "transaction.state.log.replication.factor",
                "share.coordinator.state.topic.replication.factor"):
        assert props[key] == "3", key
    for key in ("min.insync.replicas", "transaction.state.log.min.isr",
                "share.coordinator.state.topic.min.isr"):
        assert props[key] == "2", key
    assert props["unclean.leader.election.enable"] == "false"


def test_brokers_from_the_environment_else_as_the_stack_was_formatted(tmp_path, monkeypatch):
    monkeypatch.setenv("EVIDENCE_BROKERS", "3")
    assert StackConfig.from_env(tmp_path).more_kafka == ((9094, 9194), (9095, 9195))
    monkeypatch.setenv("EVIDENCE_BROKERS", "")
    assert StackConfig.from_env(tmp_path).brokers == 1
    (tmp_path / ".stack" / "kafka").mkdir(parents=True)
    (tmp_path / ".stack" / "kafka" / CLUSTER_FILE).write_text("3\n")
    assert StackConfig.from_env(tmp_path).brokers == 3, "make status/down/test after up BROKERS=3"


@pytest.mark.parametrize("raw", ["0", "6", "three", "-1"])
def test_a_bad_broker_count_is_a_clear_error(tmp_path, monkeypatch, raw):
    monkeypatch.setenv("EVIDENCE_BROKERS", raw)
    with pytest.raises(StackError, match="EVIDENCE_BROKERS"):
        StackConfig.from_env(tmp_path)


def test_a_stack_formatted_for_one_broker_refuses_three(tmp_path):
    from devstack.kafka import start

    data = tmp_path / ".stack" / "kafka" / "data"
    data.mkdir(parents=True)
    (data / "meta.properties").write_text("cluster.id=x\nnode.id=1\n")
    with pytest.raises(StackError, match="formatted for 1 broker.*not 3.*make down CLEAN=1"):
        start(_cluster(tmp_path))


def test_free_ports_for_every_node(tmp_path):
    cfg = StackConfig.on_free_ports(tmp_path, brokers=3)
    ports = [p for n in cfg.kafka_nodes for p in (n.port, n.controller_port)]
    ports += [cfg.postgres_port, cfg.api_port, cfg.witness_port]
    assert len(set(ports)) == len(ports) == 9


def test_compose_brokers_are_the_devstack_cluster():
    svc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    cfg = StackConfig(root=ROOT, more_kafka=cluster_ports(9092, 3))
    published = [{int(p.split(":")[-2]) for p in svc[name]["ports"]}
                 for name in ("kafka", "kafka-2", "kafka-3")]
    assert published == [{n.port} for n in cfg.kafka_nodes]
    props = _props(server_properties(cfg))
    env = svc["kafka"]["environment"]
    assert str(env["KAFKA_MIN_INSYNC_REPLICAS"]) == props["min.insync.replicas"]
    assert str(env["KAFKA_DEFAULT_REPLICATION_FACTOR"]) == props["default.replication.factor"]
    assert (str(env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"])
            == props["transaction.state.log.min.isr"])
    assert (str(env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"])
            == props["offsets.topic.replication.factor"])
