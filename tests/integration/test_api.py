"""The REST API over real HTTP (uvicorn on a free port) against a real PostgreSQL read model."""

import base64

import httpx
import pytest

from api import Keyring, Settings
from evidence_contract import new_event_id
from tests.fixtures.api_server import serve_api
from tests.fixtures.readmodel import ReadModel

pytestmark = pytest.mark.integration

# Keys pass api.auth.key_weakness; an unknown event id is a fresh UUIDv7 (the only kind the
# API accepts as an event id: any other UUID is a 422, not a lookup).
ACME = "acme-key-0123456789abcdef0123456789abcdef"
ALL = "all-key-0123456789abcdef0123456789abcdef"
GLOBEX = "globex-key-0123456789abcdef0123456789abcdef"
SHARED_REQUEST = b'{"model":"gpt-4o-mini","messages":[{"role":"user","content":"same"}]}'


@pytest.fixture(scope="module")
def data(database_url):
    with ReadModel(database_url) as rm:
        d = {"rm": rm}
        # globex seals the shared request first, so it is the earliest overall.
        d["globex"] = rm.add("globex:x", request=SHARED_REQUEST, output="globex says hi")
        d["det"] = rm.add("acme:chat", output="Hello!", request=SHARED_REQUEST)
        d["nondet"] = rm.add("acme:chat", output="Yo", seed=None)
        d["failed"] = rm.add("acme:chat", outcome="FAILED")
        d["text"] = rm.add("acme:chat", output="plain", content_type="text/plain",
                           response=b"plain body \xff\x00 bytes")
        d["page"] = [rm.add("acme:page", output=f"p{i}") for i in range(5)]
        # A duplicate of seq 3 in the log: stored, and never split across pages.
        rm.insert(d["page"][2])
        rm.add_finding("acme:chat", 2, "gap", "seq 2 arrived late")
        yield d


@pytest.fixture(scope="module")
def base_url(data, database_url):
    keyring = Keyring([("acme", ACME, ["acme:*"]), ("all", ALL, ["*"]),
                       ("globex", GLOBEX, ["globex:x"])])
    settings = Settings(database_url, keyring, views_schema=data["rm"].views, max_lag=100)
    with serve_api(settings) as url:
        yield url


@pytest.fixture(scope="module")
def acme(base_url):
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {ACME}"}) as c:
        yield c


@pytest.fixture(scope="module")
def admin(base_url):
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {ALL}"}) as c:
        yield c


@pytest.fixture(scope="module")
def anon(base_url):
    with httpx.Client(base_url=base_url) as c:
        yield c


def assert_error(r, status, code):
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["error"] == code and body["message"], body
    return body


# -- auth ------------------------------------------------------------------------------------

@pytest.mark.parametrize("method, path", [
    ("POST", "/replay/verify"), ("GET", "/replay/" + "00" * 32), ("GET", "/streams"),
    ("GET", "/streams/acme:chat"), ("GET", "/streams/acme:chat/records"),
    ("GET", "/streams/acme:chat/records/1"), ("GET", f"/events/{new_event_id()}"),
])
def test_every_data_route_needs_a_key(anon, method, path):
    r = anon.request(method, path, json={})
    body = assert_error(r, 401, "unauthorized")
    assert "Authorization: Bearer" in body["message"]
    assert r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("header", ["Bearer wrong-key", f"Basic {ACME}", "Bearer", ACME, f"Bearer {ACME}x"])
def test_a_wrong_key_or_scheme_is_401(anon, header):
    assert_error(anon.get("/streams", headers={"Authorization": header}), 401, "unauthorized")


def test_health_ready_metrics_and_docs_need_no_key(anon):
    assert anon.get("/healthz").json() == {"status": "ok"}
    assert anon.get("/readyz").status_code == 200
    assert anon.get("/metrics").status_code == 200
    assert anon.get("/docs").status_code == 200
    spec = anon.get("/openapi.json").json()
    assert {"/replay/verify", "/replay/{content_key_hex}", "/streams", "/streams/{stream}",
            "/streams/{stream}/records", "/streams/{stream}/records/{seq}",
            "/events/{event_id}"} <= set(spec["paths"])
    assert "ApiKey" in spec["components"]["securitySchemes"]
    body = spec["paths"]["/replay/verify"]["post"]["requestBody"]["content"]["application/json"]
    assert "replayed_output" in body["schema"]["properties"]


# -- POST /replay/verify ---------------------------------------------------------------------

def verify(client, **body):
    return client.post("/replay/verify", json=body)


def test_verify_match(acme, data):
    r = verify(acme, stream="acme:chat", seq=data["det"].seq, replayed_output="Hello!")
    assert r.status_code == 200
    assert r.json() == {
        "match": True, "original_hash": data["det"].body["output_digest"].hex(),
        "replay_hash": data["det"].body["output_digest"].hex(), "compared": "output_digest",
        "deterministic": True, "model_version": "gpt-4o-mini-2024-07-18",
        "stream": "acme:chat", "seq": data["det"].seq, "reason": None}


def test_verify_deterministic_mismatch_is_200_and_names_the_model(acme, data):
    r = verify(acme, stream="acme:chat", seq=data["det"].seq, replayed_output="Hello?")
    assert r.status_code == 200
    v = r.json()
    assert v["match"] is False and v["original_hash"] != v["replay_hash"]
    assert "re-execute" in v["reason"] and "gpt-4o-mini-2024-07-18" in v["reason"]


def test_verify_non_deterministic_mismatch_expects_drift(acme, data):
    v = verify(acme, stream="acme:chat", seq=data["nondet"].seq, replayed_output="Hi").json()
    assert v["match"] is False and v["deterministic"] is False
    assert "drift is expected" in v["reason"]


def test_verify_record_without_digest(acme, data):
    v = verify(acme, stream="acme:chat", seq=data["failed"].seq, replayed_output="x").json()
    assert (v["match"], v["original_hash"]) == (False, None)
    assert "no output_digest" in v["reason"]


def test_verify_by_event_id_and_response_bytes(acme, data):
    rec = data["text"]
    r = verify(acme, event_id=rec.event_id,
               replayed_response_b64=base64.b64encode(rec.body["response_bytes"]).decode())
    v = r.json()
    assert (v["match"], v["compared"], v["stream"], v["seq"]) == (
        True, "response_digest", "acme:chat", rec.seq)


def test_verify_unknown_record_is_404(acme):
    assert_error(verify(acme, stream="acme:chat", seq=999, replayed_output="x"), 404, "not_found")
    assert_error(verify(acme, event_id=str(new_event_id()), replayed_output="x"), 404, "not_found")


def test_verify_other_tenants_record_is_404_like_a_missing_one(acme, admin, data):
    g = data["globex"]
    by_seq = verify(acme, stream="globex:x", seq=g.seq, replayed_output="globex says hi")
    by_event = verify(acme, event_id=g.event_id, replayed_output="globex says hi")
    missing = verify(acme, stream="globex:x", seq=999, replayed_output="globex says hi")
    for r in (by_seq, by_event):
        assert_error(r, 404, "not_found")
    assert by_seq.json()["message"].replace(str(g.seq), "N") == \
        missing.json()["message"].replace("999", "N")
    assert verify(admin, event_id=g.event_id, replayed_output="globex says hi").json()["match"]


@pytest.mark.parametrize("body, words", [
    ({"stream": "acme:chat", "seq": 1}, "exactly one of replayed_output"),
    ({"stream": "acme:chat", "seq": 1, "replayed_output": "a", "replayed_response_b64": "YQ=="},
     "exactly one of replayed_output"),
    ({"stream": "acme:chat", "seq": 1, "replayed_response_b64": "not base64!"}, "not valid base64"),
    ({"seq": 1, "replayed_output": "a"}, "seq needs stream"),
    ({"stream": "acme:chat", "replayed_output": "a"}, "stream needs seq"),
    ({"replayed_output": "a"}, "name the record"),
    ({"event_id": "nope", "replayed_output": "a"}, "not a UUID"),
    ({"event_id": str(new_event_id()), "stream": "acme:chat", "seq": 1, "replayed_output": "a"},
     "not both"),
    ({"stream": "acme:chat", "seq": 1, "replayed_output": "a", "extra": 1},
     "unknown field 'extra' (allowed: stream, seq, event_id, replayed_output, "
     "replayed_response_b64, basis)"),
    ({"stream": "acme chat", "seq": 1, "replayed_output": "a"}, "stream"),
    ({"stream": "acme:chat", "seq": 0, "replayed_output": "a"}, "seq"),
    ({"stream": "acme:chat", "seq": "one", "replayed_output": "a"}, "seq"),
    ({"stream": "acme:chat", "seq": 1, "replayed_output": 5}, "replayed_output"),
    ([1, 2], "JSON object"),
])
def test_verify_malformed_body_is_422_with_a_clear_message(acme, body, words):
    body = assert_error(acme.post("/replay/verify", json=body), 422, "invalid_request")
    assert words in body["message"]


@pytest.mark.parametrize("raw, words", [(b"{not json", "not valid JSON"), (b"", "body is required"),
                                        (b'{"replayed_output": "\\ud800"}', "")])
def test_verify_unparseable_body_is_422(acme, raw, words):
    r = acme.post("/replay/verify", content=raw, headers={"content-type": "application/json"})
    assert words in assert_error(r, 422, "invalid_request")["message"]


# -- GET /replay/{content_key_hex} -----------------------------------------------------------

def test_replay_serves_verbatim_bytes_and_names_the_record(acme, data):
    rec = data["text"]
    r = acme.get(f"/replay/{rec.content_key.hex()}")
    assert r.status_code == 200
    assert r.content == b"plain body \xff\x00 bytes"
    assert r.headers["content-type"] == "text/plain"  # as recorded: no charset added
    assert r.headers["evidence-stream"] == "acme:chat"
    assert r.headers["evidence-seq"] == str(rec.seq)
    assert r.headers["evidence-record-digest"] == rec.record_digest.hex()
    assert r.headers["evidence-content-key"] == rec.content_key.hex()
    assert r.headers["evidence-event-id"] == rec.event_id


def test_replay_answers_the_earliest_committed_record_the_key_may_read(acme, admin, data):
    key = data["det"].content_key.hex()
    assert data["globex"].content_key.hex() == key
    assert acme.get(f"/replay/{key}").headers["evidence-stream"] == "acme:chat"
    r = admin.get(f"/replay/{key.upper()}")
    assert r.headers["evidence-stream"] == "globex:x"
    assert r.content == data["globex"].body["response_bytes"]


def test_replay_narrowed_by_stream_and_seq(admin, data):
    key = data["det"].content_key.hex()
    r = admin.get(f"/replay/{key}", params={"stream": "acme:chat", "seq": data["det"].seq})
    assert r.headers["evidence-seq"] == str(data["det"].seq)
    assert_error(admin.get(f"/replay/{key}", params={"stream": "acme:chat", "seq": 99}),
                 404, "not_found")
    assert_error(admin.get(f"/replay/{key}", params={"seq": 1}), 422, "invalid_request")


def test_replay_of_a_failed_or_unknown_or_foreign_key_is_404(acme, data):
    assert_error(acme.get(f"/replay/{data['failed'].content_key.hex()}"), 404, "not_found")
    assert_error(acme.get("/replay/" + "ab" * 32), 404, "not_found")
    foreign = data["globex"].content_key.hex()
    assert_error(acme.get(f"/replay/{foreign}", params={"stream": "globex:x"}), 404, "not_found")


@pytest.mark.parametrize("bad", ["abc", "zz" * 32, "00" * 33])
def test_replay_malformed_key_is_422(acme, bad):
    body = assert_error(acme.get(f"/replay/{bad}"), 422, "invalid_request")
    assert "64 hex digits" in body["message"]


# -- streams ---------------------------------------------------------------------------------

def test_streams_lists_only_the_keys_streams(acme, admin, base_url):
    assert [s["stream"] for s in acme.get("/streams").json()["streams"]] == [
        "acme:chat", "acme:page"]
    assert [s["stream"] for s in admin.get("/streams").json()["streams"]] == [
        "acme:chat", "acme:page", "globex:x"]
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {GLOBEX}"}) as g:
        assert [s["stream"] for s in g.get("/streams").json()["streams"]] == ["globex:x"]


def test_streams_keyset_pagination(admin):
    first = admin.get("/streams", params={"limit": 2}).json()
    assert first["next_after"] == "acme:page"
    rest = admin.get("/streams", params={"limit": 2, "after": first["next_after"]}).json()
    assert [s["stream"] for s in rest["streams"]] == ["globex:x"] and rest["next_after"] is None
    assert_error(admin.get("/streams", params={"limit": 1001}), 422, "invalid_request")


def test_stream_detail_has_head_count_and_findings(acme, data):
    s = acme.get("/streams/acme:chat").json()
    assert s["head_seq"] == data["text"].seq == s["record_count"]
    assert s["head_digest"] == data["text"].record_digest.hex()
    assert s["findings_count"] == 1
    assert s["findings"][0]["kind"] == "gap" and s["findings"][0]["seq"] == 2


def test_stream_detail_404_for_unknown_or_foreign_and_422_for_malformed(acme):
    assert_error(acme.get("/streams/acme:nope"), 404, "not_found")
    assert_error(acme.get("/streams/globex:x"), 404, "not_found")
    assert_error(acme.get("/streams/bad%20id"), 422, "invalid_request")


# -- records ---------------------------------------------------------------------------------

def test_records_pages_cover_every_row_once_and_keep_duplicates_together(acme):
    seen, after, pages = [], 0, 0
    while after is not None:
        page = acme.get("/streams/acme:page/records", params={"after_seq": after, "limit": 2})
        assert page.status_code == 200
        body = page.json()
        seen += [(r["seq"], r["log"]["offset"]) for r in body["records"]]
        after, pages = body["next_after_seq"], pages + 1
    assert [s for s, _ in seen] == [1, 2, 3, 3, 4, 5]
    assert len(set(seen)) == 6 and pages >= 3


def test_records_default_page_and_limits(acme, data):
    body = acme.get("/streams/acme:chat/records").json()
    assert [r["seq"] for r in body["records"]] == [1, 2, 3, 4]
    assert body["next_after_seq"] is None
    assert "response_b64" not in body["records"][0] or body["records"][0]["response_b64"] is None
    for params in ({"limit": 0}, {"limit": 1001}, {"after_seq": -1}):
        assert_error(acme.get("/streams/acme:chat/records", params=params), 422,
                     "invalid_request")


def test_records_of_a_foreign_stream_are_404(acme):
    assert_error(acme.get("/streams/globex:x/records"), 404, "not_found")
    assert_error(acme.get("/streams/globex:x/records", params={"after_seq": 1}), 404,
                 "not_found")


@pytest.mark.parametrize("after_seq", [0, 1])
def test_records_of_a_readable_stream_without_records_are_an_empty_page(acme, after_seq):
    r = acme.get("/streams/acme:nope/records", params={"after_seq": after_seq})
    assert r.status_code == 200, r.text
    assert r.json() == {"stream": "acme:nope", "records": [], "next_after_seq": None}


def test_records_list_honours_include_bytes(acme, data):
    body = acme.get("/streams/acme:chat/records", params={"include": "bytes"}).json()
    by_seq = {r["seq"]: r for r in body["records"]}
    det, failed = by_seq[data["det"].seq], by_seq[data["failed"].seq]
    assert base64.b64decode(det["response_b64"]) == data["det"].body["response_bytes"]
    assert base64.b64decode(det["request_b64"]) == SHARED_REQUEST
    assert base64.b64decode(det["record_b64"]) == data["det"].value
    assert base64.b64decode(failed["error_b64"]) == data["failed"].body["error_bytes"]
    single = acme.get(f"/streams/acme:chat/records/{data['det'].seq}",
                      params={"include": "bytes"}).json()
    assert det == single
    assert_error(acme.get("/streams/acme:chat/records", params={"include": "all"}), 422,
                 "invalid_request")


def test_record_metadata_and_bytes(acme, data):
    rec = data["det"]
    meta = acme.get(f"/streams/acme:chat/records/{rec.seq}").json()
    assert meta["event_id"] == rec.event_id
    assert meta["record_digest"] == rec.record_digest.hex()
    assert meta["content_key"] == rec.content_key.hex()
    assert meta["replay"] == {"seed": 42, "temperature": 0.0, "top_p": None,
                              "deterministic": True}
    assert meta["response_b64"] is None
    full = acme.get(f"/streams/acme:chat/records/{rec.seq}", params={"include": "bytes"}).json()
    assert base64.b64decode(full["response_b64"]) == rec.body["response_bytes"]
    assert base64.b64decode(full["request_b64"]) == SHARED_REQUEST
    assert base64.b64decode(full["record_b64"]) == rec.value
    assert full["error_b64"] is None
    failed = acme.get(f"/streams/acme:chat/records/{data['failed'].seq}?include=bytes").json()
    assert base64.b64decode(failed["error_b64"]) == data["failed"].body["error_bytes"]
    assert (meta["request_length"], meta["response_length"], meta["truncated"]) == (
        len(SHARED_REQUEST), len(rec.body["response_bytes"]), False)
    assert (meta["input_digest"], meta["prompt_digest"]) == (None, None)
    assert (failed["response_length"], failed["input_b64"], failed["prompt_b64"]) == (
        None, None, None)


def test_contract_2_fields_and_a_seed_beyond_64_bits(make_readmodel, make_api_server,
                                                     database_url):
    from evidence_contract import input_digest, prompt_digest

    rm = make_readmodel()
    big = 2**64 + 1
    seeded = rm.add("acme:c2", seed=big, output="Hi", input_bytes=b"hi there",
                    input_digest=input_digest(b"hi there"), prompt_bytes=b"<p>hi there",
                    prompt_digest=prompt_digest(b"<p>hi there"))
    # Truncated: the bodies are not kept, their digests and lengths are.
    cut = rm.add("acme:c2", seed=-(2**63) - 1, output="Cut", request_bytes=None,
                 response_bytes=None,
                 capture={"library": "t/0", "host": None, "request_policy": "VALUE",
                          "streamed": False, "closed_early": False, "truncated": True,
                          "started_at": 0, "duration_us": None})
    url = make_api_server(Settings(database_url, Keyring([("all", ALL, ["*"])]),
                                   views_schema=rm.views, max_lag=100))
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ALL}"}) as c:
        full = c.get(f"/streams/acme:c2/records/{seeded.seq}", params={"include": "bytes"})
        assert full.status_code == 200, full.text
        r = full.json()
        assert r["replay"]["seed"] == big and b'"seed":18446744073709551617' in full.content
        assert r["input_digest"] == input_digest(b"hi there").hex()
        assert r["prompt_digest"] == prompt_digest(b"<p>hi there").hex()
        assert base64.b64decode(r["input_b64"]) == b"hi there"
        assert base64.b64decode(r["prompt_b64"]) == b"<p>hi there"
        assert r["request_length"] == len(seeded.body["request_bytes"])
        t = c.get(f"/streams/acme:c2/records/{cut.seq}").json()
        assert t["truncated"] is True and t["replay"]["seed"] == -(2**63) - 1
        assert t["request_length"] == cut.body["request_length"] > 0
        assert t["response_length"] == cut.body["response_length"] > 0
        v = verify(c, stream="acme:c2", seq=seeded.seq, replayed_output="other").json()
        assert f"seed {big}" in v["reason"]
        fid = c.get(f"/streams/acme:c2/records/{seeded.seq}/fidelity").json()
        assert fid["live_reexecution"]["manifest"]["model"]["seed"]["value"] == str(big)
        audit = c.get("/streams/acme:c2/audit").json()
        assert audit["clean"], audit


def test_verify_a_record_of_an_unknown_wire_format_says_why_it_has_no_output_digest(
        make_readmodel, make_api_server, database_url):
    rm = make_readmodel()
    rec = rm.add("acme:other", output=None, provider={
        "name": "acme-llm", "endpoint": "https://llm.example/v2/generate", "api_version": None})
    url = make_api_server(Settings(database_url, Keyring([("all", ALL, ["*"])]),
                                   views_schema=rm.views, max_lag=100))
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ALL}"}) as c:
        v = verify(c, stream="acme:other", seq=rec.seq, replayed_output="Hello!").json()
    assert (v["match"], v["original_hash"]) == (False, None)
    assert "no output_digest" in v["reason"]
    assert "cannot be recomputed for this wire format" in v["reason"]
    assert "/v2/generate" in v["reason"]


def test_record_errors(acme):
    assert_error(acme.get("/streams/acme:chat/records/99"), 404, "not_found")
    assert_error(acme.get("/streams/globex:x/records/1"), 404, "not_found")
    assert_error(acme.get("/streams/acme:chat/records/1?include=all"), 422, "invalid_request")
    assert_error(acme.get("/streams/acme:chat/records/0"), 422, "invalid_request")
    assert_error(acme.get("/streams/acme:chat/records/x"), 422, "invalid_request")


def test_event_lookup(acme, data):
    rec = data["nondet"]
    e = acme.get(f"/events/{rec.event_id}").json()
    assert (e["stream"], e["seq"], e["replay"]["deterministic"]) == ("acme:chat", rec.seq, False)
    with_bytes = acme.get(f"/events/{rec.event_id}", params={"include": "bytes"}).json()
    assert base64.b64decode(with_bytes["record_b64"]) == rec.value
    assert_error(acme.get(f"/events/{data['globex'].event_id}"), 404, "not_found")
    assert_error(acme.get(f"/events/{new_event_id()}"), 404, "not_found")
    assert_error(acme.get("/events/not-a-uuid"), 422, "invalid_request")


# -- errors, metrics -------------------------------------------------------------------------

def test_unknown_route_and_wrong_method_are_json(acme):
    assert_error(acme.get("/nope"), 404, "not_found")
    assert_error(acme.delete("/streams"), 405, "method_not_allowed")


def test_metrics_by_route_template_without_tenant_data(acme, anon, data):
    verify(acme, stream="acme:chat", seq=data["det"].seq, replayed_output="Hello!")
    verify(acme, stream="acme:chat", seq=data["det"].seq, replayed_output="nope")
    verify(acme, stream="acme:chat", seq=data["failed"].seq, replayed_output="x")
    acme.get("/streams/acme:chat/records/1")
    text = anon.get("/metrics").text
    assert 'evidence_api_request_duration_seconds_bucket{le="0.005",method="POST",' \
           'route="/replay/verify"}' in text
    assert 'route="/streams/{stream}/records/{seq}"' in text
    for outcome in ("match", "mismatch", "no_digest"):
        line = next(ln for ln in text.splitlines()
                    if ln.startswith(f'evidence_api_verify_total{{outcome="{outcome}"}}'))
        assert float(line.split()[-1]) >= 1
    assert "evidence_api_projection_lag 0.0" in text
    assert "acme:chat" not in text and "globex" not in text
