"""api.pages.sessions and api.pages.csrf: the in-memory session store (the store's contract in
tests/unit/session_contract.py, run against PostgreSQL's store in
tests/integration/test_pages_session_table.py; here what is the memory store's own: ids
hashed, a bounded table) and the CSRF checks."""

from __future__ import annotations

import pytest

from api.pages.csrf import LoginTokens, origin_problem, token_matches
from api.pages.sessions import (
    COOKIE, MemorySessionStore, cookie_header, expired_cookie_header, id_hash,
)
from tests.unit.session_contract import ABSOLUTE, API_KEY, IDLE, KEY, SessionStoreContract


@pytest.fixture
def anyio_backend():
    return "asyncio"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TestMemorySessionStore(SessionStoreContract):
    @pytest.fixture
    def clock(self):
        return Clock()

    @pytest.fixture
    def store(self, clock):
        return MemorySessionStore(idle=IDLE, absolute=ABSOLUTE, clock=clock)

    @pytest.fixture
    def elapse(self, clock):
        async def elapse(seconds: float) -> None:
            clock.now += seconds
        return elapse


@pytest.mark.anyio
async def test_the_store_keeps_the_ids_hash_never_the_id_nor_the_key():
    store = MemorySessionStore()
    sid = await store.start(API_KEY)
    assert KEY not in repr(vars(store)) and sid not in repr(vars(store))
    assert list(store._sessions) == [id_hash(sid)]  # noqa: SLF001


@pytest.mark.anyio
async def test_the_table_is_bounded_the_least_recently_used_goes_first():
    store = MemorySessionStore(capacity=3)
    ids = [await store.start(API_KEY) for _ in range(3)]
    await store.get(ids[0])                      # ids[1] is now the least recently used
    newest = await store.start(API_KEY)
    assert len(store) == 3
    assert await store.get(ids[1]) is None
    for i in (ids[0], ids[2], newest):
        assert await store.get(i) is not None


@pytest.mark.anyio
async def test_expired_sessions_are_swept_at_the_next_login():
    clock = Clock()
    store = MemorySessionStore(idle=10, absolute=100, clock=clock)
    for _ in range(5):
        await store.start(API_KEY)
    clock.now += 11
    await store.start(API_KEY)
    assert len(store) == 1


def test_idle_longer_than_absolute_is_refused():
    with pytest.raises(ValueError):
        MemorySessionStore(idle=100, absolute=10)


def test_the_cookie_is_httponly_secure_samesite_strict_path_root():
    header = cookie_header("abc", 60)
    attrs = {a.strip().split("=")[0].lower() for a in header.split(";")[1:]}
    assert header.startswith(f"{COOKIE}=abc;")
    assert {"httponly", "secure", "samesite", "path", "max-age"} <= attrs
    assert "SameSite=Strict" in header and "Path=/;" in header
    gone = expired_cookie_header()
    assert gone.startswith(f"{COOKIE}=;") and "Max-Age=0" in gone and "Secure" in gone


@pytest.mark.parametrize("headers, problem", [
    ({"origin": "https://pages.example"}, None),
    ({"origin": "HTTPS://PAGES.EXAMPLE"}, None),
    ({"referer": "https://pages.example/ui/login?next=x"}, None),
    ({"origin": "https://evil.example"}, "another site"),
    ({"origin": "https://pages.example.evil.example"}, "another site"),
    ({"origin": "null", "referer": "https://evil.example/"}, "another site"),
    ({"origin": "null"}, "without an Origin"),
    ({"referer": "https://evil.example/ui/"}, "another site"),
    ({"origin": "javascript:alert(1)"}, "another site"),
    ({}, "without an Origin"),
])
def test_the_origin_check(headers, problem):
    got = origin_problem(headers, "pages.example")
    assert got is None if problem is None else problem in got


def test_no_host_is_refused():
    assert origin_problem({"origin": "https://x"}, None)


def test_the_synchronizer_token_must_be_the_sessions():
    assert token_matches("abc", "abc")
    assert not token_matches("abc", "abd")
    assert not token_matches("abc", "")
    assert not token_matches("abc", None)
    assert not token_matches("abc", "ab\udcff")


def test_login_tokens_are_signed_by_this_process_and_expire():
    clock = Clock()
    tokens = LoginTokens(ttl=100, clock=clock)
    t = tokens.issue()
    assert tokens.valid(t)
    assert not LoginTokens(clock=clock).valid(t)          # another process's key
    issued, mac = t.split(".")
    assert not tokens.valid(f"{int(issued) + 1}.{mac}")   # the time is signed
    assert not tokens.valid(None) and not tokens.valid("") and not tokens.valid("x.y")
    clock.now += 101
    assert not tokens.valid(t)
