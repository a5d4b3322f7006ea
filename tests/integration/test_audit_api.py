"""``GET /streams/{stream}/audit`` and the fidelity routes over real HTTP against a real
PostgreSQL read model; tampering is done with SQL on the read model, as an attacker would."""

import copy

import httpx
import pytest

from api import Keyring, Settings
from tests.fixtures.api_server import serve_api
from tests.unit.test_fidelity import exact_manifest

pytestmark = pytest.mark.integration

ALL, ACME = "audit-all-0123456789", "audit-acme-0123456789"


@pytest.fixture
def api(readmodel, database_url):
    """(readmodel, client with a key for every stream, client with a key for acme:* only)."""
    keyring = Keyring([("all", ALL, ["*"]), ("acme", ACME, ["acme:*"])])
    with serve_api(Settings(database_url, keyring, views_schema=readmodel.views)) as url, \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ALL}"},
                         timeout=20) as admin, \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ACME}"},
                         timeout=20) as acme:
        yield readmodel, admin, acme


def sql(rm, statement, params=()):
    rm.conn.execute(statement.format(v=f'"{rm.views}"'), params)


def audit(client, stream, status=200):
    r = client.get(f"/streams/{stream}/audit")
    assert r.status_code == status, r.text
    return r.json()


def named(report):
    return [(f["kind"], f["seq"]) for f in report["findings"]]


def test_a_clean_stream(api):
    rm, admin, acme = api
    for i in range(5):
        rm.add("acme:chat", output=f"answer {i}")
    rm.add("globex:x")
    report = audit(acme, "acme:chat")
    assert report["clean"] is True, report
    assert (report["records"], report["last_seq"]) == (5, 5)
    assert report["findings_by_kind"] == {} and report["projector_findings_count"] == 0
    assert audit(admin, "globex:x")["records"] == 1


def test_scope_and_missing_streams_are_404(api):
    rm, admin, acme = api
    rm.add("globex:x")
    assert audit(acme, "globex:x", 404)["error"] == "not_found"
    assert audit(admin, "nobody:here", 404)["error"] == "not_found"
    with httpx.Client(base_url=str(admin.base_url)) as anon:
        assert anon.get("/streams/globex:x/audit").status_code == 401


def test_edited_response_bytes_are_named(api):
    rm, admin, _ = api
    recs = [rm.add("acme:chat", output=f"a{i}") for i in range(3)]
    sql(rm, "update {v}.records set response_bytes = %s where stream = 'acme:chat' and seq = 2",
        (b'{"choices":[{"message":{"content":"forged"}}]}',))
    report = audit(admin, "acme:chat")
    assert report["clean"] is False
    assert named(report) == [("projection_altered", 2)]
    assert "response_bytes" in report["findings"][0]["detail"]
    assert report["findings"][0]["offset"] == recs[1].offset


def test_deleted_rows_are_named(api):
    rm, admin, _ = api
    for i in range(4):
        rm.add("acme:chat", output=f"a{i}")
    sql(rm, "delete from {v}.records where stream = 'acme:chat' and seq = 2")
    assert named(audit(admin, "acme:chat")) == [("gap", 3)]  # the chain step: one finding
    sql(rm, "delete from {v}.records where stream = 'acme:chat' and seq = 4")
    report = audit(admin, "acme:chat")
    assert ("head_mismatch", 3) in named(report)  # the head still says 4


def test_reordered_rows_are_named(api):
    rm, admin, _ = api
    for i in range(3):
        rm.add("acme:chat", output=f"a{i}")
    # seq values swapped between two rows: each row now claims the other's place.
    sql(rm, "update {v}.records set seq = 3 - seq where stream = 'acme:chat' and seq in (1, 2)")
    report = audit(admin, "acme:chat")
    assert report["findings_by_kind"] == {"projection_altered": 2}, report
    assert all("seq" in f["detail"] for f in report["findings"])


def test_an_output_digest_of_an_unknown_wire_format_is_reported_not_skipped(api):
    rm, admin, _ = api
    rm.add("acme:chat", output="known")
    rm.add("acme:chat", output="Hi", provider={
        "name": "acme-llm", "endpoint": "https://llm.example/v2/generate", "api_version": None})
    report = audit(admin, "acme:chat")
    assert report["output_digest_checks"] == {"extracted": 1, "no_text": 0,
                                              "unknown_format": 1}
    assert report["clean"] is False and named(report) == [("output_digest_unverifiable", 2)]
    detail = report["findings"][0]["detail"]
    assert "cannot be recomputed for this wire format" in detail and "/v2/generate" in detail


def test_projector_findings_are_reported(api):
    rm, admin, _ = api
    rm.add("acme:chat")
    rm.add_finding("acme:chat", 1, "gap", "seq 1 arrived late")
    report = audit(admin, "acme:chat")
    assert report["findings"] == [] and report["clean"] is False
    assert report["projector_findings_count"] == 1
    assert report["projector_findings"][0]["kind"] == "gap"


# -- fidelity ------------------------------------------------------------------------------

def test_record_fidelity_reports_both_modes(api):
    rm, admin, acme = api
    rm.add("acme:chat", output="hi")
    rm.add("acme:chat", outcome="FAILED")
    rm.add("globex:x")
    r = acme.get("/streams/acme:chat/records/1/fidelity")
    assert r.status_code == 200, r.text
    report = r.json()
    assert (report["stream"], report["seq"]) == ("acme:chat", 1)
    assert report["log_replay"]["level"] == "exact", report["log_replay"]
    assert report["live_reexecution"]["level"] == "controlled"
    assert any(f["impact"] == "prevents_exactness" and f["path"].startswith("model")
               for f in report["live_reexecution"]["missing_evidence"])
    assert len(report["log_replay"]["manifest_sha256"]) == 64
    # No response bytes recorded: the log cannot serve it exactly.
    failed = acme.get("/streams/acme:chat/records/2/fidelity").json()
    assert failed["log_replay"]["level"] != "exact"
    assert acme.get("/streams/globex:x/records/1/fidelity").status_code == 404
    assert acme.get("/streams/acme:chat/records/9/fidelity").status_code == 404


def test_analyze_a_manifest(api):
    _, admin, _ = api
    r = admin.post("/fidelity/analyze", json=exact_manifest())
    assert r.status_code == 200, r.text
    assert r.json()["level"] == "exact" and r.json()["missing_evidence"] == []
    m = exact_manifest()
    m["isolation"]["network"] = "live"
    body = admin.post("/fidelity/analyze", json=m).json()
    assert body["level"] == "unreplayable"
    assert [(f["path"], f["impact"]) for f in body["missing_evidence"]] == [
        ("isolation.network", "blocks_replay")]


def test_an_invalid_manifest_is_422_with_its_problems(api):
    _, admin, _ = api
    bad = copy.deepcopy(exact_manifest())
    bad["model"]["seed"] = {"state": "maybe"}
    del bad["isolation"]
    r = admin.post("/fidelity/analyze", json=bad)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "invalid_manifest" and len(body["problems"]) >= 2
    assert any(p.startswith("$.model.seed") for p in body["problems"])
    assert any("isolation" in p for p in body["problems"])
    r = admin.post("/fidelity/analyze", content=b"{not json",
                   headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"] == "invalid_request"
    with httpx.Client(base_url=str(admin.base_url)) as anon:
        assert anon.post("/fidelity/analyze", json=exact_manifest()).status_code == 401
