"""Readiness, projection lag and database failures, over real HTTP."""

import socket

import httpx
import pytest

from api import Keyring, Settings
from tests.fixtures.api_server import serve_api

pytestmark = pytest.mark.integration

KEY = "health-key-0123456789abcdef0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}


def settings_for(url, views, **kw):
    return Settings(url, Keyring([("k", KEY, ["*"])]), views_schema=views, **kw)


def test_readyz_follows_projection_lag(database_url, readmodel, make_api_server):
    base = make_api_server(settings_for(database_url, readmodel.views, max_lag=10))
    readmodel.set_position(0, next_offset=100, high_watermark=104)
    readmodel.set_position(1, next_offset=50, high_watermark=55)
    r = httpx.get(base + "/readyz")
    assert r.status_code == 200
    assert r.json() == {"status": "ready", "lag": 9, "partitions": 2, "max_lag": 10}

    readmodel.set_position(1, next_offset=50, high_watermark=80)
    r = httpx.get(base + "/readyz")
    assert r.status_code == 503 and r.headers["retry-after"]
    body = r.json()
    assert body["error"] == "unavailable" and "lag is 34" in body["message"]
    assert "evidence_api_projection_lag 34.0" in httpx.get(base + "/metrics").text


def test_unreachable_database_is_503_with_retry_after_but_healthz_answers(make_api_server):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://nobody:nothing@127.0.0.1:{port}/none"
    base = make_api_server(settings_for(url, "evidence", db_timeout=1.0))
    assert httpx.get(base + "/healthz").status_code == 200
    for r in (httpx.get(base + "/readyz", timeout=10),
              httpx.post(base + "/replay/verify", headers=AUTH, timeout=10,
                         json={"stream": "a", "seq": 1, "replayed_output": "x"}),
              httpx.get(base + "/streams", headers=AUTH, timeout=10)):
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"].isdigit()
        assert r.json()["error"] == "unavailable"
    assert "evidence_api_database_up 0.0" in httpx.get(base + "/metrics", timeout=10).text


def test_missing_read_model_is_503_naming_the_projection(database_url, make_api_server):
    base = make_api_server(settings_for(database_url, "tv_does_not_exist"))
    r = httpx.get(base + "/streams", headers=AUTH)
    assert r.status_code == 503
    assert "read model is not built" in r.json()["message"]
    assert httpx.get(base + "/readyz").status_code == 503
