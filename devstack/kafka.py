"""Apache Kafka in KRaft mode on 127.0.0.1: one combined broker+controller, or a cluster of
such nodes (``make up BROKERS=3``), each with its own ports and data directory.

The jars come from Maven Central through ``devstack/pom.xml`` (Kafka plus an SLF4J binding,
which the Maven resolution lacks) and are cached under ``~/.cache/evidence-store/``, outside
the repository, so a second checkout or a ``make down CLEAN=1`` does not download them again.
"""

from __future__ import annotations

import base64
import os
import shlex
import shutil
import subprocess
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from devstack.config import (
    CLUSTER_FILE, KAFKA_VERSION, KafkaNode, StackConfig, StackError, pid_alive, read_pid,
)
from devstack.procs import (
    apt_install,
    log,
    port_open,
    port_released,
    start_detached,
    stop_pid_files,
    tail,
    wait_until,
)

HERE = Path(__file__).resolve().parent
READY_TIMEOUT = float(os.environ.get("EVIDENCE_KAFKA_READY_TIMEOUT", "90"))


def ensure_jars(cfg: StackConfig) -> Path:
    libs = cfg.kafka_libs
    if (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        return libs
    if not shutil.which("mvn"):
        apt_install(["maven"], "Maven is needed to fetch Kafka from Maven Central")
    log(f"resolving Apache Kafka {KAFKA_VERSION} from Maven Central into {libs}")
    libs.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="libs-", dir=libs.parent))
    mvn_log = libs.parent / "maven.log"
    with open(mvn_log, "w") as out:
        r = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(HERE / "pom.xml"),
             f"-Dkafka.version={KAFKA_VERSION}",
             f"-Dmaven.repo.local={cfg.cache / 'm2'}",
             "dependency:copy-dependencies", f"-DoutputDirectory={tmp}"],
            stdout=out, stderr=subprocess.STDOUT, timeout=900,
        )
    if r.returncode != 0 or not (tmp / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        shutil.rmtree(tmp, ignore_errors=True)
        raise StackError(f"Maven could not resolve Kafka {KAFKA_VERSION}; see {mvn_log}")
    # Rename last, so an interrupted download is never mistaken for a complete one.
    shutil.rmtree(libs, ignore_errors=True)
    tmp.rename(libs)
    return libs


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise StackError("Java 17 or newer is needed to run Kafka: install openjdk-17-jre-headless")
    return java


def server_properties(cfg: StackConfig, node: KafkaNode | None = None) -> str:
    """``server.properties`` of one node (node 1 by default). On a cluster of three or more,
    every topic, the internal ones included, is replicated three ways with two in sync."""
    node = node or cfg.kafka_nodes[0]
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in cfg.kafka_nodes)
    rf, isr = cfg.replication_factor, cfg.min_insync_replicas
    return f"""# written by devstack on every start; edit devstack/kafka.py instead
process.roles=broker,controller
node.id={node.node_id}
controller.quorum.voters={voters}
listeners=PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{node.port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={node.dir / "data"}
num.partitions=6
auto.create.topics.enable=false
unclean.leader.election.enable=false
default.replication.factor={rf}
min.insync.replicas={isr}
offsets.topic.replication.factor={rf}
offsets.topic.num.partitions=6
transaction.state.log.replication.factor={rf}
transaction.state.log.min.isr={isr}
transaction.state.log.num.partitions=6
share.coordinator.state.topic.replication.factor={rf}
share.coordinator.state.topic.min.isr={isr}
group.initial.rebalance.delay.ms=0
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
message.max.bytes={66 * 1024 * 1024}
replica.fetch.max.bytes={66 * 1024 * 1024}
log.flush.interval.messages=9223372036854775807
"""


def _classpath(libs: Path) -> str:
    return f"{libs}/*"


def _jvm(cfg: StackConfig, libs: Path, node: KafkaNode) -> list[str]:
    # A node of a cluster gets half the heap of a lone broker: three share the machine.
    heap = "1g" if cfg.brokers == 1 else "512m"
    # Extra JVM options for every node (and its storage format): the test suite starts its
    # short-lived brokers with -XX:TieredStopAtLevel=1, whose C1-only JIT took 40% less CPU
    # to start a broker and seal a little (9.7 -> 5.7 s), where C2 pays off only on a
    # long-running one such as `make up`'s.
    extra = shlex.split(os.environ.get("EVIDENCE_KAFKA_JVM_OPTS", ""))
    return [
        _java(), *extra, "-Xms256m", f"-Xmx{heap}", "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={HERE / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={node.dir}",
        "-cp", _classpath(libs),
    ]


def _cluster_id(cfg: StackConfig) -> str:
    """The id every node's storage is formatted with: node 1's if it has one (a node added
    or wiped beside it), else a new one, as Kafka's own Uuid.randomUuid: never one that starts
    with "-", which the storage tool's command line would take for an option (1 in 64 random
    ids did)."""
    meta = cfg.kafka_dir / "data" / "meta.properties"
    if meta.exists():
        for line in meta.read_text().splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()
    cluster_id = "-"
    while cluster_id.startswith("-"):
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return cluster_id


def _check_shape(cfg: StackConfig) -> None:
    """Node 1's storage was formatted for this many nodes: a KRaft quorum's voters are fixed
    when it is formatted, so another count needs another stack."""
    if not (cfg.kafka_dir / "data" / "meta.properties").exists():
        return
    try:
        formatted = int((cfg.kafka_dir / CLUSTER_FILE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        formatted = 1  # formatted before clusters existed: a broker alone
    if formatted != cfg.brokers:
        raise StackError(
            f"the Kafka under {cfg.stack} was formatted for {formatted} broker(s), not "
            f"{cfg.brokers}: stop it and delete it first (`make down CLEAN=1`, which deletes "
            f"its records too), or run BROKERS={formatted}")


def _format(cfg: StackConfig, libs: Path, node: KafkaNode, props: Path, cluster_id: str) -> None:
    data = node.dir / "data"
    if (data / "meta.properties").exists():
        return
    log(f"formatting KRaft storage in {data} (cluster {cluster_id}, node {node.node_id})")
    fmt_log = node.dir / "format.log"
    with open(fmt_log, "w") as out:
        r = subprocess.run(
            [*_jvm(cfg, libs, node), "kafka.tools.StorageTool", "format", "-t", cluster_id,
             "-c", str(props)],
            stdout=out, stderr=subprocess.STDOUT, timeout=120,
        )
    if r.returncode != 0:
        raise StackError(f"formatting Kafka storage failed (exit {r.returncode}); see "
                         f"{fmt_log}. Last lines:\n{tail(fmt_log)}")
    if node.node_id == 1:
        (node.dir / CLUSTER_FILE).write_text(f"{cfg.brokers}\n")


def start(cfg: StackConfig, timeout: float | None = None) -> str:
    """Start every node that does not run (all at once: a quorum of three elects no leader
    with one voter), then wait until the cluster answers with all of them (``timeout`` s,
    by default ``EVIDENCE_KAFKA_READY_TIMEOUT``, twice that for a cluster); returns 'running' when all ran, else
    'started'."""
    _check_shape(cfg)
    nodes = [n for n in cfg.kafka_nodes if not _running(n)]
    if nodes:
        libs = ensure_jars(cfg)
        cluster_id = _cluster_id(cfg)
        # Each node's storage is formatted by a JVM of its own: side by side, not in turn.
        with ThreadPoolExecutor(len(nodes)) as pool:
            list(pool.map(lambda n: _prepare_node(cfg, libs, n, cluster_id), nodes))
        for node in nodes:
            log(f"starting Kafka {KAFKA_VERSION} node {node.node_id} on {node.bootstrap} "
                f"(log: {node.log})")
            start_detached([*_jvm(cfg, libs, node), "kafka.Kafka",
                            str(node.dir / "server.properties")], node.log, node.pid_file)
    if timeout is None:  # three JVMs starting at once on a shared machine take longer
        timeout = READY_TIMEOUT if cfg.brokers == 1 else 2 * READY_TIMEOUT
    _wait_ready(cfg, timeout)
    return "started" if nodes else "running"


def _running(node: KafkaNode) -> bool:
    pid = read_pid(node.pid_file)
    return pid is not None and pid_alive(pid)


def _prepare_node(cfg: StackConfig, libs: Path, node: KafkaNode, cluster_id: str) -> None:
    """The node's port free, its ``server.properties`` written, its storage formatted."""
    # A broker of ours that died (pid recorded) may hold its port a moment longer.
    recorded = read_pid(node.pid_file) is not None
    if port_open(node.port) and not (recorded and port_released(node.port)):
        raise StackError(
            f"port {node.port} is taken by a process this stack did not start; "
            f"stop it or set EVIDENCE_KAFKA_PORT")
    node.dir.mkdir(parents=True, exist_ok=True)
    props = node.dir / "server.properties"
    props.write_text(server_properties(cfg, node))
    _format(cfg, libs, node, props, cluster_id)


def _wait_ready(cfg: StackConfig, timeout: float) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    nodes = cfg.kafka_nodes
    one = len(nodes) == 1
    missing = list(nodes)

    def ready() -> bool:
        for n in nodes:  # the first node to die is the one named, with its own log
            if node_pid(n) is None:
                raise StackError(
                    f"Kafka broker{'' if one else f' {n.node_id}'} exited during start-up; "
                    f"see {n.log}. Last lines:\n{tail(n.log)}")
        if not all(port_open(n.port) for n in nodes):
            return False
        admin = AdminClient({"bootstrap.servers": cfg.bootstrap})
        md = admin.list_topics(timeout=3)
        missing[:] = [n for n in nodes if n.node_id not in md.brokers]
        if missing or md.controller_id < 0:
            return False
        if not one:
            # Listed is not yet unfenced: a topic replicated on every node can be placed only
            # once the controller has let each in (asked without creating anything).
            probe = NewTopic("devstack-ready", 1, len(nodes))
            admin.create_topics([probe], validate_only=True, request_timeout=5)[
                probe.topic].result()
        return True

    try:
        wait_until("Kafka broker" if one else f"a Kafka cluster of {len(nodes)}", ready,
                   timeout, cfg.kafka_log)
    except StackError as e:
        late = missing[0] if missing and not one else None
        if late is None:
            raise
        raise StackError(f"Kafka broker {late.node_id} did not join the cluster in "
                         f"{timeout:.0f} s; see {late.log}. Last lines:\n{tail(late.log)}"
                         ) from e


def stop(cfg: StackConfig) -> bool:
    """Stop every node the stack has a pid file for (``.stack/kafka``, ``.stack/kafka-<n>``),
    whatever the configured count; True if any ran."""
    files = [cfg.kafka_dir / "pid", *sorted(cfg.stack.glob("kafka-*/pid"))]
    return stop_pid_files("Kafka", files, timeout=60) > 0


def node_pid(node: KafkaNode) -> int | None:
    """The node's pid when it runs."""
    pid = read_pid(node.pid_file)
    return pid if pid is not None and pid_alive(pid) else None
