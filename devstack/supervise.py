"""A small supervisor for the local stack's services: ``python -m devstack.supervise NAME
STATE_FILE -- CMD...`` runs CMD, and when it exits starts it again, with backoff.

- Backoff doubles from 1 s to 30 s between restarts and resets once a run has lasted 60 s.
- Exit code :data:`EXIT_DO_NOT_RESTART` (3) means "restarting me would do harm" — a writer
  fenced by another live writer with its transactional id, say: the supervisor then stops
  too, and says why. SIGTERM/SIGINT are passed on to the service, which is then not restarted.
- The state (supervisor and service pids, restarts, last exit code and time) is rewritten to
  STATE_FILE as JSON at each change; ``evidence dev status`` shows it.

This is the local stack's stand-in for what systemd (``Restart=on-failure``), Kubernetes or
the compose file's ``restart: unless-stopped`` do in a deployment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["EXIT_DO_NOT_RESTART", "main", "read_state"]

EXIT_DO_NOT_RESTART = 3
BACKOFF_MIN_S, BACKOFF_MAX_S, HEALTHY_AFTER_S = 1.0, 30.0, 60.0


def read_state(path: Path) -> dict | None:
    """The supervisor's last written state, or None."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_state(path: Path, **state: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m devstack.supervise NAME STATE_FILE -- CMD...", file=sys.stderr)
        return 2
    name, state_file, cmd = argv[0], Path(argv[1]), argv[3:]
    stopping = False
    child: subprocess.Popen | None = None

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    restarts, backoff = 0, BACKOFF_MIN_S
    last_exit: int | None = None
    while True:
        started = time.time()
        child = subprocess.Popen(cmd)
        _write_state(state_file, name=name, supervisor_pid=os.getpid(), pid=child.pid,
                     state="running", restarts=restarts, last_exit=last_exit,
                     started_at=started)
        code = child.wait()
        last_exit = code
        ran = time.time() - started
        if stopping:
            _write_state(state_file, name=name, supervisor_pid=os.getpid(), pid=None,
                         state="stopped", restarts=restarts, last_exit=code, started_at=started)
            return 0
        if code == EXIT_DO_NOT_RESTART:
            print(f"[supervise] {name} exited {code}: it must not be restarted (see its log)",
                  flush=True)
            _write_state(state_file, name=name, supervisor_pid=os.getpid(), pid=None,
                         state=f"exited {code}, not restarted", restarts=restarts,
                         last_exit=code, started_at=started)
            return code
        if ran >= HEALTHY_AFTER_S:
            backoff = BACKOFF_MIN_S
        restarts += 1
        print(f"[supervise] {name} exited {code} after {ran:.1f} s; restart {restarts} in "
              f"{backoff:.0f} s", flush=True)
        _write_state(state_file, name=name, supervisor_pid=os.getpid(), pid=None,
                     state=f"restarting in {backoff:.0f} s", restarts=restarts,
                     last_exit=code, started_at=started)
        deadline = time.monotonic() + backoff
        while time.monotonic() < deadline and not stopping:
            time.sleep(0.1)
        if stopping:
            return 0
        backoff = min(backoff * 2, BACKOFF_MAX_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
