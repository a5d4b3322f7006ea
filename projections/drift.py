"""When a provider's model changed under us, read from sealed records (pure, no I/O).

A record names the provider (``provider.name``), the model asked for (``model_id``), the model
that answered (``response_model``) and the provider's backend ``fingerprint`` (OpenAI's
``system_fingerprint``). Per provider and model asked for, a *change* is a record whose
fingerprint or served model differs from the last one seen before it (in the order records
are given): the one rule both the projector's metrics and ``evidence drift`` apply.

A record without a value (a failed call, a provider that sends no fingerprint) changes
nothing: it is not evidence of another backend. A model alternating between two backends is
a change at each switch; that is what the records say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

__all__ = ["KINDS", "Change", "ChangeWatch", "Observation", "observation_of_row"]

KINDS = ("fingerprint", "served_model")
"""What can change: the provider's fingerprint, the model that answered."""


@dataclass(frozen=True, slots=True)
class Observation:
    """What one sealed record says about the model that answered it."""

    stream: str
    seq: int
    at_us: int
    """sealed at (``occurred_at_us``)"""
    provider: str
    model: str
    """the model asked for, else the one that answered"""
    fingerprint: str | None
    served_model: str | None

    @property
    def key(self) -> tuple[str, str]:
        return self.provider, self.model

    def value(self, kind: str) -> str | None:
        return self.fingerprint if kind == "fingerprint" else self.served_model


@dataclass(frozen=True, slots=True)
class Change:
    """A change point: ``kind`` went from ``old`` to ``new`` for ``provider`` and ``model``
    between record ``before`` (the last with ``old``) and ``after`` (the first with ``new``),
    each a ``(stream, seq, at_us)``."""

    provider: str
    model: str
    kind: str
    old: str
    new: str
    before: tuple[str, int, int]
    after: tuple[str, int, int]

    @property
    def at_us(self) -> int:
        return self.after[2]


def model_of(model_id: str | None, response_model: str | None) -> str:
    """The model a record is watched under: the one asked for, else the one that answered."""
    return model_id or response_model or "(none)"


def _row_positions() -> tuple[int, ...]:
    from .columns import RECORD_COLUMNS

    return tuple(RECORD_COLUMNS.index(c) for c in (
        "stream", "seq", "occurred_at_us", "provider_name", "model_id", "response_model",
        "fingerprint"))


_ROW = _row_positions()


def observation_of_row(row: tuple[Any, ...]) -> Observation:
    """The observation of a ``records`` row (:mod:`projections.rows`)."""
    stream, seq, at, provider, model_id, served, fp = (row[i] for i in _ROW)
    return Observation(stream, seq, at, provider or "(none)", model_of(model_id, served),
                       fp or None, served or None)


class ChangeWatch:
    """The last fingerprint and served model seen per provider and model; :meth:`see` gives
    the changes a record makes.

    ``max_keys`` bounds the (provider, model) pairs watched (None: no bound): the model asked
    for is the caller's word, so a metric labelled by it needs a bound. Once full, a new pair
    is not watched and :attr:`dropped` counts its records."""

    def __init__(self, max_keys: int | None = None) -> None:
        self.max_keys = max_keys
        self.last: dict[tuple[str, str], dict[str, tuple[str, tuple[str, int, int]]]] = {}
        self.dropped = 0
        # Per watched key, the (fingerprint, served model) of the last observation seen.
        self._same: dict[tuple[str, str], tuple[str | None, str | None]] = {}

    def see(self, obs: Observation) -> list[Change]:
        last = self.last.get(obs.key)
        if last is None:
            if self.max_keys is not None and len(self.last) >= self.max_keys:
                self.dropped += 1
                return []
            last = self.last[obs.key] = {}
        here = (obs.stream, obs.seq, obs.at_us)
        changes = []
        for kind in KINDS:
            value = obs.value(kind)
            if value is None:
                continue
            seen = last.get(kind)
            if seen is not None and seen[0] != value:
                changes.append(Change(obs.provider, obs.model, kind, seen[0], value, seen[1],
                                      here))
            last[kind] = (value, here)
        self._same[obs.key] = (obs.fingerprint, obs.served_model)
        return changes

    def see_all(self, observations: Iterable[Observation]) -> list[Change]:
        return [c for obs in observations for c in self.see(obs)]

    def see_rows(self, rows: Iterable[tuple[Any, ...]]) -> list[Change]:
        """:meth:`see_all` of the rows' observations (``records`` rows, in order), with the
        same changes and the same state after; the projector's per-batch call.

        A row whose values are those of the last row seen for its provider and model changes
        nothing and only moves where the values were last seen; of a run of such rows only
        the last one is looked at (each run is settled before a row with other values, and
        at the end), so most rows cost a tuple compare rather than an observation."""
        changes: list[Change] = []
        same = self._same
        pending: dict[tuple[str, str], tuple[Any, ...]] = {}
        provider_i, model_i, served_i, fp_i = _ROW[3:]
        for row in rows:
            served = row[served_i] or None
            key = (row[provider_i] or "(none)", model_of(row[model_i], served))
            values = (row[fp_i] or None, served)
            if same.get(key) == values:
                pending[key] = row
                continue
            held = pending.pop(key, None)
            if held is not None:
                changes += self.see(observation_of_row(held))
            changes += self.see(observation_of_row(row))  # sets same[key] when watched
        for held in pending.values():
            changes += self.see(observation_of_row(held))
        return changes
