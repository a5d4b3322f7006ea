"""API keys and the streams each may read (pure).

A key is stored only as its SHA-256; a presented key is hashed and compared with every
configured digest by ``hmac.compare_digest``, so neither the comparison nor the loop exits early
on a partial match. :func:`key_weakness` is the rule a configured key must pass
(:mod:`api.config` applies it at start-up). Each key carries a :class:`Scope` of stream patterns: an exact stream id,
a prefix ending in ``*`` (``"acme:*"``), or ``"*"`` for every stream. A stream outside a key's
scope is answered exactly like a stream that does not exist (404), so one tenant cannot probe
for another's records; list endpoints filter with :meth:`Scope.sql`. A key may also carry
the *admin* role (``ApiKey.admin``): the ``/admin`` routes (erasure) answer 403 to any other.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import string
import unicodedata
from dataclasses import dataclass
from typing import Any, Iterable

from evidence_contract import STREAM_ID_RE

from .errors import ApiConfigError

__all__ = ["MIN_KEY_BITS", "MIN_KEY_BYTES", "ApiKey", "Keyring", "Scope", "key_weakness",
           "parse_patterns"]

MIN_KEY_BYTES = 32
"""Shortest key accepted, in UTF-8 bytes."""
MIN_KEY_BITS = 128
"""Least estimated entropy accepted (see :func:`key_weakness`)."""
MIN_KEY_DISTINCT = 8
"""Fewest distinct characters accepted: rules out ``aaaa...`` and ``abab...``."""

_HEX = frozenset(string.hexdigits)
_CLASSES = ((frozenset(string.ascii_lowercase), 26), (frozenset(string.ascii_uppercase), 26),
            (frozenset(string.digits), 10), (frozenset(string.punctuation), 32))


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
    admin: bool = False    # may call the /admin routes (erasure)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def _alphabet(key: str) -> int:
    """The size of the alphabet a key's characters suggest it was drawn from."""
    chars = set(key)
    if chars <= _HEX and not (chars & set("abcdef") and chars & set("ABCDEF")):
        return 10 if chars <= set(string.digits) else 16
    size = sum(n for members, n in _CLASSES if chars & members)
    if any(ord(c) > 127 for c in chars):
        size += 128  # a generous guess for anything beyond ASCII
    return size


def key_weakness(key: str) -> str | None:
    """Why ``key`` is too weak to be an API key, or None if it passes. The rule:

    1. at least :data:`MIN_KEY_BYTES` (32) bytes of UTF-8;
    2. no whitespace or control characters (a key is pasted into headers and files);
    3. at least :data:`MIN_KEY_DISTINCT` (8) distinct characters, and not one shorter
       string repeated (``abcdabcd...``);
    4. at least :data:`MIN_KEY_BITS` (128) bits of estimated entropy: length times log2 of
       the alphabet its characters span: 10 for digits only, 16 for hex digits, else 26 for
       each of lower and upper case letters present, 10 for digits, 32 for ASCII punctuation
       (so 32 hex digits, ``secrets.token_hex(16)``, pass with exactly 128 bits; 32 decimal
       digits do not).

    An estimate cannot see how a key was made; it refuses what is plainly guessable and
    what is too short to hold 128 random bits. Make keys with ``secrets.token_urlsafe(32)``
    or ``openssl rand -hex 32``."""
    if not isinstance(key, str):
        return "the key must be a string"
    size = len(key.encode("utf-8", "surrogatepass"))
    if size < MIN_KEY_BYTES:
        return f"the key is {size} bytes long; it must be at least {MIN_KEY_BYTES}"
    if any(c.isspace() or unicodedata.category(c).startswith("C") for c in key):
        return "the key contains whitespace or control characters"
    if len(set(key)) < MIN_KEY_DISTINCT:
        return (f"the key has only {len(set(key))} distinct characters; it must have at "
                f"least {MIN_KEY_DISTINCT}")
    if key in (key + key)[1:-1]:
        return "the key is one shorter string repeated"
    bits = len(key) * math.log2(_alphabet(key))
    if bits < MIN_KEY_BITS:
        return (f"the key has about {bits:.0f} bits of estimated entropy (length × log2 of "
                f"its alphabet); it needs at least {MIN_KEY_BITS}: make it longer or draw it "
                f"from a larger alphabet")
    return None


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

    def __init__(self, keys: Iterable[tuple[Any, ...]]) -> None:
        """``keys``: ``(name, key, patterns[, admin])``; patterns as from
        :func:`parse_patterns`, ``admin`` (default False) grants the admin role."""
        entries: list[ApiKey] = []
        seen: dict[bytes, str] = {}
        for name, key, patterns, *role in keys:
            if not isinstance(key, str) or not key:
                raise ApiConfigError(f"API key {name!r}: the key must be a non-empty string")
            d = _digest(key)
            if d in seen:
                raise ApiConfigError(f"API keys {seen[d]!r} and {name!r} are the same key; "
                                  f"give each key one entry")
            seen[d] = name
            entries.append(ApiKey(name, d, Scope.of(patterns), bool(role and role[0])))
        self._keys = tuple(entries)

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def names(self) -> list[str]:
        return [k.name for k in self._keys]

    def by_digest(self, digest: bytes) -> ApiKey | None:
        """The key whose SHA-256 is ``digest`` (a stored page session's key), or None once it
        is no longer configured."""
        return next((k for k in self._keys if k.digest == digest), None)

    def lookup(self, presented: str) -> ApiKey | None:
        d = _digest(presented)
        found = None
        for k in self._keys:  # no early exit: time does not depend on which key matched
            if hmac.compare_digest(k.digest, d):
                found = k
        return found
