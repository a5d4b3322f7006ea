"""The session store's contract (api.pages.sessions.SessionStore), run against every store:
the in-memory one in tests/unit/test_pages_sessions.py, PostgreSQL's in
tests/integration/test_pages_session_table.py.

A test class inherits :class:`SessionStoreContract` and gives two fixtures: ``store``, a store
with ``idle=60`` and ``absolute=150`` seconds, and ``elapse``, an async function that makes
that many seconds pass for every session of the store (its clock moved, or its rows'
times moved back)."""

from __future__ import annotations

import pytest

from api.auth import Keyring

KEY = "Zq3x9Lm2Pv8Rt5Wy1Bn7Cd4Fg6Hj0Ks2Qe"
KEYRING = Keyring([("dev", KEY, ("acme:*",))])
API_KEY = KEYRING.lookup(KEY)
IDLE, ABSOLUTE = 60, 150


@pytest.mark.anyio
class SessionStoreContract:
    @pytest.fixture
    def anyio_backend(self):
        return "asyncio"

    async def test_a_session_holds_the_matched_key_and_a_token(self, store):
        sid = await store.start(API_KEY)
        s = await store.get(sid)
        assert s is not None and s.key == API_KEY and s.key.scope.allows("acme:x")
        assert len(sid) >= 43 and len(s.csrf) >= 43 and s.csrf != sid

    async def test_each_session_has_its_own_id_and_token(self, store):
        a, b = await store.start(API_KEY), await store.start(API_KEY)
        assert a != b and (await store.get(a)).csrf != (await store.get(b)).csrf

    async def test_the_token_stays_the_sessions(self, store):
        sid = await store.start(API_KEY)
        assert (await store.get(sid)).csrf == (await store.get(sid)).csrf

    async def test_an_unknown_or_empty_id_is_no_session(self, store):
        sid = await store.start(API_KEY)
        for other in ("nope", "", None, sid + "x", sid[:-1]):
            assert await store.get(other) is None

    async def test_a_session_idle_too_long_is_over(self, store, elapse):
        sid = await store.start(API_KEY)
        await elapse(IDLE - 1)
        assert await store.get(sid) is not None          # use renews the idle time
        await elapse(IDLE - 1)
        assert await store.get(sid) is not None
        await elapse(IDLE)
        assert await store.get(sid) is None
        await elapse(-IDLE)                               # gone, not merely out of date
        assert await store.get(sid) is None

    async def test_a_session_ends_at_its_absolute_age_however_much_it_is_used(self, store,
                                                                               elapse):
        sid = await store.start(API_KEY)
        for _ in range(2):
            await elapse(50)
            assert await store.get(sid) is not None
        await elapse(50)
        assert await store.get(sid) is None

    async def test_logout_ends_the_session_and_only_it(self, store):
        sid, other = await store.start(API_KEY), await store.start(API_KEY)
        await store.end(sid)
        assert await store.get(sid) is None and await store.get(other) is not None
        await store.end(sid)  # twice is no error
        await store.end(None)
        await store.end("")

    async def test_the_login_secret_is_32_random_bytes_kept(self, store):
        secret = await store.login_secret()
        assert len(secret) == 32 and secret == await store.login_secret()
