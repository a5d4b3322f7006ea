"""Apache Kafka in KRaft mode, one combined broker+controller on 127.0.0.1.

The jars come from Maven Central through ``devstack/pom.xml`` (Kafka plus an SLF4J binding,
which the Maven resolution lacks) and are cached under ``~/.cache/evidence-store/``, outside
the repository, so a second checkout or a ``make down CLEAN=1`` does not download them again.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from devstack.config import KAFKA_VERSION, StackConfig, StackError, pid_alive, read_pid
from devstack.procs import (
    apt_install,
    log,
    port_open,
    port_released,
    start_detached,
    stop_pid_file,
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


def server_properties(cfg: StackConfig) -> str:
    data = cfg.kafka_dir / "data"
    return f"""# written by devstack on every start; edit devstack/kafka.py instead
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cfg.controller_port}
listeners=PLAINTEXT://127.0.0.1:{cfg.kafka_port},CONTROLLER://127.0.0.1:{cfg.controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{cfg.kafka_port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data}
num.partitions=6
auto.create.topics.enable=false
unclean.leader.election.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=6
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
message.max.bytes={66 * 1024 * 1024}
replica.fetch.max.bytes={66 * 1024 * 1024}
log.flush.interval.messages=9223372036854775807
"""


def _classpath(libs: Path) -> str:
    return f"{libs}/*"


def _jvm(cfg: StackConfig, libs: Path) -> list[str]:
    return [
        _java(), "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={HERE / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={cfg.kafka_dir}",
        "-cp", _classpath(libs),
    ]


def _format(cfg: StackConfig, libs: Path, props: Path) -> None:
    data = cfg.kafka_dir / "data"
    if (data / "meta.properties").exists():
        return
    # As Kafka's own Uuid.randomUuid: never one that starts with "-", which the storage
    # tool's command line would take for an option (1 in 64 random ids did).
    cluster_id = "-"
    while cluster_id.startswith("-"):
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    log(f"formatting KRaft storage in {data} (cluster {cluster_id})")
    fmt_log = cfg.kafka_dir / "format.log"
    with open(fmt_log, "w") as out:
        r = subprocess.run(
            [*_jvm(cfg, libs), "kafka.tools.StorageTool", "format", "-t", cluster_id,
             "-c", str(props)],
            stdout=out, stderr=subprocess.STDOUT, timeout=120,
        )
    if r.returncode != 0:
        raise StackError(f"formatting Kafka storage failed (exit {r.returncode}); see "
                         f"{fmt_log}. Last lines:\n{tail(fmt_log)}")


def start(cfg: StackConfig) -> str:
    """Start the broker unless it runs; returns 'running' or 'started'."""
    pid_file = cfg.kafka_dir / "pid"
    pid = read_pid(pid_file)
    if pid is not None and pid_alive(pid):
        _wait_ready(cfg, pid)
        return "running"
    # A broker of ours that died (pid recorded) may hold its port a moment longer.
    if port_open(cfg.kafka_port) and not (pid is not None and port_released(cfg.kafka_port)):
        raise StackError(
            f"port {cfg.kafka_port} is taken by a process this stack did not start; "
            f"stop it or set EVIDENCE_KAFKA_PORT")
    libs = ensure_jars(cfg)
    cfg.kafka_dir.mkdir(parents=True, exist_ok=True)
    props = cfg.kafka_dir / "server.properties"
    props.write_text(server_properties(cfg))
    _format(cfg, libs, props)
    log(f"starting Kafka {KAFKA_VERSION} on {cfg.bootstrap} (log: {cfg.kafka_log})")
    pid = start_detached([*_jvm(cfg, libs), "kafka.Kafka", str(props)], cfg.kafka_log, pid_file)
    _wait_ready(cfg, pid)
    return "started"


def _wait_ready(cfg: StackConfig, pid: int) -> None:
    from confluent_kafka.admin import AdminClient

    def ready() -> bool:
        if not port_open(cfg.kafka_port):
            return False
        md = AdminClient({"bootstrap.servers": cfg.bootstrap}).list_topics(timeout=3)
        return bool(md.brokers) and md.controller_id >= 0

    wait_until("Kafka broker", ready, READY_TIMEOUT, cfg.kafka_log, pid)


def stop(cfg: StackConfig) -> bool:
    return stop_pid_file("Kafka", cfg.kafka_dir / "pid", timeout=60)
