"""API keys and the streams each may read (pure).

A key is stored only as its SHA-256; a presented key is hashed and compared with every
configured digest by ``hmac.compare_digest``, so neither the comparison nor the loop exits early
on a partial match. Each key carries a :class:`Scope` of stream patterns: an exact stream id,
a prefix ending in ``*`` (``"acme:*"``), or ``"*"`` for every stream. A stream outside a key's
scope is answered exactly like a stream that does not exist (404), so one tenant cannot probe
for another's records; list endpoints filter with :meth:`Scope.sql`.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any, Iterable

from evidence_contract import STREAM_ID_RE

from .errors import ApiConfigError

__all__ = ["ApiKey", "Keyring", "Scope", "parse_patterns"]


@dataclass(frozen=True, slots=True)
class Scope:
    """The streams a key may read."""

    everything: bool = False
    exact: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()

    @classmethod
    def of(cls, patterns: Iterable[str]) -> Scope:
        exact, prefixes, everything = set(), [], False
        for p in patterns:
            if p == "*":
                everything = True
            elif p.endswith("*"):
                prefixes.append(p[:-1])
            else:
                exact.add(p)
        return cls(everything, frozenset(exact), tuple(sorted(set(prefixes))))

    def allows(self, stream: str) -> bool:
        return self.everything or stream in self.exact or stream.startswith(self.prefixes)

    def sql(self, column: str = "stream") -> tuple[str, list[Any]]:
        """A ``where`` condition over ``column`` and its parameters; ``("true", [])`` for all."""
        if self.everything:
            return "true", []
        # Patterns are restricted to the stream alphabet, whose only LIKE metacharacter is "_".
        likes = [p.replace("_", r"\_") + "%" for p in self.prefixes]
        return f"({column} = any(%s) or {column} like any(%s))", [list(self.exact), likes]


@dataclass(frozen=True, slots=True)
class ApiKey:
    name: str
    digest: bytes          # sha256 of the key; the key itself is not kept
    scope: Scope


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def parse_patterns(value: str | Iterable[Any], where: str) -> tuple[str, ...]:
    """Validate stream patterns given as a comma-separated string or a list of strings."""
    items = value.split(",") if isinstance(value, str) else list(value)
    patterns = []
    for item in items:
        if not isinstance(item, str):
            raise ApiConfigError(f"{where}: stream patterns must be strings, got {item!r}")
        p = item.strip()
        if not p:
            continue
        body = p[:-1] if p.endswith("*") else p
        if p != "*" and (not body or not STREAM_ID_RE.fullmatch(body)):
            raise ApiConfigError(
                f"{where}: {p!r} is not a stream pattern; use an exact stream id, a prefix "
                f"ending in '*' such as 'acme:*', or '*' for every stream")
        patterns.append(p)
    if not patterns:
        raise ApiConfigError(f"{where}: no stream patterns; give at least one (e.g. 'acme:*', "
                          f"or '*' for every stream)")
    return tuple(patterns)


class Keyring:
    """The configured keys; :meth:`lookup` answers the key presented with a request."""

    def __init__(self, keys: Iterable[tuple[str, str, Iterable[str]]]) -> None:
        """``keys``: ``(name, key, patterns)`` triples; patterns as from :func:`parse_patterns`."""
        entries: list[ApiKey] = []
        seen: dict[bytes, str] = {}
        for name, key, patterns in keys:
            if not isinstance(key, str) or not key:
                raise ApiConfigError(f"API key {name!r}: the key must be a non-empty string")
            d = _digest(key)
            if d in seen:
                raise ApiConfigError(f"API keys {seen[d]!r} and {name!r} are the same key; "
                                  f"give each key one entry")
            seen[d] = name
            entries.append(ApiKey(name, d, Scope.of(patterns)))
        self._keys = tuple(entries)

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def names(self) -> list[str]:
        return [k.name for k in self._keys]

    def lookup(self, presented: str) -> ApiKey | None:
        d = _digest(presented)
        found = None
        for k in self._keys:  # no early exit: time does not depend on which key matched
            if hmac.compare_digest(k.digest, d):
                found = k
        return found
