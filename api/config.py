"""API settings, read from the environment once at start-up.

    EVIDENCE_DATABASE_URL        PostgreSQL the read model lives in (required)
    EVIDENCE_API_PORT            the port ``evidence api`` listens on without --port (8000)
    EVIDENCE_PG_VIEWS_SCHEMA     schema of the stable views (default ``evidence``)
    EVIDENCE_API_KEY             the dev key ...
    EVIDENCE_API_KEY_STREAMS     ... and its comma-separated stream patterns ("*", "acme:*", ...)
    EVIDENCE_API_KEYS_FILE       JSON list of {"key", "streams": [...], "name", "admin"} for more
                                 keys ("admin": true grants the admin role: POST /admin/erasures)
    EVIDENCE_API_ADMIN_KEYS      comma-separated keys with the admin role; one that is also a
                                 key above gains the role, any other reads no stream
    EVIDENCE_KEY_STORE           file:<dir> | postgres, with EVIDENCE_KEK_FILE: the key store
                                 POST /admin/erasures destroys keys in (server.keystore)
    EVIDENCE_API_MAX_LAG         /readyz fails while projection lag exceeds this (default 10000)
    EVIDENCE_API_WORKERS         server processes (default 1; up to one per core pays off, see
                                 api.serving; each has its own /metrics registry)
    EVIDENCE_API_POOL_MIN/_MAX   connection pool size of each worker (default 2 / 10): the API
                                 holds up to workers × max PostgreSQL connections
    EVIDENCE_API_BACKLOG         listen backlog of the shared socket (default 2048)
    EVIDENCE_API_DB_TIMEOUT      seconds to wait for a pooled connection (default 5)
    EVIDENCE_API_STATEMENT_TIMEOUT_MS  per-query limit in PostgreSQL (default 5000)
    EVIDENCE_API_MAX_BODY_BYTES  largest request body of any route but verify (default 1 MiB)
    EVIDENCE_API_MAX_VERIFY_BYTES  largest POST /replay/verify body (default 8 MiB: a
                                 replayed response of up to 6 MiB as base64)
    EVIDENCE_API_BODY_TIMEOUT    seconds a request body may take to arrive (default 30)
    EVIDENCE_API_HEADER_TIMEOUT  seconds a request head may take to arrive (default 10)
    EVIDENCE_API_KEEP_ALIVE_TIMEOUT  seconds an idle keep-alive connection stays open (5)
    EVIDENCE_API_MAX_HEADER_BYTES  largest request head, line and headers (default 16 KiB)
    EVIDENCE_API_MAX_WAIT_MS     longest ``GET /streams/{s}?after_seq=&wait_ms=`` waits for the
                                 head to move, whatever it asks (default 5000; 0: never waits)
    EVIDENCE_API_MAX_AUDITS_PER_KEY  ``GET /streams/{s}/audit`` requests one API key may have in
                                 progress in each server process (default 2); one more is a
                                 429 with Retry-After (api.limits.PerKeyLimit), so one key's
                                 audits hold at most that many pooled connections
    EVIDENCE_LOG_NAME            the log's (and its key's) name (default
                                 ``evidence-store.local/log``)
    EVIDENCE_LOG_VERIFIER_KEY_FILE  the log's note verifier key (``GET /log/key``, and what
                                 a cosigned note must be signed by); else derived from
    EVIDENCE_LOG_SIGNING_KEY_FILE   the log's signer key, when only that is given
    EVIDENCE_WITNESS_KEYS        verifier keys of the witnesses whose cosignatures the API
                                 takes (comma- or newline-separated), or
    EVIDENCE_WITNESS_KEYS_FILE   a file of them (one a line)
    EVIDENCE_WITNESSES_FILE      the witnesses file the publisher pushes to (server.witnesses:
                                 ``<key> [<url>]`` a line), re-read when it changes: its keys
                                 are taken too, without a restart (Ed25519 cosignature/v1 and
                                 ML-DSA-44 keys alike)
    EVIDENCE_KAFKA_BOOTSTRAP     where accepted cosignatures are produced (the API starts
                                 without Kafka; only that route needs it)
    EVIDENCE_TOPIC_PREFIX        topic prefix (default ``evidence``)

At least one key must be configured: an API that nobody can call is a configuration mistake,
and :class:`~api.errors.ApiConfigError` says how to fix it. Every key must pass
:func:`api.auth.key_weakness` (32 bytes or more, about 128 bits of estimated entropy, no
whitespace), and a keys file must be readable by its owner only (``chmod 600``): both are
refused at start-up, with the reason, rather than served.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from evidence_contract.note import NoteError, VerifierKey, parse_skey, parse_vkey
from evidence_contract.tlog import DEFAULT_LOG_NAME
from server.settings import DEFAULT_TOPIC_PREFIX, DEFAULT_VIEWS_SCHEMA, Connection, SettingsError
from server.witnesses import WatchedWitnesses

from .auth import Keyring, key_weakness, parse_patterns
from .errors import ApiConfigError

__all__ = ["AUDITS_PER_KEY_VAR", "Settings", "api_port", "default_workers", "load_keyring",
           "load_log_key", "load_witness_keys"]

AUDITS_PER_KEY_VAR = "EVIDENCE_API_MAX_AUDITS_PER_KEY"
"""Named in the 429 that says a key has too many audits in progress (``api.limits``)."""

MAX_DEFAULT_WORKERS = 8
"""The default worker count stops here, whatever the core count: each worker is a pool of
PostgreSQL connections and ~80 MiB of memory."""


def default_workers() -> int:
    """``EVIDENCE_API_WORKERS``'s default: one server process per core this process may run on
    (its CPU affinity), at most :data:`MAX_DEFAULT_WORKERS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_DEFAULT_WORKERS))


def _read_text(var: str, path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ApiConfigError(f"{var} {path}: cannot read it: {e}") from e


def load_log_key(env: Mapping[str, str]) -> VerifierKey | None:
    """The log's verifier key from ``EVIDENCE_LOG_VERIFIER_KEY_FILE``, else derived from the
    signer key in ``EVIDENCE_LOG_SIGNING_KEY_FILE``; None when neither is set."""
    name = env.get("EVIDENCE_LOG_NAME", "") or DEFAULT_LOG_NAME
    for var, parse in (("EVIDENCE_LOG_VERIFIER_KEY_FILE", parse_vkey),
                       ("EVIDENCE_LOG_SIGNING_KEY_FILE", lambda t: parse_skey(t).verifier)):
        path = env.get(var, "")
        if not path:
            continue
        try:
            key = parse(_read_text(var, path))
        except NoteError as e:
            raise ApiConfigError(f"{var} {path}: not a note key: {e}") from e
        if key.name != name:
            raise ApiConfigError(f"{var} {path}: the key is named {key.name!r}, but the log is "
                                 f"{name!r} (EVIDENCE_LOG_NAME); the log key's name is the "
                                 f"log's name")
        return key
    return None


def load_witness_keys(env: Mapping[str, str]) -> tuple[VerifierKey, ...]:
    """The witnesses' verifier keys (``EVIDENCE_WITNESS_KEYS`` and ``..._FILE``)."""
    texts = re.split(r"[,\n]", env.get("EVIDENCE_WITNESS_KEYS", ""))
    path = env.get("EVIDENCE_WITNESS_KEYS_FILE", "")
    if path:
        texts += _read_text("EVIDENCE_WITNESS_KEYS_FILE", path).splitlines()
    keys = []
    for text in (t.strip() for t in texts):
        if not text or text.startswith("#"):
            continue
        try:
            keys.append(parse_vkey(text))
        except NoteError as e:
            raise ApiConfigError(f"witness key {text[:80]!r}: {e}") from e
    return tuple(dict.fromkeys(keys))

_SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_KEY_STORE_VARS = ("EVIDENCE_KEY_STORE", "EVIDENCE_KEY_STORE_SCHEMA", "EVIDENCE_KEK_FILE",
                   "EVIDENCE_KEK", "EVIDENCE_DATABASE_URL")


def load_keyring(env: Mapping[str, str]) -> Keyring:
    """The keys named by ``EVIDENCE_API_KEY``/``_STREAMS`` and ``EVIDENCE_API_KEYS_FILE``."""
    entries: list[tuple[Any, ...]] = []
    sources: list[str] = []  # where each entry was configured, for the weakness message
    dev_key = env.get("EVIDENCE_API_KEY", "")
    if dev_key:
        streams = env.get("EVIDENCE_API_KEY_STREAMS")
        if streams is None:
            raise ApiConfigError("EVIDENCE_API_KEY is set but EVIDENCE_API_KEY_STREAMS is not; "
                              "set it to the streams the key may read, e.g. 'acme:*' or '*'")
        entries.append(("dev", dev_key, parse_patterns(streams, "EVIDENCE_API_KEY_STREAMS")))
        sources.append("EVIDENCE_API_KEY")
    path = env.get("EVIDENCE_API_KEYS_FILE", "")
    if path:
        from_file = _read_keys_file(Path(path))
        entries += from_file
        sources += [f"API key {e[0]!r} of EVIDENCE_API_KEYS_FILE" for e in from_file]
    admins = [k.strip() for k in env.get("EVIDENCE_API_ADMIN_KEYS", "").split(",") if k.strip()]
    for i, admin_key in enumerate(dict.fromkeys(admins)):
        same = [j for j, e in enumerate(entries) if e[1] == admin_key]
        if same:
            entries[same[0]] = (*entries[same[0]][:3], True)
        else:
            entries.append((f"admin-{i}", admin_key, (), True))
            sources.append(f"admin key {i + 1} of EVIDENCE_API_ADMIN_KEYS")
    if not entries:
        raise ApiConfigError("no API key configured: set EVIDENCE_API_KEY and "
                          "EVIDENCE_API_KEY_STREAMS, or EVIDENCE_API_KEYS_FILE")
    ring = Keyring(entries)
    # Strength last, so a malformed entry is reported as such first.
    for where, (_name, key, *_rest) in zip(sources, entries, strict=True):
        weakness = key_weakness(key)
        if weakness is not None:
            raise ApiConfigError(f"{where} is too weak: {weakness}. A key needs 32 bytes or "
                                 f"more and about 128 bits of entropy; make one with "
                                 f"`python -c 'import secrets; print(secrets.token_urlsafe(32))'`")
    return ring


def _read_keys_file(path: Path) -> list[tuple[Any, ...]]:
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ApiConfigError(f"EVIDENCE_API_KEYS_FILE {path}: cannot read it: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise ApiConfigError(f"EVIDENCE_API_KEYS_FILE {path}: not JSON: {e}") from e
    if mode & 0o077:
        raise ApiConfigError(
            f"EVIDENCE_API_KEYS_FILE {path} may be read or written by its group or by others "
            f"(mode {stat.S_IMODE(mode):04o}); it holds API keys, so the API refuses it: "
            f"`chmod 600 {path}`")
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ApiConfigError(f"EVIDENCE_API_KEYS_FILE {path}: not JSON: {e}") from e
    if not isinstance(data, list):
        raise ApiConfigError(f'EVIDENCE_API_KEYS_FILE {path}: expected a JSON list of '
                          f'{{"key": ..., "streams": [...], "name": ...}}')
    entries = []
    for i, item in enumerate(data):
        where = f"EVIDENCE_API_KEYS_FILE {path} entry {i}"
        if not isinstance(item, dict):
            raise ApiConfigError(f"{where}: expected an object with key, streams and name")
        unknown = set(item) - {"key", "streams", "name", "admin"}
        if unknown:
            raise ApiConfigError(f"{where}: unknown field(s) {sorted(unknown)}; "
                              f"allowed are key, streams, name, admin")
        admin = item.get("admin", False)
        if not isinstance(admin, bool):
            raise ApiConfigError(f"{where}: 'admin' must be true or false")
        key, streams = item.get("key"), item.get("streams")
        name = item.get("name", f"key-{i}")
        if not isinstance(key, str) or not key:
            raise ApiConfigError(f"{where}: 'key' must be a non-empty string")
        if not isinstance(name, str) or not name:
            raise ApiConfigError(f"{where}: 'name' must be a non-empty string")
        if not isinstance(streams, list):
            raise ApiConfigError(f"{where}: 'streams' must be a list of stream patterns")
        entries.append((name, key, parse_patterns(streams, where), admin))
    return entries


def api_port(env: Mapping[str, str] | None = None) -> int:
    """The port ``evidence api`` listens on without ``--port``."""
    return _int(os.environ if env is None else env, "EVIDENCE_API_PORT", 8000, low=1)


def _int(env: Mapping[str, str], name: str, default: int, low: int = 0) -> int:
    raw = env.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiConfigError(f"{name}={raw!r} is not an integer") from None
    if value < low:
        raise ApiConfigError(f"{name}={value} must be at least {low}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "")
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise ApiConfigError(f"{name}={raw!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise ApiConfigError(f"{name}={raw!r} must be a positive number of seconds")
    return value


@dataclass(frozen=True)
class Settings:
    database_url: str
    keyring: Keyring = field(repr=False)
    views_schema: str = DEFAULT_VIEWS_SCHEMA
    max_lag: int = 10_000
    workers: int = 1
    pool_min: int = 2
    pool_max: int = 10
    backlog: int = 2048
    db_timeout: float = 5.0
    statement_timeout_ms: int = 5_000
    max_body_bytes: int = 1 << 20
    max_verify_bytes: int = 8 << 20
    body_timeout: float = 30.0
    header_timeout: float = 10.0
    keep_alive_timeout: float = 5.0
    max_header_bytes: int = 16 << 10
    max_wait_ms: int = 5_000
    max_audits_per_key: int = 2
    log_name: str = DEFAULT_LOG_NAME
    log_key: VerifierKey | None = None
    witness_keys: tuple[VerifierKey, ...] = ()
    """The keys of ``EVIDENCE_WITNESS_KEYS`` and ``..._FILE``, read once; with the witnesses
    file's: :meth:`current_witness_keys`."""
    witnesses_file: str | None = None
    """``EVIDENCE_WITNESSES_FILE``, watched (``server.witnesses.WatchedWitnesses``)."""
    kafka_bootstrap: str | None = None
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    kafka_timeout: float = 10.0
    key_store_env: dict[str, str] = field(default_factory=dict, repr=False)
    """The environment ``server.keystore.from_env`` builds the key store from (on first use:
    ``api.deps.get_key_store``); empty: no key store, the erasure route answers 503."""

    def __post_init__(self) -> None:
        if not _SCHEMA_RE.fullmatch(self.views_schema):
            raise ApiConfigError(f"views schema {self.views_schema!r} is not a plain lowercase "
                              f"PostgreSQL identifier (letters, digits, underscore)")
        if self.max_wait_ms < 0:
            raise ApiConfigError(f"max_wait_ms must be at least 0, not {self.max_wait_ms}")
        if self.max_audits_per_key < 1:
            raise ApiConfigError(f"max_audits_per_key (EVIDENCE_API_MAX_AUDITS_PER_KEY) must be "
                                 f"at least 1, not {self.max_audits_per_key}")
        if not 1 <= self.pool_min <= self.pool_max:
            raise ApiConfigError(f"pool sizes must satisfy 1 <= min ({self.pool_min}) "
                              f"<= max ({self.pool_max})")
        # The watcher holds no file open and reads nothing until asked (current()).
        object.__setattr__(self, "_witnesses", WatchedWitnesses(self.witnesses_file)
                           if self.witnesses_file else None)

    def current_witness_keys(self) -> tuple[VerifierKey, ...]:
        """The witness keys whose cosignatures the API takes now: ``witness_keys`` and those of
        the witnesses file as it is at this call (one ``stat`` when it did not change)."""
        watched: WatchedWitnesses | None = getattr(self, "_witnesses")
        if watched is None:
            return self.witness_keys
        return tuple(dict.fromkeys((*self.witness_keys, *watched.keys())))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        try:
            # The API starts without Kafka (only the cosignature route needs it) and never
            # without its database.
            conn = Connection.from_env(env, optional=("bootstrap",), required=("database_url",),
                                       hint="`make up` writes it to .stack/env (source that "
                                            "file)")
        except SettingsError as e:
            raise ApiConfigError(str(e)) from e
        pool_min = _int(env, "EVIDENCE_API_POOL_MIN", 2, low=1)
        return cls(
            database_url=str(conn.database_url),
            keyring=load_keyring(env),
            views_schema=conn.views_schema,
            max_lag=_int(env, "EVIDENCE_API_MAX_LAG", 10_000),
            # One per usable core: the workers share one metrics registry (api.metrics).
            workers=_int(env, "EVIDENCE_API_WORKERS", default_workers(), low=1),
            pool_min=pool_min,
            pool_max=_int(env, "EVIDENCE_API_POOL_MAX", max(10, pool_min), low=1),
            backlog=_int(env, "EVIDENCE_API_BACKLOG", 2048, low=1),
            db_timeout=_float(env, "EVIDENCE_API_DB_TIMEOUT", 5.0),
            statement_timeout_ms=_int(env, "EVIDENCE_API_STATEMENT_TIMEOUT_MS", 5_000, low=1),
            max_body_bytes=_int(env, "EVIDENCE_API_MAX_BODY_BYTES", 1 << 20, low=1),
            max_verify_bytes=_int(env, "EVIDENCE_API_MAX_VERIFY_BYTES", 8 << 20, low=1),
            body_timeout=_float(env, "EVIDENCE_API_BODY_TIMEOUT", 30.0),
            header_timeout=_float(env, "EVIDENCE_API_HEADER_TIMEOUT", 10.0),
            keep_alive_timeout=_float(env, "EVIDENCE_API_KEEP_ALIVE_TIMEOUT", 5.0),
            max_header_bytes=_int(env, "EVIDENCE_API_MAX_HEADER_BYTES", 16 << 10, low=1024),
            max_wait_ms=_int(env, "EVIDENCE_API_MAX_WAIT_MS", 5_000, low=0),
            max_audits_per_key=_int(env, AUDITS_PER_KEY_VAR, 2, low=1),
            log_name=env.get("EVIDENCE_LOG_NAME", "") or DEFAULT_LOG_NAME,
            log_key=load_log_key(env),
            witness_keys=load_witness_keys(env),
            witnesses_file=env.get("EVIDENCE_WITNESSES_FILE", "") or None,
            kafka_bootstrap=conn.bootstrap,
            topic_prefix=conn.topic_prefix,
            key_store_env=({k: v for k, v in env.items() if k in _KEY_STORE_VARS}
                           if env.get("EVIDENCE_KEY_STORE") else {}),
        )
