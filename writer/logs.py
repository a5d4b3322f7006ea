"""Structured logs: one JSON object per line on stderr, ``event`` naming what happened."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

__all__ = ["log"]


def log(level: str, event: str, *, _out: TextIO | None = None, **fields: Any) -> None:
    """Write ``{"ts", "level", "logger", "event", **fields}`` as one line and flush."""
    entry = {"ts": round(time.time(), 6), "level": level, "logger": "evidence.writer",
             "event": event, **fields}
    out = _out or sys.stderr
    out.write(json.dumps(entry, default=str, separators=(",", ":")) + "\n")
    out.flush()
