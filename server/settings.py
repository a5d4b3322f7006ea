"""What every service's settings share: the connection settings and how a variable is read.

Each service has one settings module, the only place it reads ``EVIDENCE_*`` variables
(``writer.config``, ``projections.config``, ``publisher.config``, ``api.config``; the CLI's is
``cli.settings``). They build on this one:

- :class:`Connection`: the Kafka bootstrap, the topic prefix, the PostgreSQL URL and the views
  schema, each with one default, stated here and nowhere else.
- :func:`read`: a table of ``{"field": ("EVIDENCE_X", conv)}`` or ``(..., conv, least)``
  read from an environment, every value converted once; a value that does not convert, or is
  below its least, is a :class:`SettingsError` that names the variable.
- :func:`add_connection_options`: the flags of the connection settings (``--bootstrap``,
  ``--topic-prefix``, ``--database-url``, ``--views-schema``), declared once for every
  command that takes them.
- :class:`KeyStoreSettings`: where the API, ``evidence erase`` and the shredder keep the
  subjects' data keys, and the KEK that wraps them (``server.keystore.open_key_store`` opens
  it).

An empty value means unset, everywhere: ``EVIDENCE_PG_VIEWS_SCHEMA=`` is the default schema,
never a schema named ``""`` (a shell that exports a variable it has no value for must not
change what a service connects to).
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

from evidence_contract.keys import DAY, parse_granularity
from evidence_contract.topics import TopicNames

__all__ = ["CONNECTION_OPTIONS", "DEFAULT_BOOTSTRAP", "DEFAULT_DATABASE_URL",
           "DEFAULT_TOPIC_PREFIX", "DEFAULT_VIEWS_SCHEMA", "Connection", "KeyStoreSettings",
           "SettingsError", "add_connection_options", "native_setting", "read", "value"]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TOPIC_PREFIX = "evidence"
DEFAULT_DATABASE_URL = "postgresql://evidence:evidence@127.0.0.1:5432/evidence"
DEFAULT_VIEWS_SCHEMA = "evidence"

SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
"""A schema name the services put in SQL unquoted: a plain lowercase identifier."""

_INT_RE = re.compile(r"-?[0-9]+")


class SettingsError(ValueError):
    """A setting whose value cannot work; the message names the variable (or flag)."""


def value(env: Mapping[str, str], name: str) -> str | None:
    """The variable's value, None when it is unset or empty (the one meaning of empty)."""
    raw = env.get(name)
    return raw if raw else None


def _convert(name: str, raw: str, conv: Callable[[str], Any]) -> Any:
    if conv is int:
        if not _INT_RE.fullmatch(raw.strip()):
            raise SettingsError(f"{name}={raw!r} is not an integer")
        return int(raw)
    if conv is float:
        try:
            number = float(raw)
        except ValueError:
            raise SettingsError(f"{name}={raw!r} is not a number") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise SettingsError(f"{name}={raw!r} is not a finite number")
        return number
    try:
        return conv(raw)
    except (ValueError, TypeError) as e:
        raise SettingsError(f"{name}={raw!r}: {e}") from None


def read(env: Mapping[str, str] | None,
         table: Mapping[str, tuple[Any, ...]]) -> dict[str, Any]:
    """``{field: value}`` for each variable of ``table`` that is set (``os.environ`` when
    ``env`` is None). An entry is ``(name, conv)`` or ``(name, conv, least)``: ``least`` is
    the smallest value allowed (numbers) or, for ``float``, ``0.0`` meaning "positive"."""
    env = os.environ if env is None else env
    out: dict[str, Any] = {}
    for field_name, (name, conv, *least) in table.items():
        raw = value(env, name)
        if raw is None:
            continue
        converted = _convert(name, raw, conv)
        if least:
            low = least[0]
            if conv is float and low == 0.0 and not converted > 0:
                raise SettingsError(f"{name}={raw!r} must be positive")
            if converted < low:
                raise SettingsError(f"{name}={raw!r} must be at least {low}")
        out[field_name] = converted
    return out


def native_setting(env: Mapping[str, str] | None = None) -> str:
    """``EVIDENCE_NATIVE``: whether the writer's seal path and the projector's row path are
    the compiled ones (``auto``, ``1``, ``0``; ``writer.native`` and ``projections.fastrows``
    check the value when they choose, at import)."""
    return value(os.environ if env is None else env, "EVIDENCE_NATIVE") or "auto"


@dataclass(frozen=True)
class Connection:
    """Where a service finds Kafka and PostgreSQL, and the names it finds there.

    ``Connection.from_env()`` reads the four variables; :meth:`with_args` applies the flags
    :func:`add_connection_options` declared. A field a caller names ``optional`` stays None
    when nothing sets it (the API starts without Kafka); one it names ``required`` is an error
    naming the variable."""

    bootstrap: str | None = DEFAULT_BOOTSTRAP
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    database_url: str | None = DEFAULT_DATABASE_URL
    views_schema: str = DEFAULT_VIEWS_SCHEMA

    def __post_init__(self) -> None:
        if not SCHEMA_RE.fullmatch(self.views_schema):
            raise SettingsError(f"the views schema {self.views_schema!r} (EVIDENCE_PG_VIEWS_SCHEMA, "
                                f"--views-schema) is not a plain lowercase PostgreSQL identifier "
                                f"(letters, digits, underscore)")
        if not self.topic_prefix or self.topic_prefix != self.topic_prefix.strip():
            raise SettingsError(f"the topic prefix {self.topic_prefix!r} (EVIDENCE_TOPIC_PREFIX, "
                                f"--topic-prefix) must be a non-empty name without spaces")

    @property
    def names(self) -> TopicNames:
        """The topic names under :attr:`topic_prefix`."""
        return TopicNames(self.topic_prefix)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *,
                 optional: Iterable[str] = (), required: Iterable[str] = (),
                 hint: str = "") -> "Connection":
        """The connection the variables give. ``optional`` fields are None when unset;
        ``required`` ones raise :class:`SettingsError` (with ``hint``, how to set it), never
        taking the default."""
        given = read(env, _CONNECTION)
        for field_name in (*optional, *required):  # a required field takes no default
            given.setdefault(field_name, None)
        conn = cls(**given)
        conn.require(*required, hint=hint)
        return conn

    def with_args(self, args: object) -> "Connection":
        """The flags that were given (argparse leaves the others None) over these values."""
        flags = {f: getattr(args, f) for f in _CONNECTION if getattr(args, f, None)}
        return replace(self, **flags) if flags else self

    def require(self, *fields: str, hint: str = "") -> "Connection":
        """Self, or :class:`SettingsError` naming the first of ``fields`` that is not set."""
        for field_name in fields:
            if not getattr(self, field_name):
                raise SettingsError(f"{_CONNECTION[field_name][0]} is not set"
                                    + (f"; {hint}" if hint else ""))
        return self

    def env(self) -> dict[str, str]:
        """The variables that give a child process this connection."""
        return {name: getattr(self, f) for f, (name, _conv) in _CONNECTION.items()
                if getattr(self, f) is not None}


_CONNECTION: dict[str, tuple[str, type]] = {
    "bootstrap": ("EVIDENCE_KAFKA_BOOTSTRAP", str),
    "topic_prefix": ("EVIDENCE_TOPIC_PREFIX", str),
    "database_url": ("EVIDENCE_DATABASE_URL", str),
    "views_schema": ("EVIDENCE_PG_VIEWS_SCHEMA", str),
}

CONNECTION_OPTIONS: dict[str, tuple[str, str, str]] = {
    "bootstrap": ("--bootstrap", "HOST:PORT", "Kafka bootstrap servers"),
    "topic_prefix": ("--topic-prefix", "P", "topic prefix (<P>.intake, <P>.log, ...)"),
    "database_url": ("--database-url", "URL", "PostgreSQL URL of the projections"),
    "views_schema": ("--views-schema", "SCHEMA", "schema of the projection's views"),
}
"""Each connection setting's flag, metavar and help; :func:`add_connection_options` adds
them."""


def add_connection_options(p: argparse.ArgumentParser | Any, *fields: str, fallback: str = "",
                           no_default: Iterable[str] = (),
                           note: Mapping[str, str] | None = None) -> None:
    """Add the flags of the connection ``fields`` (all four when none are named) to ``p``
    (a parser or an argument group). Each defaults to None, so :meth:`Connection.with_args`
    can tell a flag given from one left to its variable. Its help names the variable, then
    ``fallback`` (``".stack/env"`` for the CLI), then the default unless the field is in
    ``no_default`` (a command that needs it set). ``note`` puts a word before a field's help
    (``{"bootstrap": "with --issue"}``)."""
    defaults = Connection()
    skip = set(no_default) | {"database_url"}  # a URL with a password is no help text
    for field_name in fields or tuple(CONNECTION_OPTIONS):
        flag, metavar, text = CONNECTION_OPTIONS[field_name]
        where = [f"${_CONNECTION[field_name][0]}"] + ([fallback] if fallback else [])
        if field_name not in skip:
            where.append(str(getattr(defaults, field_name)))
        extra = (note or {}).get(field_name)
        p.add_argument(flag, dest=field_name, metavar=metavar, default=None,
                       help=(f"{extra}: " if extra else "") + f"{text} (default "
                            + ", else ".join(where) + ")")


@dataclass(frozen=True)
class KeyStoreSettings:
    """Where a server process keeps the subjects' data keys, and the KEK that wraps them.

    ``store`` is ``file:<dir>`` (the client's ``FileKeyStore``, the devstack's and the
    tests': the gateway creates keys in the same directory) or ``postgres`` (on
    ``database_url``, in ``schema``); ``epoch`` the period one new key covers (``day`` or
    ``month``); the KEK is ``kek_file`` (mode 0600) or ``kek`` (64 hex digits), loaded when
    the store is opened (``server.keystore.open_key_store``)."""

    store: str
    epoch: str = DAY
    database_url: str | None = None
    schema: str = "evidence_keys"
    kek_file: str | None = None
    kek: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.store != "postgres" and not (self.store.startswith("file:") and self.store[5:]):
            raise SettingsError(f"EVIDENCE_KEY_STORE {self.store!r}: expected file:<dir> or "
                                f"postgres")
        if self.store == "postgres" and not self.database_url:
            raise SettingsError("EVIDENCE_KEY_STORE=postgres needs EVIDENCE_DATABASE_URL")

    @property
    def directory(self) -> str | None:
        """The directory of a ``file:<dir>`` store; None for ``postgres``."""
        return self.store[5:] if self.store.startswith("file:") else None

    def kek_env(self) -> dict[str, str]:
        """The KEK's variables, as ``evidence_client.keystore.load_kek`` takes them."""
        return {name: getattr(self, f) for f, (name, _conv) in _KEK.items() if getattr(self, f)}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "KeyStoreSettings":
        """The key store the variables name (``os.environ`` when ``env`` is None); a
        :class:`SettingsError` when none is named or a value cannot work."""
        env = os.environ if env is None else env
        store = (value(env, "EVIDENCE_KEY_STORE") or "").strip()
        if not store:
            raise SettingsError("no key store: set EVIDENCE_KEY_STORE to file:<dir> or postgres")
        try:
            epoch = parse_granularity(value(env, "EVIDENCE_KEY_EPOCH"))
        except ValueError as e:
            raise SettingsError(f"EVIDENCE_KEY_EPOCH: {e}") from None
        return cls(store, epoch, value(env, "EVIDENCE_DATABASE_URL"),
                   **read(env, {**_KEY_STORE, **_KEK}))


_KEY_STORE: dict[str, tuple[str, type]] = {
    "schema": ("EVIDENCE_KEY_STORE_SCHEMA", str),
}

_KEK: dict[str, tuple[str, type]] = {
    "kek_file": ("EVIDENCE_KEK_FILE", str),
    "kek": ("EVIDENCE_KEK", str),
}
