"""What the long checks (``evidence audit``, ``evidence monitor``) share: a progress bar that
appears once the total is known, and the JSON report on standard output or in a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .progress import Progress

__all__ = ["LazyProgress", "write_json"]


class LazyProgress:
    """A ``progress(done, total)`` callback: the bar is made at the first call, when the
    reader knows the total (offsets or items), and shows ``done`` of it."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: Progress | None = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = Progress(self.label, total)
        self.bar.update(done, done)

    def close(self, records: int | None = None) -> None:
        """Show the final line (with ``records``, the count of what was read, when given);
        nothing when the bar never appeared."""
        if self.bar is None:
            return
        if records is not None:
            self.bar.records = records
        self.bar.close()


def write_json(report: dict[str, Any], dest: str) -> None:
    """The report, indented, on standard output when ``dest`` is ``-``, else in that file."""
    text = json.dumps(report, indent=2)
    if dest == "-":
        print(text)
    else:
        Path(dest).write_text(text + "\n", encoding="utf-8")
