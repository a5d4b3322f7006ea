"""The local stack without Docker: Apache Kafka (KRaft, from Maven Central jars), PostgreSQL
(from the machine's server binaries) and the project's own services, all on 127.0.0.1, all
state under ``.stack/``.

- :func:`up` / :func:`down` / :func:`status` — what ``make up``, ``make down`` and
  ``evidence dev status`` run.
- :class:`StackConfig` — where things live and which ports they use.
- :class:`StackError` — a wait timed out or a tool is missing; the message names the log to read.
"""

from devstack.config import StackConfig, StackError
from devstack.stack import down, read_env, status, up

__all__ = ["StackConfig", "StackError", "down", "read_env", "status", "up"]
