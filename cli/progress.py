"""A progress line for long runs (records/s and ETA) on stderr.

On a terminal it redraws one line; otherwise (CI, pipes) it prints a plain line at most every
``interval`` seconds, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, label: str, unit: str = "records", stream: TextIO | None = None,
                 interval: float = 5.0):
        self.label = label
        self.unit = unit
        self.out = stream or sys.stderr
        self.tty = self.out.isatty()
        self.interval = 0.2 if self.tty else interval
        self.t0 = time.monotonic()
        self._last = 0.0
        self.done = 0
        self.total = 0

    def line(self, done: int, total: int, now: float | None = None) -> str:
        elapsed = max((now or time.monotonic()) - self.t0, 1e-9)
        rate = done / elapsed
        parts = [f"{self.label}: {done:,}"]
        if total:
            parts[0] += f"/{total:,} ({min(100.0, 100.0 * done / total):.0f}%)"
        parts.append(f"{rate:,.0f} {self.unit}/s")
        if total and rate > 0 and done < total:
            parts.append(f"ETA {(total - done) / rate:,.0f} s")
        return "  ".join(parts)

    def __call__(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        text = self.line(done, total, now)
        if self.tty:
            self.out.write("\r\x1b[K" + text)
        else:
            self.out.write(text + "\n")
        self.out.flush()

    def finish(self) -> None:
        text = self.line(self.done, self.total) + f"  done in {time.monotonic() - self.t0:.1f} s"
        self.out.write(("\r\x1b[K" if self.tty else "") + text + "\n")
        self.out.flush()
