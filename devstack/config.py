"""Paths and ports of the local stack (pure)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from evidence_contract.errors import EvidenceError

KAFKA_VERSION = "4.1.1"  # keep in step with devstack/pom.xml and docker-compose.yml


class StackError(EvidenceError):
    """The local stack could not be brought up or down; the message says what to read."""


def _repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class StackConfig:
    root: Path
    kafka_port: int = 9092
    controller_port: int = 9093
    postgres_port: int = 5432
    api_port: int = 8000
    witness_port: int = 7380
    """The stack's own witness (``evidence witness run``), which the publisher pushes to."""
    cache: Path = Path.home() / ".cache" / "evidence-store"
    db_name: str = "evidence"
    db_user: str = "evidence"
    db_password: str = "evidence"

    @classmethod
    def from_env(cls, root: Path | None = None) -> "StackConfig":
        env = os.environ
        cache = env.get("EVIDENCE_CACHE_DIR")
        return cls(
            root=(root or _repo_root()),
            kafka_port=int(env.get("EVIDENCE_KAFKA_PORT", "9092")),
            controller_port=int(env.get("EVIDENCE_CONTROLLER_PORT", "9093")),
            postgres_port=int(env.get("EVIDENCE_POSTGRES_PORT", "5432")),
            api_port=int(env.get("EVIDENCE_API_PORT", "8000")),
            witness_port=int(env.get("EVIDENCE_WITNESS_PORT", "7380")),
            cache=Path(cache) if cache else Path.home() / ".cache" / "evidence-store",
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
        return f"127.0.0.1:{self.kafka_port}"

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
