"""The keys a Replayer tries for a request on an encrypted stream.

A record's ``content_key`` on an encrypted stream is a keyed commitment, so a lookup needs the
call's subject's keys: :class:`SubjectKeyRing` lists them from the key store (``subjects()``,
never ``data_key()``: a lookup must never create a key, and it must see the erased ones),
caches each subject's listing for ``cache_s`` seconds and each opened key for its own life (a
key never changes, it is only destroyed), and answers a :class:`Sealed`: the live keys, newest
first, and the erased ones, latest first. A miss under every live key of a subject that has
erased keys is reported as erased (:meth:`Sealed.miss`), since it may be.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from evidence_contract import content_key

from .errors import ReplayError
from .replay_answer import ReplayErased, ReplayMiss

__all__ = ["Sealed", "SubjectKeyRing"]


class Sealed:
    """The keys the Replayer tries for one request of an encrypted stream."""

    __slots__ = ("subject", "live", "erased")

    def __init__(self, subject: str, live: list[Any], erased: list[Any]) -> None:
        self.subject = subject
        self.live = live        # SubjectKeys, newest first
        self.erased = erased    # SubjectState of the subject's erased keys, latest first

    def miss(self, request: Any, body: bytes) -> ReplayError:
        """What a miss under every key is: erased if the subject has erased keys."""
        if self.erased:
            last = self.erased[0]
            return ReplayErased(request.method, str(request.url), last.erased_at,
                                last.request_id, subject=self.subject)
        if not self.live:
            return ReplayMiss(content_key(body).hex(), request.method, str(request.url),
                              f": the key store has no key of subject {self.subject!r}")
        return ReplayMiss(self.live[0].content_key(body).hex(), request.method,
                          str(request.url), f" under any key of subject {self.subject!r}")


class SubjectKeyRing:
    """A key store's keys by subject, as replay needs them (see the module docstring)."""

    def __init__(self, key_store: Any, cache_s: float) -> None:
        self.key_store = key_store
        self._cache_s = cache_s
        self._lock = threading.Lock()
        self._states: dict[str, tuple[list[Any], float]] = {}  # subject -> (states, listed at)
        self._subject_keys: dict[str, Any] = {}                 # key id -> SubjectKeys

    def _states_of(self, subject: str) -> list[Any]:
        from evidence_contract.keys import KeyStoreError

        now = time.monotonic()
        with self._lock:
            hit = self._states.get(subject)
        if hit is not None and now - hit[1] <= self._cache_s:
            return hit[0]
        try:
            states = [s for s in self.key_store.subjects() if s.subject == subject]
        except KeyStoreError as e:
            raise ReplayError(f"the key store cannot answer: {e}") from e
        with self._lock:
            self._states[subject] = (states, now)
        return states

    def sealed(self, subject: str) -> Sealed:
        """The subject's live keys (newest first) and erased ones, from the key store."""
        from evidence_contract.keys import ERASED, LIVE, KeyErased, KeyStoreError
        from evidence_contract.sealing import SubjectKeys

        states = self._states_of(subject)
        live: list[Any] = []
        erased = sorted((s for s in states if s.state == ERASED),
                        key=lambda s: s.erased_at or 0, reverse=True)
        for st in sorted((s for s in states if s.state == LIVE), key=lambda s: s.created_at,
                         reverse=True):
            keys = self._subject_keys.get(st.key_id)
            if keys is None:
                try:
                    key = self.key_store.key(st.key_id)
                except KeyErased as e:  # destroyed since the listing
                    erased.insert(0, e)
                    continue
                except KeyStoreError as e:
                    raise ReplayError(f"the key store cannot answer: {e}") from e
                keys = self._subject_keys[st.key_id] = SubjectKeys(key.key_id, key.material)
            live.append(keys)
        return Sealed(subject, live, erased)
