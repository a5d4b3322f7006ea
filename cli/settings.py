"""The CLI's settings: the connection options every command shares, declared and resolved once.

A command that reaches the stack adds the options it needs with :func:`add_options`:
``--bootstrap``, ``--topic-prefix``, ``--database-url``, ``--views-schema`` (declared by
:func:`server.settings.add_connection_options`, as the services declare them), ``--api``,
``--api-key`` and ``--timeout``. :func:`resolve` gives each its value once: the flag, else the
process's ``EVIDENCE_*`` variable, else ``.stack/env`` (what ``make up`` wrote), else the
default where there is one (the topic prefix and the views schema; a command that needs Kafka,
PostgreSQL or the API says which flag or variable is missing: :meth:`CliSettings.need`).
An empty variable is unset, as in every service.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from server.settings import (CONNECTION_OPTIONS, Connection, SettingsError,
                             add_connection_options, read, value)

__all__ = ["STACK_ENV", "CliSettings", "PolicyFiles", "SettingsError", "add_options", "resolve",
           "stack_env"]

STACK_ENV = ".stack/env"

_API_OPTIONS = {
    "api": ("--api", "URL", "API base URL", "EVIDENCE_API_URL"),
    "api_key": ("--api-key", "KEY", "API key", "EVIDENCE_API_KEY"),
}

_NEEDED = {  # what is missing, the flag that gives it, the variable that gives it
    "bootstrap": ("no Kafka", "--bootstrap HOST:PORT", "EVIDENCE_KAFKA_BOOTSTRAP"),
    "database_url": ("no database", "--database-url URL", "EVIDENCE_DATABASE_URL"),
    "api": ("no API URL", "--api URL", "EVIDENCE_API_URL"),
    "api_key": ("no API key", "--api-key KEY", "EVIDENCE_API_KEY"),
}


def stack_env(stack: Mapping[str, str] | None = None) -> dict[str, str]:
    """``.stack/env`` (or ``stack``, when the caller read it) under the process's own
    ``EVIDENCE_*`` variables."""
    if stack is None:
        try:
            from devstack import StackConfig, read_env

            stack = read_env(StackConfig.from_env())
        except Exception:  # noqa: BLE001 - no stack file is fine; flags and env still work
            stack = {}
    return {**stack, **{k: v for k, v in os.environ.items() if k.startswith("EVIDENCE_")}}


def add_options(p: argparse.ArgumentParser | Any, *names: str, timeout: float = 10.0,
                note: Mapping[str, str] | None = None) -> None:
    """Add the shared options ``names`` (fields: ``bootstrap``, ``topic_prefix``,
    ``database_url``, ``views_schema``, ``api``, ``api_key``, ``timeout``) to ``p``, a parser
    or an argument group; ``timeout`` is ``--timeout``'s default (seconds for each answer),
    ``note`` a word before an option's help (``{"bootstrap": "with --issue"}``)."""
    unknown = set(names) - set(CONNECTION_OPTIONS) - set(_API_OPTIONS) - {"timeout"}
    if unknown:
        raise ValueError(f"no shared option {sorted(unknown)}")
    connection = [n for n in names if n in CONNECTION_OPTIONS]
    if connection:
        add_connection_options(p, *connection, fallback=STACK_ENV,
                               no_default=("bootstrap",), note=note)
    for name in (n for n in names if n in _API_OPTIONS):
        flag, metavar, text, var = _API_OPTIONS[name]
        extra = (note or {}).get(name)
        p.add_argument(flag, dest=name, metavar=metavar, default=None,
                       help=(f"{extra}: " if extra else "")
                            + f"{text} (default ${var}, else {STACK_ENV})")
    if "timeout" in names:
        p.add_argument("--timeout", type=float, default=timeout, metavar="S",
                       help=f"seconds to wait for each answer (default {timeout:g})")


@dataclass(frozen=True)
class CliSettings:
    """What a command's shared options resolved to, and the environment they came from."""

    connection: Connection
    api: str | None = None
    api_key: str | None = None
    timeout: float = 10.0
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    """The process's ``EVIDENCE_*`` variables over ``.stack/env``'s: where a command finds
    the settings of its own (a log key file, witness keys)."""

    @property
    def bootstrap(self) -> str | None:
        return self.connection.bootstrap

    @property
    def database_url(self) -> str | None:
        return self.connection.database_url

    @property
    def views_schema(self) -> str:
        return self.connection.views_schema

    @property
    def topic_prefix(self) -> str:
        return self.connection.topic_prefix

    def need(self, *names: str) -> str | None:
        """None when every setting of ``names`` (``bootstrap``, ``database_url``, ``api``,
        ``api_key``) has a value; else the message saying how to give the first that has
        none."""
        for name in names:
            if not getattr(self, name):
                what, flag, var = _NEEDED[name]
                return f"{what}: pass {flag}, set {var}, or run `make up` (it writes {STACK_ENV})"
        return None


def resolve(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> CliSettings:
    """The shared options of ``args`` resolved (module docstring); ``env`` is
    :func:`stack_env` when None. ``SettingsError`` names the variable or flag of a value
    that cannot work."""
    env = stack_env() if env is None else env
    conn = Connection.from_env(env, optional=("bootstrap", "database_url")).with_args(args)
    return CliSettings(
        connection=conn,
        api=getattr(args, "api", None) or value(env, "EVIDENCE_API_URL"),
        api_key=getattr(args, "api_key", None) or value(env, "EVIDENCE_API_KEY"),
        timeout=10.0 if getattr(args, "timeout", None) is None else args.timeout,
        env=env)


@dataclass(frozen=True)
class PolicyFiles:
    """The policy files of the commands that apply a service's policy: the redaction policy
    the projector masks the read side with (``evidence audit`` recomputes its rows under it)
    and the retention classes the shredder applies (``evidence retention``). None: no
    policy."""

    redaction: str | None = None
    retention: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "PolicyFiles":
        """The files ``env`` (:func:`stack_env`, for a command) names."""
        return cls(**read(env, _POLICY_FILES))


_POLICY_FILES: dict[str, tuple[str, type]] = {
    "redaction": ("EVIDENCE_REDACTION_FILE", str),
    "retention": ("EVIDENCE_RETENTION_FILE", str),
}
