"""The record listings' filters over a real PostgreSQL read model: GET /streams/{s}/records
and GET /records (a stream pattern, keyset-paged by (stream, seq)), every filter alone and
together, the cursor through a filtered listing, and every bad value a 422."""

from __future__ import annotations

import httpx
import pytest

from api import Keyring, Settings
from api.routers import records as records_router
from tests.fixtures.api_server import serve_api
from tests.fixtures.readmodel import T0, ReadModel
from tests.integration.test_api_erased import _sealed_under_new_key

pytestmark = pytest.mark.integration

KEY = "filters-key-0123456789abcdef0123456789abcdef"
NARROW = "filters-narrow-0123456789abcdef0123456789ab"
A, B, C, OTHER = "flt:a", "flt:b", "flt:c_x", "nope:a"
ERASED_AT = T0 + 10**9


@pytest.fixture(scope="module")
def api(database_url):
    with ReadModel(database_url) as rm:
        recs = {
            "a1": rm.add(A, model_id="gpt-4o", fingerprint="fp_1"),
            "a2": rm.add(A, model_id="gpt-4o", outcome="FAILED", fingerprint="fp_2"),
            "a3": rm.add(A, model_id="claude", response_model="claude-3-7", fingerprint="fp_1"),
            "a4": rm.add(A, **_sealed_under_new_key()),
            "a5": rm.add(A, **_sealed_under_new_key()),
            "b1": rm.add(B, model_id="gpt-4o", outcome="UNKNOWN"),
            "b2": rm.add(B, model_id="claude"),
            "c1": rm.add(C, model_id="gpt-4o"),
            "o1": rm.add(OTHER, model_id="gpt-4o"),
        }
        erased_key = bytes.fromhex(recs["a5"].body["encryption"]["key_id"])
        rm.conn.execute(
            f'insert into "{rm.gen}".erasures (request_id, key_id, erased_at, erased_at_us, '
            f"note, log_partition, log_offset) values (%s, %s, to_timestamp(%s / 1e6), %s, "
            f"%s, 0, 0)", ("dsr-filters", erased_key, ERASED_AT, ERASED_AT, b"receipt"))
        settings = Settings(database_url, Keyring([("k", KEY, ["flt:*"]),
                                                   ("n", NARROW, ["flt:b"])]),
                            views_schema=rm.views)
        with serve_api(settings) as url:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"},
                              timeout=10) as client:
                yield client, recs, rm


def sealed_iso(rec, delta_us=0):
    from datetime import datetime, timedelta, timezone

    at = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(
        microseconds=rec.seal["occurred_at"] + delta_us)
    return at.isoformat().replace("+00:00", "Z")


def seqs(client, path, **params):
    r = client.get(path, params=params)
    assert r.status_code == 200, r.text
    return [(x["stream"], x["seq"]) for x in r.json()["records"]]


@pytest.mark.parametrize("params, want", [
    ({}, [1, 2, 3, 4, 5]),
    ({"model": "gpt-4o"}, [1, 2]),
    ({"model": "claude-3-7"}, [3]),          # the model that answered
    ({"outcome": "FAILED"}, [2]),
    ({"outcome": "COMMITTED"}, [1, 3, 4, 5]),
    ({"fingerprint": "fp_1"}, [1, 3]),
    ({"encrypted": "true"}, [4, 5]),
    ({"encrypted": "false"}, [1, 2, 3]),
    ({"erased": "true"}, [5]),
    ({"erased": "false"}, [1, 2, 3, 4]),
    ({"encrypted": "true", "erased": "false"}, [4]),
    ({"model": "gpt-4o", "fingerprint": "fp_2"}, [2]),
    ({"model": "no-such-model"}, []),
])
def test_stream_listing_filters(api, params, want):
    client, _, _ = api
    assert seqs(client, f"/streams/{A}/records", **params) == [(A, s) for s in want]


def test_since_is_inclusive_and_until_exclusive_on_the_sealed_time(api):
    client, recs, _ = api
    since, until = sealed_iso(recs["a2"]), sealed_iso(recs["a4"])
    assert seqs(client, f"/streams/{A}/records", since=since, until=until) == [(A, 2), (A, 3)]
    assert seqs(client, f"/streams/{A}/records", since=sealed_iso(recs["a5"], 1)) == []
    # the same instant in another offset
    from datetime import datetime, timedelta, timezone

    at = datetime.fromisoformat(since.replace("Z", "+00:00")).astimezone(
        timezone(timedelta(hours=5, minutes=30)))
    assert seqs(client, f"/streams/{A}/records", since=at.isoformat())[0] == (A, 2)


def test_pattern_listing_is_scoped_and_ordered_by_stream_then_seq(api):
    client, _, _ = api
    everything = seqs(client, "/records")
    assert everything == [(A, 1), (A, 2), (A, 3), (A, 4), (A, 5), (B, 1), (B, 2), (C, 1)]
    assert seqs(client, "/records", stream="nope:*") == []         # outside the key: none
    assert seqs(client, "/records", stream="flt:?") == [(A, s) for s in range(1, 6)] + [
        (B, 1), (B, 2)]
    # "_" in a pattern is the character, not LIKE's any-one
    assert seqs(client, "/records", stream="flt:c_*") == [(C, 1)]
    assert seqs(client, "/records", stream="flt:cxx") == []
    assert seqs(client, "/records", model="gpt-4o") == [(A, 1), (A, 2), (B, 1), (C, 1)]
    assert seqs(client, "/records", stream="flt:*", outcome="UNKNOWN") == [(B, 1)]
    narrow = client.get("/records", headers={"Authorization": f"Bearer {NARROW}"})
    assert [(x["stream"], x["seq"]) for x in narrow.json()["records"]] == [(B, 1), (B, 2)]


def test_pattern_listing_cursor_walks_every_record_once(api):
    client, _, _ = api
    seen, params = [], {"limit": 2, "model": "gpt-4o"}
    for _ in range(10):
        r = client.get("/records", params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        seen += [(x["stream"], x["seq"]) for x in page["records"]]
        if page["next_after"] is None:
            break
        params.update(after_stream=page["next_after"]["stream"],
                      after_seq=page["next_after"]["seq"])
    assert seen == [(A, 1), (A, 2), (B, 1), (C, 1)]


def test_a_filtered_page_reads_a_bounded_part_and_says_where_to_go_on(api, monkeypatch):
    client, _, _ = api
    # the server's bound, lowered in this process (the app runs in a thread of it)
    monkeypatch.setattr(records_router, "SCAN_MAX", 2)
    r = client.get(f"/streams/{A}/records", params={"fingerprint": "fp_2"})
    assert r.json()["records"][0]["seq"] == 2 and r.json()["next_after_seq"] == 2
    r = client.get(f"/streams/{A}/records", params={"fingerprint": "fp_1", "after_seq": 0})
    assert [x["seq"] for x in r.json()["records"]] == [1] and r.json()["next_after_seq"] == 2
    r = client.get(f"/streams/{A}/records", params={"model": "none", "after_seq": 2})
    assert r.json() == {"stream": A, "records": [], "next_after_seq": 4}
    r = client.get(f"/streams/{A}/records", params={"model": "none", "after_seq": 4})
    assert r.json()["next_after_seq"] is None
    r = client.get("/records", params={"model": "none"})
    assert r.json()["next_after"] == {"stream": A, "seq": 2}


def test_bytes_pages_of_a_pattern(api):
    client, recs, _ = api
    r = client.get("/records", params={"stream": B, "include": "bytes", "model": "claude"})
    assert r.status_code == 200, r.text
    (rec,) = r.json()["records"]
    assert rec["seq"] == 2 and rec["response_b64"] and rec["record_b64"]


@pytest.mark.parametrize("path, params, words", [
    (f"/streams/{A}/records", {"outcome": "committed"}, "outcome"),
    (f"/streams/{A}/records", {"outcome": "DONE"}, "outcome"),
    (f"/streams/{A}/records", {"erased": "yes"}, "erased"),
    (f"/streams/{A}/records", {"encrypted": "1"}, "encrypted"),
    (f"/streams/{A}/records", {"since": "yesterday"}, "since"),
    (f"/streams/{A}/records", {"since": "2026-12-01"}, "since"),
    (f"/streams/{A}/records", {"since": "2026-12-01T00:00:00"}, "no UTC offset"),
    (f"/streams/{A}/records", {"until": "2026-13-01T00:00:00Z"}, "not an ISO 8601 time"),
    (f"/streams/{A}/records", {"since": "2026-12-02T00:00:00Z",
                               "until": "2026-12-01T00:00:00Z"}, "after until"),
    (f"/streams/{A}/records", {"model": ""}, "model"),
    (f"/streams/{A}/records", {"model": "a\nb"}, "model"),
    (f"/streams/{A}/records", {"fingerprint": "x" * 300}, "fingerprint"),
    (f"/streams/{A}/records", {"after_seq": "-1", "model": "m"}, "after_seq"),
    ("/records", {"stream": "flt:[ab]"}, "stream"),
    ("/records", {"stream": ""}, "stream"),
    ("/records", {"after_stream": A}, "after_stream and after_seq"),
    ("/records", {"after_seq": "3"}, "after_stream and after_seq"),
    ("/records", {"after_stream": "flt:*", "after_seq": "3"}, "after_stream"),
    ("/records", {"after_stream": A, "after_seq": "+3"}, "after_seq"),
    ("/records", {"limit": "0"}, "limit"),
    ("/records", {"outcome": "FAILED", "since": "2026-12-01T00:00:00"}, "no UTC offset"),
])
def test_bad_values_are_422_and_say_which(api, path, params, words):
    client, _, _ = api
    r = client.get(path, params=params)
    assert r.status_code == 422, (r.status_code, r.text)
    body = r.json()
    assert body["error"] == "invalid_request" and words in body["message"], body


def test_a_stream_outside_the_key_is_404_with_filters_too(api):
    client, _, _ = api
    r = client.get(f"/streams/{OTHER}/records", params={"model": "gpt-4o"})
    assert r.status_code == 404
