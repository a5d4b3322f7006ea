"""The API's "erased" answers over a real PostgreSQL read model: encrypted records, one of
whose keys an erasure (a row of the projection's erasures table) names."""

from __future__ import annotations

import base64

import httpx
import pytest

from api import Keyring, Settings
from evidence_contract import new_event_id
from evidence_contract.vectors import encrypted_event
from tests.fixtures.api_server import serve_api
from evidence_contract.sealing import SubjectKeys, new_data_key, new_key_id, seal_body
from tests.fixtures.readmodel import ReadModel, capture_body

pytestmark = pytest.mark.integration

KEY = "erased-key-0123456789abcdef0123456789abcdef"
STREAM = "bank:support"
ERASED_AT = 1_735_700_000_000_000


def _encrypted(**over):
    e = encrypted_event()
    e.pop("stream")
    return {**e, "event_id": new_event_id(), **over}


def _sealed_under_new_key():
    """A plain capture body sealed under a fresh key, keyed commitments and all."""
    keys = SubjectKeys(new_key_id(), new_data_key())
    body = capture_body(STREAM, output="live secret")
    body.update(content_key=keys.content_key(body["request_bytes"]),
                response_digest=keys.response_digest(body["response_bytes"]),
                output_digest=keys.output_digest("live secret"))
    sealed = seal_body(body, keys)
    sealed.pop("stream")
    return sealed


@pytest.fixture(scope="module")
def data(database_url):
    with ReadModel(database_url) as rm:
        d = {"rm": rm}
        d["erased"] = rm.add(STREAM, **_encrypted())
        d["live"] = rm.add(STREAM, **_sealed_under_new_key())
        d["plain"] = rm.add(STREAM, output="plain text")
        key_id = bytes.fromhex(d["erased"].body["encryption"]["key_id"])
        rm.conn.execute(
            f'insert into "{rm.gen}".erasures (request_id, key_id, erased_at, erased_at_us, '
            f"note, log_partition, log_offset) values (%s, %s, to_timestamp(%s / 1e6), %s, "
            f"%s, 0, 0)", ("dsr-42", key_id, ERASED_AT, ERASED_AT, b"receipt"))
        yield d


@pytest.fixture(scope="module")
def api(data, database_url):
    settings = Settings(database_url, Keyring([("k", KEY, ["*"])]),
                        views_schema=data["rm"].views, max_lag=10**9)
    with serve_api(settings) as url:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as c:
            yield c


def _gone(r):
    assert r.status_code == 410, r.text
    body = r.json()
    assert (body["error"], body["erased_at"], body["request_id"]) == ("erased", ERASED_AT,
                                                                      "dsr-42")
    return body


def test_record_views_mark_the_content_and_keep_the_proof_fields(api, data):
    e = data["erased"]
    r = api.get(f"/streams/{STREAM}/records/1").json()
    assert r["content"] == "erased" and r["erasure"]["request_id"] == "dsr-42"
    assert r["erasure"]["erased_at_us"] == ERASED_AT
    assert r["record_digest"] == e.record_digest.hex() and r["seq"] == 1
    assert r["content_key"] == e.content_key.hex()
    assert api.get(f"/streams/{STREAM}/records/2").json()["content"] == "encrypted"
    assert api.get(f"/streams/{STREAM}/records/3").json()["content"] == "plain"
    page = api.get(f"/streams/{STREAM}/records", params={"include": "bytes"}).json()["records"]
    assert [p["content"] for p in page] == ["erased", "encrypted", "plain"]
    assert page[0]["response_b64"] is None and page[0]["request_b64"] is None
    assert base64.b64decode(page[0]["record_b64"]) == e.value  # the ciphertext, for proofs
    assert page[1]["response_b64"] is not None


def test_replay_and_verify_answer_410_erased(api, data):
    e = data["erased"]
    _gone(api.get(f"/replay/{e.content_key.hex()}"))
    _gone(api.post("/replay/verify", json={"stream": STREAM, "seq": 1,
                                           "replayed_output": "a guess"}))
    _gone(api.post("/replay/verify", json={"event_id": e.event_id,
                                           "replayed_output": "a guess"}))
    assert api.get(f"/events/{e.event_id}").json()["content"] == "erased"


def test_one_record_with_bytes_is_served_as_in_a_page(api, data):
    """No bodies, and the log message (ciphertext only) for its proofs: by seq, by event id
    and in a page alike."""
    e = data["erased"]
    page = api.get(f"/streams/{STREAM}/records", params={"include": "bytes"}).json()
    for r in (api.get(f"/streams/{STREAM}/records/1", params={"include": "bytes"}),
              api.get(f"/events/{e.event_id}", params={"include": "bytes"})):
        assert r.status_code == 200, r.text
        one = r.json()
        assert one["content"] == "erased" and one["erasure"]["request_id"] == "dsr-42"
        for name in ("request_b64", "response_b64", "error_b64", "input_b64", "prompt_b64"):
            assert one[name] is None, name
        assert base64.b64decode(one["record_b64"]) == e.value
        same = {k for k in one if k not in ("copies", "is_copy")}
        assert {k: one[k] for k in same} == {k: page["records"][0][k] for k in same}


def test_an_encrypted_live_record_is_served_sealed_and_verify_never_says_mismatch(api, data):
    live = data["live"]
    r = api.get(f"/replay/{live.content_key.hex()}")
    assert r.status_code == 200 and r.content == live.body["response_bytes"]  # the envelope
    v = api.post("/replay/verify", json={"stream": STREAM, "seq": 2,
                                         "replayed_output": "a guess"}).json()
    assert v["match"] is False and "keyed commitment" in v["reason"]
    assert "mismatch" not in v["reason"]


def test_the_stream_audit_counts_erased_records_and_stays_clean(api):
    a = api.get(f"/streams/{STREAM}/audit").json()
    assert a["clean"] is True, a["findings"]
    assert (a["encrypted_records"], a["erased_records"]) == (2, 1)


def test_fidelity_of_an_erased_record_drops_to_a_hash(api):
    f = api.get(f"/streams/{STREAM}/records/1/fidelity").json()
    manifest = f["log_replay"]["manifest"]
    assert manifest["model"]["input"]["state"] == "hash"
    assert manifest["model"]["parameters"]["state"] == "unavailable"
    assert manifest["model"]["determinism"]["guaranteed"] is False
    assert f["log_replay"]["level"] == "unreplayable"
