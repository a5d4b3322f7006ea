"""Process helpers shared by the stack's parts: start detached, wait with a deadline, stop by
recorded pid. Every wait names the log file to read when it gives up."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable

from devstack.config import StackError, pid_alive, read_pid


def log(msg: str) -> None:
    print(f"[devstack] {msg}", flush=True)


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path} is missing)"
    return "\n".join("    " + line for line in text[-lines:])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on ``host:port``. A connect to a free port in the ephemeral
    range can land on itself (TCP simultaneous open, when the kernel picks that very port as
    the source): such a socket is its own peer and means nothing listens."""
    with socket.socket() as s:
        s.settimeout(0.5)
        if s.connect_ex((host, port)) != 0:
            return False
        return s.getsockname() != s.getpeername()


def port_released(port: int, timeout: float = 15.0) -> bool:
    """Whether ``port`` stops listening within ``timeout``: a server killed a moment ago can hold
    its socket until the kernel has torn the last of its threads down."""
    deadline = time.monotonic() + timeout
    while port_open(port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def start_detached(cmd: list[str], log_file: Path, pid_file: Path,
                   env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
    """Start ``cmd`` in its own session, output appended to ``log_file``, pid recorded."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=env, cwd=cwd,
        )
    pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def wait_until(what: str, ready: Callable[[], bool], timeout: float, log_file: Path,
               pid: int | None = None) -> None:
    """Poll ``ready`` until it is true; fail early if ``pid`` dies, late after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if ready():
                return
        except StackError:
            raise  # the probe has seen enough to know it will not become ready
        except Exception:  # noqa: BLE001 - readiness probes fail in many ways while starting
            pass
        if pid is not None and not pid_alive(pid):
            raise StackError(
                f"{what} exited during start-up; see {log_file}. Last lines:\n{tail(log_file)}")
        if time.monotonic() > deadline:
            raise StackError(
                f"{what} did not become ready in {timeout:.0f} s; see {log_file}. "
                f"Last lines:\n{tail(log_file)}")
        time.sleep(0.25)


def stop_pid_file(what: str, pid_file: Path, timeout: float = 30.0) -> bool:
    """SIGTERM the recorded pid (its process group), SIGKILL after ``timeout``; True if it ran."""
    return stop_pid_files(what, [pid_file], timeout) > 0


def stop_pid_files(what: str, pid_files: list[Path], timeout: float = 30.0) -> int:
    """SIGTERM each recorded pid (its process group) at once, then wait, SIGKILL after
    ``timeout`` what still runs; how many ran. At once, because the nodes of a Kafka cluster
    each wait for the others' quorum while they shut down."""
    running = []
    for pid_file in pid_files:
        pid = read_pid(pid_file)
        if pid is None or not pid_alive(pid):
            pid_file.unlink(missing_ok=True)
            continue
        log(f"stopping {what} (pid {pid})")
        _signal_group(pid, signal.SIGTERM)
        running.append((pid, pid_file))
    deadline = time.monotonic() + timeout
    while any(pid_alive(pid) for pid, _ in running) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid, pid_file in running:
        if pid_alive(pid):
            log(f"{what} (pid {pid}) did not stop in {timeout:.0f} s; killing it")
            _signal_group(pid, signal.SIGKILL)
            while pid_alive(pid):
                time.sleep(0.1)
        pid_file.unlink(missing_ok=True)
    return len(running)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # started with start_new_session: pid is the group leader
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def apt_install(packages: list[str], why: str) -> None:
    """Install Debian packages when we may (root with apt-get); otherwise say what is missing."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise StackError(f"{why}: install {' '.join(packages)} and run again")
    log(f"{why}: installing {' '.join(packages)} with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # Another install may hold dpkg's lock (`make test` sets up the browser side by side): wait.
    lock = ["-o", "DPkg::Lock::Timeout=600"]
    subprocess.run(["apt-get", *lock, "update", "-q"], check=False, env=env,
                   stdout=subprocess.DEVNULL)
    r = subprocess.run(["apt-get", *lock, "install", "-y", "-q", *packages], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise StackError(f"apt-get install {' '.join(packages)} failed:\n{r.stderr[-2000:]}")
