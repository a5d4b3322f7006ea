"""Debian's headless Chromium under Playwright, as the browser tests and the screenshots use it.

:func:`ensure_installed` runs ``tools/browser_setup.sh`` (which ``make test`` runs first) when
Chromium or axe-core is missing, one process at a time. :func:`launch` starts
/usr/bin/chromium through Playwright's ``executable_path`` (never a browser Playwright
downloads) with :data:`CHROMIUM_ARGS`, what this machine's closed network needs: without the
background-networking, component-update, sync and QUIC switches Chromium keeps trying hosts
that cannot answer. Playwright adds ``--headless`` and a new empty ``--user-data-dir`` of its
own to every launch, so two processes never share a profile.
"""

from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["AXE", "CHROMIUM", "CHROMIUM_ARGS", "ROOT", "ensure_installed", "launch"]

ROOT = Path(__file__).resolve().parents[1]
SETUP = ROOT / "tools" / "browser_setup.sh"
CHROMIUM = Path("/usr/bin/chromium")
AXE = ROOT / "build" / "browser" / "node_modules" / "axe-core" / "axe.min.js"
"""axe-core's browser bundle, installed from the npm registry by the set-up script."""

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


def ensure_installed() -> None:
    """Run the set-up script unless Chromium and axe-core are both there; under a file lock,
    since apt-get and npm fail rather than wait when another process holds theirs."""
    if CHROMIUM.exists() and AXE.exists():
        return
    lock = ROOT / "build" / "browser-setup.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        if CHROMIUM.exists() and AXE.exists():
            return
        r = subprocess.run(["sh", str(SETUP)], capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise RuntimeError(f"{SETUP} failed:\n{r.stdout}\n{r.stderr}")


def launch(playwright: Any) -> Any:
    """A headless Debian Chromium (a Playwright ``Browser``) from a started Playwright."""
    ensure_installed()
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                      args=CHROMIUM_ARGS, timeout=60_000)
