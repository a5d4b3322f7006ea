"""PostgreSQL from the machine's server binaries, its cluster under ``.stack/postgres``.

PostgreSQL refuses to run as root. When the stack is started as root the cluster belongs to
the ``postgres`` system user (created by Debian's server package) and every server command
runs through ``runuser``. If that user cannot reach ``.stack/`` (a checkout under a private
home directory), the cluster lives under ``/var/lib/evidence-store/`` and
``.stack/postgres`` is a symlink to it, so the data still goes where ``make down CLEAN=1``
looks for it.
"""

from __future__ import annotations

import glob
import hashlib
import os
import pwd
import shutil
import subprocess
from pathlib import Path

from devstack.config import StackConfig, StackError
from devstack.procs import apt_install, log, port_open, port_released, wait_until

READY_TIMEOUT = float(os.environ.get("EVIDENCE_POSTGRES_READY_TIMEOUT", "60"))


def bindir() -> Path:
    env = os.environ.get("EVIDENCE_PG_BINDIR")
    if env:
        return Path(env)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    if shutil.which("pg_ctl"):
        return Path(shutil.which("pg_ctl")).parent
    apt_install(["postgresql"], "PostgreSQL server binaries are needed")
    return bindir()


def _run_as() -> str | None:
    """The unprivileged user to run the server as, or None to run as ourselves."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "evidence-pg"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            pass
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                    "evidence-pg"], check=True)
    return "evidence-pg"


def _cmd(user: str | None, args: list[str]) -> list[str]:
    return ["runuser", "-u", user, "--", *args] if user else args


def _reachable_by(user: str, path: Path) -> bool:
    r = subprocess.run(_cmd(user, ["test", "-w", str(path), "-a", "-x", str(path)]))
    return r.returncode == 0


def _prepare_dir(cfg: StackConfig, user: str | None) -> Path:
    pgdir = cfg.postgres_dir
    if pgdir.exists():
        return pgdir.resolve()
    cfg.stack.mkdir(parents=True, exist_ok=True)
    if user is None:
        pgdir.mkdir(parents=True)
        return pgdir
    pgdir.mkdir(parents=True)
    shutil.chown(pgdir, user, user)
    if _reachable_by(user, pgdir):
        return pgdir
    # The server user cannot traverse to the checkout (e.g. it is under /root).
    pgdir.rmdir()
    tag = hashlib.sha256(str(cfg.stack.resolve()).encode()).hexdigest()[:12]
    outside = Path("/var/lib/evidence-store") / f"postgres-{tag}"
    outside.mkdir(parents=True, exist_ok=True)
    shutil.chown(outside, user, user)
    os.chmod(outside.parent, 0o755)
    pgdir.symlink_to(outside, target_is_directory=True)
    log(f"{user} cannot reach {cfg.stack}; the cluster lives in {outside} ({pgdir} links to it)")
    return outside


def _options(cfg: StackConfig, pgdir: Path) -> str:
    return " ".join([
        "-c listen_addresses=127.0.0.1",
        f"-c port={cfg.postgres_port}",
        f"-c unix_socket_directories={pgdir / 'run'}",
        "-c max_connections=200",
        "-c shared_buffers=256MB",
    ])


def start(cfg: StackConfig) -> str:
    bins = bindir()
    user = _run_as()
    pgdir = _prepare_dir(cfg, user)
    data = pgdir / "data"
    if not (data / "PG_VERSION").exists():
        log(f"initialising a PostgreSQL cluster in {data}")
        pwfile = pgdir / "pwfile"
        pwfile.write_text(cfg.db_password + "\n")
        (pgdir / "run").mkdir(exist_ok=True)
        if user:
            for p in (pwfile, pgdir / "run"):
                shutil.chown(p, user, user)
        r = subprocess.run(
            _cmd(user, [str(bins / "initdb"), "-D", str(data), "-U", cfg.db_user,
                        f"--pwfile={pwfile}", "--auth-local=trust",
                        "--auth-host=scram-sha-256", "-E", "UTF8", "--no-locale"]),
            capture_output=True, text=True,
        )
        pwfile.unlink(missing_ok=True)
        if r.returncode != 0:
            raise StackError(f"initdb failed:\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
    pg_ctl = str(bins / "pg_ctl")
    if subprocess.run(_cmd(user, [pg_ctl, "-D", str(data), "status"]),
                      capture_output=True).returncode == 0:
        state = "running"
    else:
        # A server of ours that crashed (its data directory is here) may hold the port a
        # moment longer.
        if port_open(cfg.postgres_port) and not port_released(cfg.postgres_port):
            raise StackError(
                f"port {cfg.postgres_port} is taken by a process this stack did not start; "
                f"stop it or set EVIDENCE_POSTGRES_PORT")
        log(f"starting PostgreSQL on 127.0.0.1:{cfg.postgres_port} (log: {cfg.postgres_log})")
        r = subprocess.run(
            _cmd(user, [pg_ctl, "-D", str(data), "-l", str(pgdir / "postgres.log"),
                        "-o", _options(cfg, pgdir), "-w", "-t", str(int(READY_TIMEOUT)),
                        "start"]),
            capture_output=True, text=True,
        )
        if r.returncode != 0:
            raise StackError(
                f"PostgreSQL did not start in {READY_TIMEOUT:.0f} s; see {cfg.postgres_log}\n"
                f"{r.stdout[-800:]}{r.stderr[-800:]}")
        state = "started"
    _ensure_database(cfg)
    return state


def _ensure_database(cfg: StackConfig) -> None:
    import psycopg

    admin_url = cfg.database_url.rsplit("/", 1)[0] + "/postgres"

    def ready() -> bool:
        with psycopg.connect(admin_url, connect_timeout=3) as conn:
            conn.execute("select 1")
        return True

    wait_until("PostgreSQL", ready, READY_TIMEOUT, cfg.postgres_log)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("select 1 from pg_database where datname = %s",
                              (cfg.db_name,)).fetchone()
        if not exists:
            conn.execute(f'create database "{cfg.db_name}"')


def stop(cfg: StackConfig) -> bool:
    # Resolved: the server user may reach the cluster only through its real path.
    data = cfg.postgres_dir.resolve() / "data"
    if not (data / "PG_VERSION").exists():
        return False
    user = _run_as()
    pg_ctl = str(bindir() / "pg_ctl")
    if subprocess.run(_cmd(user, [pg_ctl, "-D", str(data), "status"]),
                      capture_output=True).returncode != 0:
        return False
    # pg_ctl stops the postmaster named in data/postmaster.pid: the recorded pid.
    log("stopping PostgreSQL")
    subprocess.run(_cmd(user, [pg_ctl, "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop"]),
                   capture_output=True)
    return True


def remove(cfg: StackConfig) -> None:
    """Delete the cluster, following the symlink when it lives outside the checkout."""
    pgdir = cfg.postgres_dir
    if pgdir.is_symlink():
        shutil.rmtree(pgdir.resolve(), ignore_errors=True)
        pgdir.unlink()


def restart(cfg: StackConfig, mode: str = "immediate") -> None:
    """``pg_ctl restart -m <mode>``: with "immediate", a crash and recovery, as the chaos
    suite uses it."""
    pgdir = cfg.postgres_dir.resolve()
    data = pgdir / "data"
    user = _run_as()
    log(f"restarting PostgreSQL ({mode})")
    r = subprocess.run(
        _cmd(user, [str(bindir() / "pg_ctl"), "-D", str(data), "-l", str(pgdir / "postgres.log"),
                    "-o", _options(cfg, pgdir), "-m", mode, "-w", "-t", str(int(READY_TIMEOUT)),
                    "restart"]), capture_output=True, text=True)
    if r.returncode != 0:
        raise StackError(f"PostgreSQL did not restart; see {cfg.postgres_log}\n"
                         f"{r.stdout[-800:]}{r.stderr[-800:]}")
