"""``up``, ``down`` and ``status`` for the whole local stack."""

from __future__ import annotations

import os
import secrets
import shutil
import time

from evidence_contract.tlog import DEFAULT_LOG_NAME

from devstack import kafka, postgres, services
from devstack.config import StackConfig, pid_alive, read_pid
from devstack.procs import log, port_open


def read_env(cfg: StackConfig) -> dict[str, str]:
    """The ``KEY=value`` lines of ``.stack/env``; empty if there is none."""
    try:
        lines = cfg.env_file.read_text().splitlines()
    except OSError:
        return {}
    env = {}
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            env[key.removeprefix("export ").strip()] = value.strip().strip("'\"")
    return env


def _log_keys(cfg: StackConfig, name: str) -> tuple[str, str]:
    """The log's signer and verifier key files under ``.stack/``, made on the first ``up``
    (the signer 0600: the writer refuses a key others can read). Kept across ``up``s, as a
    log's key must be: ``make down CLEAN=1`` removes them with everything else."""
    from evidence_contract.note import format_skey, format_vkey, generate_signer, parse_skey

    signer, verifier = cfg.stack / "log.skey", cfg.stack / "log.vkey"
    cfg.stack.mkdir(parents=True, exist_ok=True)
    if signer.exists():
        key = parse_skey(signer.read_text().strip())
        if key.name != name:
            raise SystemExit(f"{signer} is the key of log {key.name!r}, not {name!r}: set "
                             f"EVIDENCE_LOG_NAME={key.name} or remove the key")
    else:
        key = generate_signer(name)
        fd = os.open(signer, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(format_skey(key) + "\n")
    signer.chmod(0o600)
    verifier.write_text(format_vkey(key.verifier) + "\n")
    return str(signer), str(verifier)


WITNESS_NAME = "witness.evidence-store.local"
"""The stack's own witness's key name (a cosignature/v1 key, under ``.stack/witness.skey``)."""


def _witness(cfg: StackConfig) -> tuple[str, str]:
    """The stack's witness key (made on the first ``up``, kept like the log's) and the
    witnesses file the publisher and the API read (docs/witnessing.md): written with the
    stack's witness when it does not exist; an operator's edits (witnesses added, removed)
    are kept across ``up``s and take effect without a restart."""
    from evidence_contract.note import (
        SIG_COSIGNATURE_V1, format_skey, format_vkey, generate_signer, parse_skey,
    )

    skey, listed = cfg.stack / "witness.skey", cfg.stack / "witnesses"
    cfg.stack.mkdir(parents=True, exist_ok=True)
    if skey.exists():
        key = parse_skey(skey.read_text().strip())
    else:
        key = generate_signer(WITNESS_NAME, SIG_COSIGNATURE_V1)
        fd = os.open(skey, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(format_skey(key) + "\n")
    skey.chmod(0o600)
    if not listed.exists():
        listed.write_text(
            "# The witnesses the log pushes its checkpoints to (docs/witnessing.md):\n"
            "# <witness verifier key> <submission URL>, one a line; re-read on change.\n"
            f"{format_vkey(key.verifier)} http://127.0.0.1:{cfg.witness_port}\n")
    return str(skey), str(listed)


def _kek(cfg: StackConfig) -> str:
    """The local stack's key-encryption key file (``.stack/kek``, 0600, 64 hex digits), made
    on the first ``up`` and kept, like the log key: the data keys in ``.stack/keys`` are
    wrapped by it. ``make down CLEAN=1`` removes both."""
    path = cfg.stack / "kek"
    cfg.stack.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
    path.chmod(0o600)
    return str(path)


POLICY_FILES = ("EVIDENCE_REDACTION_FILE", "EVIDENCE_RETENTION_FILE")
"""The policies the services run with (the projector's redaction, the retention shredder's
classes), written to ``.stack/env`` so a shell that sourced it sees the same ones."""


def _policy_files(previous: dict[str, str]) -> dict[str, str]:
    """Each of :data:`POLICY_FILES` as the services get it: this process's value when the
    variable is set (empty: no policy), else the previous ``up``'s (services still running
    from it keep that policy, and so does a restart), as an absolute path."""
    out = {}
    for var in POLICY_FILES:
        value = os.environ[var] if var in os.environ else previous.get(var, "")
        if value:
            out[var] = os.path.abspath(value)
    return out


def _write_env(cfg: StackConfig) -> dict[str, str]:
    previous = read_env(cfg)
    log_name = os.environ.get("EVIDENCE_LOG_NAME") or previous.get("EVIDENCE_LOG_NAME") \
        or DEFAULT_LOG_NAME
    signer, verifier = _log_keys(cfg, log_name)
    witness_key, witnesses = _witness(cfg)
    env = {
        "EVIDENCE_KAFKA_BOOTSTRAP": cfg.bootstrap,
        "EVIDENCE_DATABASE_URL": cfg.database_url,
        "EVIDENCE_API_URL": cfg.api_url,
        # Kept across `make up`s so a key handed out stays valid until `make down CLEAN=1`.
        "EVIDENCE_API_KEY": previous.get("EVIDENCE_API_KEY") or "dev-" + secrets.token_hex(16),
        "EVIDENCE_API_KEY_STREAMS": previous.get("EVIDENCE_API_KEY_STREAMS", "*"),
        # A key with the admin role (POST /admin/erasures), kept the same way.
        "EVIDENCE_API_ADMIN_KEYS": previous.get("EVIDENCE_API_ADMIN_KEYS")
        or "dev-admin-" + secrets.token_hex(16),
        "EVIDENCE_TOPIC_PREFIX": "evidence",
        # The log's signing key (the writer signs checkpoints with it) and its verifier key.
        "EVIDENCE_LOG_NAME": log_name,
        "EVIDENCE_LOG_SIGNING_KEY_FILE": signer,
        "EVIDENCE_LOG_VERIFIER_KEY_FILE": verifier,
        # The key store of per-subject data keys (docs/erasure.md) and the KEK wrapping them:
        # gateways with content_policy="encrypt", `evidence erase` and POST /admin/erasures.
        "EVIDENCE_KEY_STORE": f"file:{cfg.stack / 'keys'}",
        "EVIDENCE_KEK_FILE": _kek(cfg),
        # One log for witnesses (docs/witnessing.md): the publisher pushes each deployment
        # checkpoint to the witnesses listed here; the stack runs one of its own.
        "EVIDENCE_WITNESSES_FILE": witnesses,
        "EVIDENCE_WITNESS_KEY_FILE": witness_key,
        "EVIDENCE_WITNESS_STATE_DIR": str(cfg.stack / "witness"),
        "EVIDENCE_WITNESS_LISTEN": f"127.0.0.1:{cfg.witness_port}",
        **_policy_files(previous),
    }
    if cfg.brokers > 1:
        # The topics `ensure_topics` makes, and the writer checks, replicated on the cluster.
        env["EVIDENCE_REPLICATION_FACTOR"] = str(cfg.replication_factor)
    cfg.stack.mkdir(parents=True, exist_ok=True)
    text = "# written by `make up`; `source .stack/env` to use the stack from a shell\n"
    text += "".join(f"export {k}={v}\n" for k, v in env.items())
    cfg.env_file.write_text(text)
    cfg.env_file.chmod(0o600)
    return env


def up(cfg: StackConfig | None = None, with_services: bool = True) -> dict[str, str]:
    from topics import TopicSettings, ensure_topics

    cfg = cfg or StackConfig.from_env()
    t0 = time.monotonic()
    kafka_state = kafka.start(cfg)
    pg_state = postgres.start(cfg)
    env = _write_env(cfg)
    settings = TopicSettings.from_env(env)
    created = ensure_topics(cfg.bootstrap, settings)
    topics_state = f"created {', '.join(created)}" if created else "all present, configs checked"
    rows = [
        *_kafka_rows(cfg, kafka_state),
        ("postgres", f"{pg_state} at 127.0.0.1:{cfg.postgres_port}/{cfg.db_name} "
                     f"(log {cfg.postgres_log})"),
        ("topics", topics_state),
    ]
    if with_services:
        rows += services.start_all(cfg, env)
    elapsed = time.monotonic() - t0
    print()
    print(f"evidence-store stack is up ({elapsed:.1f} s):")
    for name, state in rows:
        print(f"  {name:<12} {state}")
    print(f"  {'env':<12} {cfg.env_file}")
    print()
    print("Try next:")
    print("  source .stack/env              # EVIDENCE_KAFKA_BOOTSTRAP, EVIDENCE_DATABASE_URL, ...")
    print("  .venv/bin/evidence dev status  # what runs, where")
    print("  make test                      # the whole suite against this stack")
    print("  make down                      # stop it (CLEAN=1 also deletes .stack/)")
    return env


def _kafka_rows(cfg: StackConfig, state: str) -> list[tuple[str, str]]:
    """One row for a broker alone, as before clusters; one a node on a cluster."""
    if cfg.brokers == 1:
        return [("kafka", f"{state} at {cfg.bootstrap} (log {cfg.kafka_log})")]
    rows = [("kafka", f"{state}: {cfg.brokers} brokers, replication factor "
                      f"{cfg.replication_factor}, min.insync.replicas "
                      f"{cfg.min_insync_replicas}, unclean election off")]
    rows += [(f"kafka-{n.node_id}", f"at {n.bootstrap} (log {n.log})") for n in cfg.kafka_nodes]
    return rows


def down(cfg: StackConfig | None = None, clean: bool = False) -> None:
    cfg = cfg or StackConfig.from_env()
    services.stop_all(cfg)
    kafka.stop(cfg)
    postgres.stop(cfg)
    if clean:
        postgres.remove(cfg)
        shutil.rmtree(cfg.stack, ignore_errors=True)
        log(f"deleted {cfg.stack}")
    log("stack is down")


def status(cfg: StackConfig | None = None) -> list[tuple[str, str]]:
    cfg = cfg or StackConfig.from_env()
    rows = []
    for node in cfg.kafka_nodes:
        pid = read_pid(node.pid_file)
        name = "kafka" if cfg.brokers == 1 else f"kafka-{node.node_id}"
        rows.append((name, f"running (pid {pid}) at {node.bootstrap}"
                     if pid and pid_alive(pid) else "stopped"))
    rows += [
        ("postgres", f"answering at 127.0.0.1:{cfg.postgres_port}"
         if port_open(cfg.postgres_port) else "stopped"),
    ]
    rows += services.describe(cfg)
    return rows
