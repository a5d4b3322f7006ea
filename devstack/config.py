"""Paths and ports of the local stack (pure but for :meth:`StackConfig.from_env`, which reads
the environment and the broker count the stack's Kafka was formatted for)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from evidence_contract.errors import EvidenceError

KAFKA_VERSION = "4.1.1"  # keep in step with devstack/pom.xml and docker-compose.yml
MAX_BROKERS = 5
CLUSTER_FILE = "cluster"
"""Under node 1's directory: the number of KRaft nodes its storage was formatted for."""


class StackError(EvidenceError):
    """The local stack could not be brought up or down; the message says what to read."""


def _repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def _cache_dir() -> Path:
    cache = os.environ.get("EVIDENCE_CACHE_DIR")
    return Path(cache) if cache else Path.home() / ".cache" / "evidence-store"


@dataclass(frozen=True)
class KafkaNode:
    """One KRaft node of the stack's Kafka, broker and controller at once."""

    node_id: int
    port: int
    controller_port: int
    dir: Path

    @property
    def log(self) -> Path:
        return self.dir / "server.log"

    @property
    def pid_file(self) -> Path:
        return self.dir / "pid"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def cluster_ports(kafka_port: int, brokers: int) -> tuple[tuple[int, int], ...]:
    """The (broker, controller) ports of nodes 2..``brokers`` beside node 1 on ``kafka_port``:
    the brokers on ``kafka_port`` + 2, + 3, ... (9094 and 9095, as docker-compose.yml
    publishes them), each node's controller 100 above its broker (9194, 9195)."""
    if not 1 <= brokers <= MAX_BROKERS:
        raise StackError(f"EVIDENCE_BROKERS={brokers}: between 1 and {MAX_BROKERS}")
    return tuple((kafka_port + i, kafka_port + i + 100) for i in range(2, brokers + 1))


def _brokers_from_env(raw: str, root: Path) -> int:
    """``EVIDENCE_BROKERS``; unset, the count the stack's Kafka was formatted for (so `make
    test`, `make status` and `make down` after `make up BROKERS=3` see the three), else 1."""
    if raw.strip() == "":
        try:
            return int((root / ".stack" / "kafka" / CLUSTER_FILE).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 1
    if not raw.strip().isdigit():
        raise StackError(f"EVIDENCE_BROKERS={raw!r} is not a number of brokers")
    return int(raw)


@dataclass(frozen=True)
class StackConfig:
    root: Path
    kafka_port: int = 9092
    controller_port: int = 9093
    more_kafka: tuple[tuple[int, int], ...] = ()
    """Nodes 2..n of a Kafka cluster, (broker port, controller port) each; empty: one broker.
    Each node is broker and controller (KRaft), data under ``.stack/kafka-<n>/``."""
    postgres_port: int = 5432
    api_port: int = 8000
    witness_port: int = 7380
    """The stack's own witness (``evidence witness run``), which the publisher pushes to."""
    cache: Path = Path.home() / ".cache" / "evidence-store"
    db_name: str = "evidence"
    db_user: str = "evidence"
    db_password: str = "evidence"

    @classmethod
    def on_free_ports(cls, root: Path, brokers: int = 1) -> "StackConfig":
        """A stack under ``root`` on free ports (``brokers`` Kafka nodes), which may run
        beside `make up`'s; the cache of Kafka's jars is the usual one."""
        from devstack.ports import free_port

        if not 1 <= brokers <= MAX_BROKERS:
            raise StackError(f"brokers={brokers}: between 1 and {MAX_BROKERS}")
        return cls(root=root, kafka_port=free_port(), controller_port=free_port(),
                   more_kafka=tuple((free_port(), free_port()) for _ in range(brokers - 1)),
                   postgres_port=free_port(), api_port=free_port(), witness_port=free_port(),
                   cache=_cache_dir())

    @classmethod
    def from_env(cls, root: Path | None = None) -> "StackConfig":
        env = os.environ
        root = root or _repo_root()
        kafka_port = int(env.get("EVIDENCE_KAFKA_PORT", "9092"))
        brokers = _brokers_from_env(env.get("EVIDENCE_BROKERS", ""), root)
        return cls(
            root=root,
            kafka_port=kafka_port,
            more_kafka=cluster_ports(kafka_port, brokers),
            controller_port=int(env.get("EVIDENCE_CONTROLLER_PORT", "9093")),
            postgres_port=int(env.get("EVIDENCE_POSTGRES_PORT", "5432")),
            api_port=int(env.get("EVIDENCE_API_PORT", "8000")),
            witness_port=int(env.get("EVIDENCE_WITNESS_PORT", "7380")),
            cache=_cache_dir(),
        )

    @property
    def stack(self) -> Path:
        return self.root / ".stack"

    @property
    def env_file(self) -> Path:
        return self.stack / "env"

    @property
    def kafka_dir(self) -> Path:
        return self.stack / "kafka"

    @property
    def kafka_log(self) -> Path:
        return self.kafka_dir / "server.log"

    @property
    def kafka_nodes(self) -> list[KafkaNode]:
        """Node 1 (``.stack/kafka``, as a stack of one broker has it) and the others."""
        return [KafkaNode(1, self.kafka_port, self.controller_port, self.kafka_dir)] + [
            KafkaNode(i, port, controller, self.stack / f"kafka-{i}")
            for i, (port, controller) in enumerate(self.more_kafka, start=2)]

    @property
    def brokers(self) -> int:
        return 1 + len(self.more_kafka)

    @property
    def replication_factor(self) -> int:
        """The project's and Kafka's internal topics': 3 on a cluster of three or more."""
        return min(self.brokers, 3)

    @property
    def min_insync_replicas(self) -> int:
        """2 on a cluster of three or more: an acks=all write is on two disks, and one
        broker down stops nothing."""
        return 2 if self.brokers >= 3 else 1

    @property
    def kafka_libs(self) -> Path:
        return self.cache / f"kafka-{KAFKA_VERSION}" / "libs"

    @property
    def postgres_dir(self) -> Path:
        return self.stack / "postgres"

    @property
    def postgres_log(self) -> Path:
        return self.postgres_dir / "postgres.log"

    @property
    def services_dir(self) -> Path:
        return self.stack / "services"

    @property
    def bootstrap(self) -> str:
        """Every broker, comma-separated (one on a stack of one broker)."""
        return ",".join(node.bootstrap for node in self.kafka_nodes)

    @property
    def database_url(self) -> str:
        return (f"postgresql://{self.db_user}:{self.db_password}"
                f"@127.0.0.1:{self.postgres_port}/{self.db_name}")

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is not running. A killed multi-threaded process (the
    # JVM) shows its leader as a zombie while other threads still exit and hold its files, its
    # listening sockets among them: it runs until every thread is gone.
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tasks = [str(pid)]
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                if f.read().split(") ", 1)[1][:1] != "Z":
                    return True
        except FileNotFoundError:
            continue
        except OSError:
            return True
    return False


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
