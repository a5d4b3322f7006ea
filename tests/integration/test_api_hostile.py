"""Hostile input over real HTTP against a real PostgreSQL read model: every answer is a 4xx
with the API's error shape, never a 5xx or a traceback, and no client can grow the API's
memory, its metrics or its open connections without bound.

The app is served as ``evidence api`` serves it (:func:`api.serving.uvicorn_config`), with
small limits so the tests run in seconds.
"""

import base64
import json
import logging
import socket
import time

import httpx
import psycopg
import pytest

from api import Keyring, Settings
from api.db import APPLICATION_NAME
from api.metrics import METHODS, OTHER
from evidence_contract import new_event_id
from tests.fixtures.api_server import serve_api
from tests.fixtures.log import wait_until
from tests.fixtures.postgres import own_client_ports
from tests.fixtures.readmodel import ReadModel
from tests.unit.test_fidelity import exact_manifest

pytestmark = pytest.mark.integration

ACME = "acme-hostile-0123456789abcdef0123456789"
GLOBEX = "globex-hostile-0123456789abcdef01234567"
ALL = "all-hostile-0123456789abcdef0123456789ab"

# Timeouts short enough that the slow-client tests end quickly, long enough that a whole
# request still arrives on a machine busy with the parallel suite (1 s was not: a 200-byte
# body was once answered 408).
LIMITS = dict(max_body_bytes=64 * 1024, max_verify_bytes=256 * 1024, body_timeout=3.0,
              header_timeout=3.0, keep_alive_timeout=3.0)


@pytest.fixture(scope="module")
def data(database_url):
    with ReadModel(database_url) as rm:
        d = {"rm": rm}
        shared = new_event_id()
        # globex's record comes first in the log and reuses the event id acme's record has.
        d["globex"] = rm.add("globex:x", output="globex says hi", event_id=shared)
        d["acme"] = rm.add("acme:chat", output="Hello!", event_id=shared)
        d["plain"] = rm.add("acme:chat", output="plain")
        yield d


@pytest.fixture(scope="module")
def settings(data, database_url):
    keyring = Keyring([("acme", ACME, ["acme:*"]), ("globex", GLOBEX, ["globex:x"]),
                       ("all", ALL, ["*"])])
    return Settings(database_url, keyring, views_schema=data["rm"].views, max_lag=100,
                    pool_min=3, pool_max=4, **LIMITS)


@pytest.fixture(scope="module")
def base_url(settings):
    with serve_api(settings) as url:
        yield url


def client(base_url, key):
    return httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"})


@pytest.fixture(scope="module")
def acme(base_url):
    with client(base_url, ACME) as c:
        yield c


def assert_error(r, status, code):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] == code and body["message"], body
    return body


def port_of(base_url):
    return int(base_url.rsplit(":", 1)[1])


def raw_exchange(base_url, data, timeout=5.0):
    """Send ``data`` on a fresh connection; everything the server sends until it closes."""
    with socket.create_connection(("127.0.0.1", port_of(base_url)), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.fixture
def api_errors(caplog):
    """What the API logged at ERROR or above (tracebacks of unhandled errors)."""
    caplog.set_level(logging.ERROR)
    return lambda: [r for r in caplog.records if r.levelno >= logging.ERROR
                    and r.name.startswith(("evidence.api", "uvicorn"))]


# -- 1. fidelity/analyze: schema-valid manifests the canonicalization cannot hold ------------

def _seeded(value_json: str) -> bytes:
    """An exact manifest whose seed value is the JSON text ``value_json``, verbatim."""
    m = exact_manifest()
    m["model"]["seed"] = {"state": "value", "value": "__SEED__"}
    return json.dumps(m).replace('"__SEED__"', value_json).encode()


@pytest.mark.parametrize("name, body, code, words", [
    ("NaN", _seeded("NaN"), "invalid_request", "NaN is not a JSON number"),
    ("Infinity", _seeded("-Infinity"), "invalid_request", "not a JSON number"),
    ("1e400", _seeded("1e400"), "invalid_request", "finite number"),
    ("2^53+1", _seeded(str(2**53 + 1)), "invalid_manifest", "2^53"),
    ("64-bit seed", _seeded(str(2**64 - 1)), "invalid_manifest", "$.model.seed.value"),
    ("lone surrogate", _seeded('"\\ud800"'), "invalid_request", "lone surrogate"),
    ("lone surrogate key", _seeded('{"\\udfff": 1}'), "invalid_request", "lone surrogate"),
    ("5000 deep", _seeded("[" * 5000 + "]" * 5000), "invalid_request", "nested"),
    ("100 deep", _seeded("[" * 100 + "]" * 100), "invalid_request", "nested more than 64"),
    ("not UTF-8", b'{"kind": "\xff"}', "invalid_request", "not UTF-8"),
    ("huge integer", b"[" + b"9" * 5000 + b"]", "invalid_request", "not valid JSON"),
])
def test_analyze_refuses_what_it_cannot_canonicalize_with_a_reason(acme, api_errors, name,
                                                                   body, code, words):
    r = acme.post("/fidelity/analyze", content=body,
                  headers={"content-type": "application/json"})
    assert words in assert_error(r, 422, code)["message"]
    assert api_errors() == []


def test_analyze_still_digests_a_seed_sent_as_text(acme):
    r = acme.post("/fidelity/analyze", content=_seeded(f'"{2**64 - 1}"'),
                  headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    assert len(r.json()["manifest_sha256"]) == 64


# -- 2. metric labels from a fixed set -------------------------------------------------------

def test_made_up_methods_do_not_become_metric_series(base_url):
    with httpx.Client(base_url=base_url) as anon:
        before = anon.get("/metrics").text
        for i in range(100):
            anon.request(f"X{i:04d}", "/healthz")
            anon.request(f"Y{i:04d}", f"/no/such/path/{i}")
        text = anon.get("/metrics").text
    methods = {part.split('"')[1] for line in text.splitlines()
               for part in line.split(",") if part.startswith(("method=", "{method="))
               or 'method="' in part}
    assert methods <= METHODS | {OTHER}, methods
    assert f'method="{OTHER}"' in text and "X0001" not in text and "/no/such" not in text
    series = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    # 200 requests of made-up methods and paths add a handful of series, not 200 families.
    assert len(series) - len(before.splitlines()) < 60


# -- 3. request-size limits, answered before the body is read --------------------------------

def test_an_oversized_content_length_is_413_before_any_body_is_sent(base_url):
    head = (b"POST /replay/verify HTTP/1.1\r\nHost: t\r\n"
            b"Authorization: Bearer " + ACME.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 52428800\r\n\r\n")
    # No body at all: an answer that waited for one would be the body timeout's 408.
    answer = raw_exchange(base_url, head)
    status, _, rest = answer.partition(b"\r\n")
    assert status == b"HTTP/1.1 413 Request Entity Too Large" or b" 413 " in status
    assert b"connection: close" in rest.lower()
    body = json.loads(rest.split(b"\r\n\r\n", 1)[1])
    assert body["error"] == "too_large" and "262144-byte limit" in body["message"]


def test_a_chunked_body_over_the_limit_is_413(acme):
    def chunks():
        for _ in range(64):
            yield b" " * 8192  # 512 KiB of whitespace: over the 256 KiB verify limit

    r = acme.post("/replay/verify", content=chunks(), headers={"content-type": "application/json"})
    assert_error(r, 413, "too_large")


def test_limits_are_per_route(acme, data):
    # 200 KiB: under the verify limit (256 KiB here), over the default (64 KiB) of analyze.
    rec = data["plain"]
    padded = {"stream": rec.stream, "seq": rec.seq, "replayed_output": "plain" + " " * 0}
    body = json.dumps(padded).encode()[:-1] + b" " * (200 * 1024) + b"}"
    r = acme.post("/replay/verify", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json()["match"] is True, r.text
    r = acme.post("/fidelity/analyze", content=b" " * (200 * 1024) + json.dumps(
        exact_manifest()).encode(), headers={"content-type": "application/json"})
    assert "65536-byte limit" in assert_error(r, 413, "too_large")["message"]


def test_a_body_that_trickles_in_is_408(base_url):
    head = (b"POST /replay/verify HTTP/1.1\r\nHost: t\r\n"
            b"Authorization: Bearer " + ACME.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"stream\"")
    answer = raw_exchange(base_url, head)  # the 408 is the body timeout's (3 s here)
    assert b" 408 " in answer.split(b"\r\n", 1)[0]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"] == "timeout"


# -- 4. header and idle timeouts -------------------------------------------------------------

@pytest.mark.parametrize("sent", [b"", b"GET /heal", b"GET /healthz HTTP/1.1\r\nHost: t\r\n"])
def test_a_request_head_that_does_not_arrive_in_time_is_closed(base_url, sent):
    # header_timeout is 3 s here; a head still open when the socket's 10 s run out fails.
    with socket.create_connection(("127.0.0.1", port_of(base_url)), timeout=10) as s:
        s.sendall(sent)
        assert s.recv(100) == b""  # closed by the server, with nothing said


def test_trickling_a_head_byte_by_byte_does_not_keep_it_open(base_url):
    # A byte every 0.1 s is the trickle itself; the head's 3 s deadline (header_timeout) holds
    # for the whole head, so the server closes long before the 126th byte.
    head = b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 100
    sent = 0
    with socket.create_connection(("127.0.0.1", port_of(base_url)), timeout=10) as s:
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            for byte in head:
                s.send(bytes([byte]))
                sent += 1
                time.sleep(0.1)
    assert sent < len(head), "the whole head trickled in and the connection stayed open"


def test_an_idle_keep_alive_connection_is_closed(base_url):
    with socket.create_connection(("127.0.0.1", port_of(base_url)), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer:  # the head, then exactly Content-Length bytes
            answer += s.recv(65536)
        head, body = answer.split(b"\r\n\r\n", 1)
        assert b" 200 " in head.split(b"\r\n", 1)[0]
        length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        while len(body) < length:
            body += s.recv(65536)
        # keep_alive_timeout is 3 s here; still open when the socket's 10 s run out fails.
        assert s.recv(100) == b""


def test_a_complete_request_is_served_after_a_slow_but_timely_head(base_url):
    with socket.create_connection(("127.0.0.1", port_of(base_url)), timeout=10) as s:
        s.sendall(b"GET /heal")
        time.sleep(0.5)
        s.sendall(b"thz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert b" 200 " in answer.split(b"\r\n", 1)[0]


# -- 5. strict types in the verify body ------------------------------------------------------

@pytest.mark.parametrize("seq", [True, "1", 1.0, 1e3, None, [1], {"n": 1}])
def test_seq_must_be_a_json_integer(acme, data, seq):
    r = acme.post("/replay/verify", json={"stream": "acme:chat", "seq": seq,
                                          "replayed_output": "plain"})
    body = assert_error(r, 422, "invalid_request")
    assert "seq" in body["message"]


@pytest.mark.parametrize("event_id", [
    "0190B6D2-7C3E-7A51-9F00-1234567890AB",     # upper case
    "0190b6d27c3e7a519f001234567890ab",         # no hyphens
    "{0190b6d2-7c3e-7a51-9f00-1234567890ab}",   # braces
    "65efc91a-53da-47bd-adc9-77a637faba60",     # a UUIDv4
    "0190b6d2-7c3e-7a51-cf00-1234567890ab",     # wrong variant
])
def test_event_id_must_be_a_canonical_uuid7(acme, event_id):
    r = acme.post("/replay/verify", json={"event_id": event_id, "replayed_output": "x"})
    assert "not a UUID" in assert_error(r, 422, "invalid_request")["message"]
    assert_error(acme.get(f"/events/{event_id}"), 422, "invalid_request")


@pytest.mark.parametrize("stream", [1, True, "acme chat", "a" * 129, "acme:chat\n"])
def test_stream_must_be_a_stream_id_string(acme, stream):
    r = acme.post("/replay/verify", json={"stream": stream, "seq": 1, "replayed_output": "x"})
    assert_error(r, 422, "invalid_request")


# -- 7. the pool replaces connections PostgreSQL has closed ----------------------------------

def test_requests_succeed_right_after_the_apis_backends_are_terminated(acme, data,
                                                                       database_url):
    rec = data["plain"]
    url = f"/streams/{rec.stream}/records/{rec.seq}"
    for _ in range(6):  # the pool holds min 3 connections, all of them used once
        assert acme.get(url).status_code == 200
    with psycopg.connect(database_url, autocommit=True) as conn:
        killed = conn.execute(
            "select coalesce(array_agg(pid) filter (where pg_terminate_backend(pid)), '{}') "
            "from pg_stat_activity where application_name = %s "
            "and datname = current_database() and client_port = any(%s)",
            (APPLICATION_NAME, own_client_ports())).fetchone()[0]
        assert len(killed) >= 3
        wait_until("the terminated backends to exit", lambda: not conn.execute(
            "select 1 from pg_stat_activity where pid = any(%s)", (killed,)).fetchone())
    answers = [acme.get(url).status_code for _ in range(8)]
    assert answers == [200] * 8


# -- 8. event ids are looked up among the caller's streams only ------------------------------

def test_an_event_id_reused_in_another_stream_neither_hides_nor_replaces_the_callers(
        acme, base_url, data):
    mine, theirs = data["acme"], data["globex"]
    assert mine.event_id == theirs.event_id
    e = acme.get(f"/events/{mine.event_id}")
    assert e.status_code == 200, e.text
    assert (e.json()["stream"], e.json()["record_digest"]) == (
        "acme:chat", mine.record_digest.hex())
    v = acme.post("/replay/verify", json={"event_id": mine.event_id,
                                          "replayed_output": "Hello!"}).json()
    assert (v["match"], v["stream"], v["seq"]) == (True, "acme:chat", mine.seq)
    assert v["original_hash"] == mine.body["output_digest"].hex()
    with client(base_url, GLOBEX) as globex:
        g = globex.get(f"/events/{theirs.event_id}").json()
        assert (g["stream"], g["record_digest"]) == ("globex:x", theirs.record_digest.hex())
        v = globex.post("/replay/verify", json={"event_id": theirs.event_id,
                                                "replayed_output": "Hello!"}).json()
        assert (v["match"], v["stream"]) == (False, "globex:x")
    with client(base_url, ALL) as admin:  # a key that reads both gets the earliest, as before
        assert admin.get(f"/events/{mine.event_id}").json()["stream"] == "globex:x"


def test_verify_response_b64_still_works_under_strict_types(acme, data):
    rec = data["plain"]
    r = acme.post("/replay/verify", json={
        "event_id": rec.event_id, "replayed_output": None,
        "replayed_response_b64": base64.b64encode(rec.body["response_bytes"]).decode()})
    assert r.status_code == 200 and r.json()["match"] is True, r.text
