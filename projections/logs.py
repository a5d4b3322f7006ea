"""Structured logs: one JSON object per line on stderr, ``event`` naming what happened."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

__all__ = ["log"]


def log(level: str, event: str, /, *, to: TextIO | None = None, **fields: Any) -> None:
    """Write ``{"ts", "level", "logger", "event", **fields}`` as one line to ``to``
    (stderr by default) and flush; ``fields`` may use any name but ``to``."""
    entry = {"ts": round(time.time(), 6), "level": level, "logger": "evidence.projector",
             "event": event, **fields}
    out = to or sys.stderr
    out.write(json.dumps(entry, default=str, separators=(",", ":")) + "\n")
    out.flush()
