"""Readiness, projection lag and database failures, over real HTTP."""

import re

import httpx
import pytest

from api import Keyring, Settings
from devstack.ports import free_port
from tests.fixtures.api_server import serve_api

pytestmark = pytest.mark.integration

KEY = "health-key-0123456789abcdef0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}


def settings_for(url, views, **kw):
    return Settings(url, Keyring([("k", KEY, ["*"])]), views_schema=views, **kw)


@pytest.fixture
def readmodel(make_readmodel):
    return make_readmodel(heartbeat=False)  # each test stores the heartbeats it wants


def test_readyz_follows_projection_lag(database_url, readmodel, make_api_server):
    base = make_api_server(settings_for(database_url, readmodel.views, max_lag=10))
    readmodel.set_position(0, next_offset=100, high_watermark=104)
    readmodel.set_position(1, next_offset=50, high_watermark=55)
    readmodel.beat({0: 104, 1: 55})
    r = httpx.get(base + "/readyz")
    assert r.status_code == 200
    body = r.json()
    assert body.pop("heartbeat_age_s") >= 0  # fresh: a stale heartbeat is not ready (below)
    assert body == {"status": "ready", "lag": 9, "partitions": 2, "max_lag": 10}

    readmodel.beat({0: 104, 1: 80})
    r = httpx.get(base + "/readyz")
    assert r.status_code == 503 and r.headers["retry-after"]
    body = r.json()
    assert body["error"] == "unavailable" and "lag is 34" in body["message"]
    assert "evidence_api_projection_lag 34.0" in httpx.get(base + "/metrics").text


def test_readyz_is_not_ready_before_the_projectors_first_heartbeat(database_url, readmodel,
                                                                  make_api_server):
    base = make_api_server(settings_for(database_url, readmodel.views, max_lag=10))
    readmodel.set_position(0, next_offset=100, high_watermark=100)
    r = httpx.get(base + "/readyz")
    assert r.status_code == 503 and r.headers["retry-after"]
    assert "not reported a heartbeat" in r.json()["message"]


def test_readyz_is_not_ready_when_the_projectors_heartbeat_is_old(database_url, readmodel,
                                                                  make_api_server):
    """A dead projector: its stored positions still say "lag 0"; its heartbeat ages."""
    base = make_api_server(settings_for(database_url, readmodel.views, max_lag=10))
    readmodel.set_position(0, next_offset=100, high_watermark=100)
    readmodel.beat({0: 100}, age_s=60)
    r = httpx.get(base + "/readyz")
    assert r.status_code == 503 and r.headers["retry-after"]
    # 60 s when stored, and more by the time the answer comes (in seconds: not ms, not hours)
    said = re.search(r"heartbeat is (\d+) s old", r.json()["message"])
    assert said and 60 <= int(said.group(1)) < 3600, r.json()
    text = httpx.get(base + "/metrics").text
    [age] = [float(line.split()[-1]) for line in text.splitlines()
             if line.startswith("evidence_api_projector_heartbeat_age_seconds ")]
    assert 60 <= age < 3600


def test_readyz_measures_lag_against_the_log_end_the_heartbeat_saw(database_url, readmodel,
                                                                   make_api_server):
    base = make_api_server(settings_for(database_url, readmodel.views, max_lag=10))
    readmodel.set_position(0, next_offset=100, high_watermark=100)  # what it last stored
    readmodel.beat({0: 150})                                         # what Kafka says now
    r = httpx.get(base + "/readyz")
    assert r.status_code == 503 and "lag is 50" in r.json()["message"]


def test_unreachable_database_is_503_with_retry_after_but_healthz_answers(make_api_server):
    port = free_port()  # a port nothing listens on
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
