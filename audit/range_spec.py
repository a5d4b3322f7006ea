"""What a range of one stream is, as ``evidence audit`` and ``evidence export`` take it (pure).

A range is given one of three ways, and always ends up a span of seqs ``first..last``
(inclusive) of one stream, inside the tree of the signed checkpoint the range is checked
against:

- ``--seq A..B``: the seqs themselves;
- ``--last N``: the last ``N`` records that checkpoint covers;
- ``--all`` (``evidence export``): every record the checkpoint covers;
- ``--since T`` and/or ``--until T`` (ISO 8601; a time without an offset is UTC): the records
  sealed at or after ``since`` and before ``until``. The writer seals a stream's records with
  a non-decreasing ``occurred_at`` (``max(now, head.occurred_at)``), so a time window is one
  span of seqs; the projection says where it starts and ends, and the range audit checks
  those ends on the log's own records (the one before the span and the one after it).

:class:`RangeError` (a ``ValueError``) says what is wrong with an option, for a usage error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

from evidence_contract.errors import EvidenceError

__all__ = ["RangeError", "RangeSpec", "Span", "parse_instant", "parse_seq_range"]

_SEQS = re.compile(r"([1-9][0-9]{0,18})\.\.([1-9][0-9]{0,18})")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class RangeError(EvidenceError, ValueError):
    """A range option that cannot be a range (a usage error)."""


@dataclass(frozen=True)
class Span:
    """Seqs ``first..last`` of a stream, both included, ``1 <= first <= last``."""

    first: int
    last: int

    def __post_init__(self) -> None:
        if not 1 <= self.first <= self.last:
            raise RangeError(f"a range of seqs runs from 1 up: {self.first}..{self.last}")

    def __len__(self) -> int:
        return self.last - self.first + 1

    def __str__(self) -> str:
        return f"{self.first}..{self.last}"


def parse_seq_range(text: str) -> Span:
    """``"A..B"`` as a :class:`Span` (``1 <= A <= B``)."""
    m = _SEQS.fullmatch(text.strip())
    if m is None:
        raise RangeError(f"--seq {text!r}: give A..B, two seqs from 1 up (e.g. 100..250)")
    first, last = int(m.group(1)), int(m.group(2))
    if first > last:
        raise RangeError(f"--seq {text!r}: the first seq is after the last")
    return Span(first, last)


def parse_instant(text: str, option: str = "--since") -> int:
    """An ISO 8601 date or time as µs since the epoch (what records seal as ``occurred_at``);
    a time without an offset is UTC, a date alone is its midnight UTC."""
    raw = text.strip()
    try:
        when = datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw)
    except ValueError:
        raise RangeError(f"{option} {text!r} is not an ISO 8601 time (e.g. 2026-12-03, "
                         f"2026-12-03T07:30:00Z, 2026-12-03T08:30:00+01:00)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass(frozen=True)
class RangeSpec:
    """A range as asked for, before it is placed in a tree: exactly one of ``seqs``, ``last``
    or a time window (``since`` and/or ``until``, µs since the epoch, ``since`` included,
    ``until`` not)."""

    seqs: Span | None = None
    last: int | None = None
    since: int | None = None
    until: int | None = None
    whole: bool = False
    """The whole stream, as far as the checkpoint covers it (``evidence export --all``)."""

    @classmethod
    def from_options(cls, seq: str | None = None, last: int | None = None,
                     since: str | None = None, until: str | None = None,
                     whole: bool = False) -> "RangeSpec | None":
        """The range the options give, None when they give none; RangeError when they give
        more than one kind, or one that selects nothing whatever the log holds."""
        kinds = [name for name, given in (("--all", whole), ("--seq A..B", seq is not None),
                                          ("--last N", last is not None),
                                          ("--since/--until",
                                           since is not None or until is not None)) if given]
        if not kinds:
            return None
        if len(kinds) > 1:
            raise RangeError(f"give one range: {' or '.join(kinds)}, not both")
        if whole:
            return cls(whole=True)
        if seq is not None:
            return cls(seqs=parse_seq_range(seq))
        if last is not None:
            if last < 1:
                raise RangeError(f"--last {last}: give a number of records from 1 up")
            return cls(last=last)
        lo = None if since is None else parse_instant(since, "--since")
        hi = None if until is None else parse_instant(until, "--until")
        if lo is not None and hi is not None and lo >= hi:
            raise RangeError(f"--since {since} is not before --until {until}: the window is "
                             "empty")
        return cls(since=lo, until=hi)

    @property
    def windowed(self) -> bool:
        return self.since is not None or self.until is not None

    def in_window(self, occurred_at: int) -> bool:
        return ((self.since is None or occurred_at >= self.since)
                and (self.until is None or occurred_at < self.until))

    def describe(self) -> str:
        from evidence_contract import iso_micros

        if self.whole:
            return "the whole stream the checkpoint covers"
        if self.seqs is not None:
            return f"seqs {self.seqs}"
        if self.last is not None:
            return f"the last {self.last} records the checkpoint covers"
        return ("records sealed" + ("" if self.since is None else
                                    f" from {iso_micros(self.since)}")
                + ("" if self.until is None else f" before {iso_micros(self.until)}"))

    def place(self, size: int, window: tuple[int, int] | None = None) -> Span:
        """The span of seqs in a tree of ``size`` records (a signed checkpoint's): a seq range
        must lie inside it; ``--last N`` is its last N; a time window is ``window``, the
        first and last seq the projection holds in it (None: none), cut at ``size``.
        RangeError when the range selects nothing there."""
        if self.seqs is not None:
            if self.seqs.last > size:
                raise RangeError(f"--seq {self.seqs} runs past the records the stream's latest "
                                 f"signed checkpoint covers (seq {size})")
            return self.seqs
        if self.last is not None or self.whole:
            if size == 0:
                raise RangeError("the stream's checkpoint covers no record")
            return Span(1 if self.whole else max(1, size - self.last + 1), size)
        if window is None or window[0] > size:
            raise RangeError(f"no record of the stream in the window ({self.describe()}) "
                             f"within the {size} records its latest checkpoint covers")
        return Span(window[0], min(window[1], size))
