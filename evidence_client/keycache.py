"""The sender's cache of subject keys (``content_policy="encrypt"``).

A key is per subject *per epoch* (content of a new day or month goes under that epoch's key,
which retention can shred on its own), and a subject may be erased elsewhere at any time. So a
cached key is served for ``ttl_s`` at most, and never once its epoch has ended: new content
must go under the new epoch's key, or retention would shred it with the old epoch's. The
stream is passed to the store, which records it on the key. Used by the sender thread only.
"""

from __future__ import annotations

import time
from typing import Any, Callable

__all__ = ["KeyCache"]

_MAX_ENTRIES = 10_000


class KeyCache:
    """``SubjectKeys`` per (subject, stream), from ``store.data_key(subject, stream=...)``."""

    def __init__(self, store: Any, ttl_s: float, clock: Callable[[], int],
                 max_entries: int = _MAX_ENTRIES) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._clock = clock  # UTC µs, compared with the key's epoch end
        self._max = max_entries
        # (subject, stream) -> (SubjectKeys, fetched at (monotonic), epoch end (UTC µs) or None)
        self._keys: dict[tuple[str, str], tuple[Any, float, int | None]] = {}

    def get(self, subject: str, stream: str) -> Any:
        """The subject's keys, from the cache or the store (whose errors propagate)."""
        from evidence_contract.sealing import SubjectKeys

        now = time.monotonic()
        hit = self._keys.get((subject, stream))
        if (hit is not None and now - hit[1] < self._ttl_s
                and (hit[2] is None or self._clock() < hit[2])):
            return hit[0]
        key = self._store.data_key(subject, stream=stream)
        keys = SubjectKeys(key.key_id, key.material)
        if len(self._keys) >= self._max:
            self._keys.clear()
        self._keys[(subject, stream)] = (keys, now, getattr(key, "expires_at", None))
        return keys
