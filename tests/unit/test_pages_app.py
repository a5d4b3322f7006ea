"""The pages in the app, in process (no database is reached by these routes): login with the
key kept server-side, the cookie's flags, CSRF refusals, security headers on every answer,
errors as pages, logout. The pages over a real pipeline: tests/integration/test_pages.py."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.auth import Keyring
from api.config import Settings
from api.pages.sessions import COOKIE, MemorySessionStore

KEY = "Zq3x9Lm2Pv8Rt5Wy1Bn7Cd4Fg6Hj0Ks2Qe"
HOST = "https://pages.test"


@pytest.fixture
def client():
    settings = Settings(database_url="postgresql://nobody@127.0.0.1:1/none",
                        keyring=Keyring([("dev", KEY, ("acme:*",))]))
    # No lifespan: nothing here opens the pool; the sessions in memory, not in PostgreSQL.
    app = create_app(settings)
    app.state.page_sessions = MemorySessionStore()
    return TestClient(app, base_url=HOST, follow_redirects=False)


def token(page: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


def login(client, key: str = KEY, **headers) -> tuple[object, str | None]:
    form = {"csrf": token(client.get("/ui/login").text), "key": key, "next": "/ui/"}
    r = client.post("/ui/login", data=form, headers={"origin": HOST, **headers})
    client.cookies.clear()  # each test sends the cookie it means to, explicitly
    sid = None
    if "set-cookie" in r.headers:
        sid = r.headers["set-cookie"].split(";")[0].split("=", 1)[1]
    return r, sid


def test_every_page_carries_the_security_headers(client):
    for r in (client.get("/ui/login"), client.get("/ui/nothing/here"),
              client.get("/ui/static/pages.css")):
        csp = r.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp and "script-src 'self'" in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "same-origin"
        assert r.headers["x-frame-options"] == "DENY"


def test_a_page_without_a_session_sends_the_browser_to_login(client):
    r = client.get("/ui/streams/acme:x/records/1?a=b")
    assert r.status_code == 303
    assert r.headers["location"] == \
        "/ui/login?next=%2Fui%2Fstreams%2Facme%3Ax%2Frecords%2F1%3Fa%3Db"


def test_login_gives_a_session_id_in_a_strict_cookie_never_the_key(client):
    r, sid = login(client)
    assert r.status_code == 303 and r.headers["location"] == "/ui/"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    for flag in ("HttpOnly", "Secure", "SameSite=Strict", "Path=/"):
        assert flag in cookie
    assert KEY not in cookie and sid and len(sid) >= 43
    assert "localStorage" not in client.get("/ui/login").text


def test_a_wrong_key_is_the_form_again_with_a_401_and_no_cookie(client):
    r, sid = login(client, "not-the-key-but-long-enough-to-look-like-one")
    assert r.status_code == 401 and sid is None
    assert "not one this API knows" in r.text and 'name="key"' in r.text


def test_login_refused_from_another_origin_or_without_the_signed_token(client):
    form = {"csrf": token(client.get("/ui/login").text), "key": KEY}
    assert client.post("/ui/login", data=form,
                       headers={"origin": "https://evil.example"}).status_code == 403
    assert client.post("/ui/login", data=form).status_code == 403          # no Origin at all
    assert client.post("/ui/login", data={**form, "csrf": "1.2"},
                       headers={"origin": HOST}).status_code == 403
    assert client.post("/ui/login", content=b"{}", headers={
        "origin": HOST, "content-type": "application/json"}).status_code in (403, 415)


def test_next_never_leaves_the_pages(client):
    for target in ("https://evil.example/", "//evil.example/ui/", "/docs", "/ui\\x"):
        form = {"csrf": token(client.get("/ui/login").text), "key": KEY, "next": target}
        r = client.post("/ui/login", data=form, headers={"origin": HOST})
        client.cookies.clear()
        assert r.headers["location"] == "/ui/", target


def test_logout_needs_the_sessions_token_and_then_ends_the_session(client):
    _, sid = login(client)
    cookie = {"cookie": f"{COOKIE}={sid}"}
    r = client.get("/ui/logout-check-404", headers=cookie)
    assert r.status_code == 404
    csrf = token(r.text)  # the header's logout form carries the session's token
    refused = client.post("/ui/logout", data={"csrf": "forged"}, headers={**cookie,
                                                                          "origin": HOST})
    assert refused.status_code == 403 and "CSRF" in refused.text
    assert client.post("/ui/logout", data={"csrf": csrf}, headers={
        **cookie, "origin": "https://evil.example"}).status_code == 403
    r = client.post("/ui/logout", data={"csrf": csrf}, headers={**cookie, "origin": HOST})
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    assert "Max-Age=0" in r.headers["set-cookie"]
    assert client.get("/ui/", headers=cookie).status_code == 303   # the id is dead


def test_get_never_logs_out(client):
    _, sid = login(client)
    cookie = {"cookie": f"{COOKIE}={sid}"}
    assert client.get("/ui/logout", headers=cookie).status_code in (404, 405)
    assert client.get("/ui/nowhere", headers=cookie).status_code == 404
    assert "Log out" in client.get("/ui/nowhere", headers=cookie).text


def test_out_of_scope_and_malformed_paths_are_the_same_404_page(client):
    _, sid = login(client)
    cookie = {"cookie": f"{COOKIE}={sid}"}
    pages = [client.get(p, headers=cookie) for p in (
        "/ui/streams/other:x/records/1", "/ui/streams/other:x", "/ui/streams/acme:x/records/0",
        "/ui/streams/acme:x/records/abc", "/ui/streams/bad%20stream/records/1")]
    assert {r.status_code for r in pages} == {404}
    mains = {re.search(r"<main.*</main>", r.text, re.S).group(0) for r in pages}
    assert len(mains) == 1 and "nothing here" in mains.pop()


def test_the_pages_are_not_in_the_openapi_document(client):
    assert not [p for p in client.get("/openapi.json").json()["paths"] if p.startswith("/ui")]


def test_a_search_that_is_none_of_the_four_kinds_says_what_to_type(client):
    _, sid = login(client)
    r = client.get("/ui/search", params={"q": "<script>x</script>"},
                   headers={"cookie": f"{COOKIE}={sid}"})
    assert r.status_code == 422 and "<script>x" not in r.text and "content key" in r.text
