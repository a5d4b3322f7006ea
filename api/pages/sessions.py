"""Browser sessions of the pages: the API key stays on the server (pure).

A person enters an API key once, on the login page. The key is looked up in the keyring at
that moment and never kept: the session holds the :class:`~api.auth.ApiKey` it matched (its
name, SHA-256 and scope), so the pages read exactly what the JSON API lets that key read. The
browser gets only the session id, a random 256-bit value in a cookie that is HttpOnly, Secure,
SameSite=Strict and Path=/ (see :func:`cookie_header`); a store keys its sessions by the id's
SHA-256 (:func:`id_hash`), so a dump of them holds nothing a browser could present.

A session ends when it has been idle for :data:`IDLE_SECONDS`, when it is
:data:`ABSOLUTE_SECONDS` old whatever its use, or at logout (:meth:`SessionStore.end`).

:class:`SessionStore` is what the pages ask of a store. The API's is
:class:`api.pages.session_table.PostgresSessionStore`: one table every server process reads,
so a session started by one process is the session of every other and outlives a restart.
:class:`MemorySessionStore` keeps them in one process's memory, for tests of the pure parts
and of the app in process.

Each session carries its CSRF token (:mod:`api.pages.csrf`): random, made with the session,
compared in constant time. A store also holds the secret the login form's tokens are signed
with (:meth:`SessionStore.login_secret`), so a form served by one process is taken by another.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Protocol

from ..auth import ApiKey

__all__ = ["ABSOLUTE_SECONDS", "CAPACITY", "COOKIE", "IDLE_SECONDS", "MemorySessionStore",
           "Session", "SessionStore", "check_limits", "cookie_header", "expired_cookie_header",
           "id_hash", "new_session_id", "new_token"]

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
    """One browser's login: the key it matched (never the key itself) and its CSRF token;
    ``created`` and ``used`` in seconds of the store's clock."""

    key: ApiKey
    csrf: str
    created: float
    used: float = field(default=0.0)


class SessionStore(Protocol):
    """What the pages ask of a session store."""

    idle: float
    absolute: float

    async def start(self, key: ApiKey) -> str:
        """A new session of ``key``; returns its id (the cookie's value)."""

    async def get(self, session_id: str | None) -> Session | None:
        """The live session of ``session_id`` (its use noted), or None: unknown, expired."""

    async def end(self, session_id: str | None) -> None:
        """Forget the session (logout); an unknown id is no error."""

    async def login_secret(self) -> bytes:
        """The key the login form's tokens are signed with, the same for every process
        sharing the store."""


def id_hash(session_id: str) -> bytes:
    """What a store keeps of a session id: its SHA-256."""
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).digest()


def new_session_id() -> str:
    """A random 256-bit session id, URL-safe."""
    return secrets.token_urlsafe(32)


def new_token() -> str:
    """A random 256-bit CSRF token."""
    return secrets.token_urlsafe(32)


def check_limits(idle: float, absolute: float) -> None:
    if not 0 < idle <= absolute:
        raise ValueError("idle must be positive and at most absolute")


class MemorySessionStore:
    """Sessions by id in this process's memory, with idle and absolute expiry and at most
    ``capacity`` of them (past that the least recently used is ended); ``clock`` is
    injectable for tests."""

    def __init__(self, *, idle: float = IDLE_SECONDS, absolute: float = ABSOLUTE_SECONDS,
                 capacity: int = CAPACITY, clock: Callable[[], float] = time.monotonic) -> None:
        check_limits(idle, absolute)
        self.idle, self.absolute, self.capacity, self._clock = idle, absolute, capacity, clock
        self._sessions: OrderedDict[bytes, Session] = OrderedDict()
        self._secret = secrets.token_bytes(32)

    def __len__(self) -> int:
        return len(self._sessions)

    async def start(self, key: ApiKey) -> str:
        now = self._clock()
        self._sweep(now)
        session_id = new_session_id()
        self._sessions[id_hash(session_id)] = Session(key, new_token(), now, now)
        while len(self._sessions) > self.capacity:
            self._sessions.popitem(last=False)
        return session_id

    async def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        h = id_hash(session_id)
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

    async def end(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(id_hash(session_id), None)

    async def login_secret(self) -> bytes:
        return self._secret

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
