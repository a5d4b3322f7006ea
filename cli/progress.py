"""A progress bar for long runs, on stderr: one rewritten line on a terminal, plain lines
(every few seconds) otherwise, so logs of a non-interactive rebuild stay readable."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


def _duration(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class Progress:
    """Shows ``done`` of ``total`` offsets, records/s and an ETA."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None,
                 tty: bool | None = None, interval: float | None = None) -> None:
        self.label = label
        self.total = max(total, 0)
        self.out = stream or sys.stderr
        self.tty = self.out.isatty() if tty is None else tty
        self.interval = interval if interval is not None else (0.2 if self.tty else 2.0)
        self.t0 = time.monotonic()
        self._shown = 0.0
        self.done = 0
        self.records = 0

    def update(self, done: int, records: int) -> None:
        self.done, self.records = done, records
        now = time.monotonic()
        if now - self._shown >= self.interval:
            self._shown = now
            self._show(final=False)

    def close(self) -> None:
        self._show(final=True)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        rate = self.records / elapsed
        offset_rate = self.done / elapsed
        pct = 100.0 * self.done / self.total if self.total else 100.0
        left = max(self.total - self.done, 0)
        eta = _duration(left / offset_rate) if offset_rate > 0 else "--:--"
        width = 30
        fill = int(width * min(pct, 100.0) / 100)
        return (f"{self.label} [{'#' * fill}{'.' * (width - fill)}] {min(pct, 100.0):5.1f}% "
                f"{self.done}/{self.total} offsets, {self.records} records, "
                f"{rate:,.0f} records/s, elapsed {_duration(elapsed)}, ETA {eta}")

    def _show(self, final: bool) -> None:
        if self.tty:
            self.out.write("\r\x1b[K" + self.line() + ("\n" if final else ""))
        else:
            self.out.write(self.line() + "\n")
        self.out.flush()
