"""api.pages.sessions and api.pages.csrf: the server-side session store (the key never
kept, ids hashed, idle and absolute expiry, a bounded table) and the CSRF checks."""

from __future__ import annotations

import pytest

from api.auth import Keyring
from api.pages.csrf import LoginTokens, origin_problem, token_matches
from api.pages.sessions import COOKIE, SessionStore, cookie_header, expired_cookie_header

KEY = "Zq3x9Lm2Pv8Rt5Wy1Bn7Cd4Fg6Hj0Ks2Qe"
API_KEY = Keyring([("dev", KEY, ("acme:*",))]).lookup(KEY)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_holds_the_matched_key_never_the_key_itself():
    store = SessionStore()
    sid = store.start(API_KEY)
    s = store.get(sid)
    assert s is not None and s.key is API_KEY and s.key.scope.allows("acme:x")
    assert KEY not in repr(vars(store)) and sid not in repr(vars(store))
    assert len(sid) >= 43 and s.csrf and s.csrf != sid


def test_each_session_has_its_own_id_and_token():
    store = SessionStore()
    a, b = store.start(API_KEY), store.start(API_KEY)
    assert a != b and store.get(a).csrf != store.get(b).csrf


def test_an_unknown_or_empty_id_is_no_session():
    store = SessionStore()
    store.start(API_KEY)
    assert store.get("nope") is None and store.get("") is None and store.get(None) is None


def test_a_session_idle_too_long_is_over_and_forgotten():
    clock = Clock()
    store = SessionStore(idle=60, absolute=3600, clock=clock)
    sid = store.start(API_KEY)
    clock.now += 59
    assert store.get(sid) is not None          # use renews the idle time
    clock.now += 59
    assert store.get(sid) is not None
    clock.now += 60
    assert store.get(sid) is None
    assert len(store) == 0


def test_a_session_ends_at_its_absolute_age_however_much_it_is_used():
    clock = Clock()
    store = SessionStore(idle=60, absolute=150, clock=clock)
    sid = store.start(API_KEY)
    for _ in range(2):
        clock.now += 50
        assert store.get(sid) is not None
    clock.now += 50
    assert store.get(sid) is None


def test_logout_ends_the_session():
    store = SessionStore()
    sid = store.start(API_KEY)
    store.end(sid)
    assert store.get(sid) is None
    store.end(sid)  # twice is no error
    store.end(None)


def test_the_table_is_bounded_the_least_recently_used_goes_first():
    store = SessionStore(capacity=3)
    ids = [store.start(API_KEY) for _ in range(3)]
    store.get(ids[0])                            # ids[1] is now the least recently used
    newest = store.start(API_KEY)
    assert len(store) == 3
    assert store.get(ids[1]) is None
    assert all(store.get(i) is not None for i in (ids[0], ids[2], newest))


def test_expired_sessions_are_swept_at_the_next_login():
    clock = Clock()
    store = SessionStore(idle=10, absolute=100, clock=clock)
    for _ in range(5):
        store.start(API_KEY)
    clock.now += 11
    store.start(API_KEY)
    assert len(store) == 1


def test_idle_longer_than_absolute_is_refused():
    with pytest.raises(ValueError):
        SessionStore(idle=100, absolute=10)


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
