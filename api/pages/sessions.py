"""Browser sessions of the pages: the API key stays on the server (pure).

A person enters an API key once, on the login page. The key is looked up in the keyring at
that moment and never kept: the session holds the :class:`~api.auth.ApiKey` it matched (its
name, SHA-256 and scope), so the pages read exactly what the JSON API lets that key read. The
browser gets only the session id, a random 256-bit value in a cookie that is HttpOnly, Secure,
SameSite=Strict and Path=/ (see :func:`cookie_header`); the store keys its table by the id's
SHA-256, so a dump of the table holds nothing a browser could present.

A session ends when it has been idle for :data:`IDLE_SECONDS`, when it is
:data:`ABSOLUTE_SECONDS` old whatever its use, or at logout (:meth:`SessionStore.end`). The
store is in the memory of one API process: sessions do not survive a restart, and behind
several processes a browser must stick to one (or log in again). It holds at most
``capacity`` sessions: past that the least recently used is ended, so logins cannot fill the
memory.

Each session carries its CSRF token (:mod:`api.pages.csrf`): random, made with the session,
compared in constant time.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from ..auth import ApiKey

__all__ = ["ABSOLUTE_SECONDS", "COOKIE", "IDLE_SECONDS", "Session", "SessionStore",
           "cookie_header", "expired_cookie_header"]

COOKIE = "evidence_session"
"""The session cookie's name."""
IDLE_SECONDS = 30 * 60
"""A session unused this long is over."""
ABSOLUTE_SECONDS = 12 * 60 * 60
"""A session this old is over, however much it is used."""
CAPACITY = 10_000
"""Most sessions held at once; the least recently used goes first."""


@dataclass
class Session:
    """One browser's login: the key it matched (never the key itself) and its CSRF token."""

    key: ApiKey
    csrf: str
    created: float
    used: float = field(default=0.0)


def _hash(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).digest()


class SessionStore:
    """Sessions by id, with idle and absolute expiry; ``clock`` is injectable for tests."""

    def __init__(self, *, idle: float = IDLE_SECONDS, absolute: float = ABSOLUTE_SECONDS,
                 capacity: int = CAPACITY, clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < idle <= absolute:
            raise ValueError("idle must be positive and at most absolute")
        self.idle, self.absolute, self.capacity, self._clock = idle, absolute, capacity, clock
        self._sessions: OrderedDict[bytes, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def start(self, key: ApiKey) -> str:
        """A new session of ``key``; returns its id (the cookie's value)."""
        now = self._clock()
        self._sweep(now)
        session_id = secrets.token_urlsafe(32)
        self._sessions[_hash(session_id)] = Session(key, secrets.token_urlsafe(32), now, now)
        while len(self._sessions) > self.capacity:
            self._sessions.popitem(last=False)
        return session_id

    def get(self, session_id: str | None) -> Session | None:
        """The live session of ``session_id`` (its use noted), or None: unknown, expired."""
        if not session_id:
            return None
        h = _hash(session_id)
        s = self._sessions.get(h)
        if s is None:
            return None
        now = self._clock()
        if now - s.used >= self.idle or now - s.created >= self.absolute:
            del self._sessions[h]
            return None
        s.used = now
        self._sessions.move_to_end(h)
        return s

    def end(self, session_id: str | None) -> None:
        """Forget the session (logout); an unknown id is no error."""
        if session_id:
            self._sessions.pop(_hash(session_id), None)

    def _sweep(self, now: float) -> None:
        """Drop expired sessions from the least recently used end (they are in use order)."""
        while self._sessions:
            h, s = next(iter(self._sessions.items()))
            if now - s.used < self.idle and now - s.created < self.absolute:
                break
            del self._sessions[h]


def cookie_header(session_id: str, max_age: int = ABSOLUTE_SECONDS) -> str:
    """The ``Set-Cookie`` value that gives the browser its session id."""
    return (f"{COOKIE}={session_id}; Max-Age={max_age}; Path=/; HttpOnly; Secure; "
            f"SameSite=Strict")


def expired_cookie_header() -> str:
    """The ``Set-Cookie`` value that removes the session cookie (logout)."""
    return f"{COOKIE}=; Max-Age=0; Path=/; HttpOnly; Secure; SameSite=Strict"
