"""The toolbox pages' pure parts: the verify form as the JSON body of POST /replay/verify, the
audits a process keeps, and an audit's progress page."""

import asyncio
import base64
from types import SimpleNamespace

import pytest
from starlette.requests import Request

from api.auth import ApiKey, Scope
from api.pages import toolbox
from api.pages.sessions import Session
from api.pages.toolbox import Audit, Audits, verify_body
from api.pages.web import PageError

EVENT = "0190a8f2-7a3c-7cc1-8e4f-1a2b3c4d5e6f"


def test_a_record_by_stream_and_seq_with_pasted_text_has_its_crlf_turned_back_into_lf():
    body = verify_body({"stream": " acme:x ", "seq": "12", "output": "a\r\nb\r\n"}, {})
    assert body == {"stream": "acme:x", "seq": 12, "replayed_output": "a\nb\n"}


def test_crlf_is_kept_when_asked():
    body = verify_body({"event_id": EVENT, "output": "a\r\nb", "crlf": "on"}, {})
    assert body == {"event_id": EVENT, "replayed_output": "a\r\nb"}


def test_bijotels_basis_is_asked_for_only_by_its_name():
    assert verify_body({"event_id": EVENT, "output": "x", "basis": "bijotel"}, {})["basis"] \
        == "bijotel"
    assert "basis" not in verify_body({"event_id": EVENT, "output": "x", "basis": "other"}, {})


def test_an_uploaded_response_is_sent_as_its_exact_bytes():
    raw = b"\x00\xff{\"x\": 1}\r\n"
    body = verify_body({"event_id": EVENT}, {"response": raw})
    assert base64.b64decode(body["replayed_response_b64"]) == raw


@pytest.mark.parametrize("fields, files, says", [
    ({"output": "x"}, {}, "Name the record"),
    ({"stream": "acme:x", "output": "x"}, {}, "Name the record"),
    ({"stream": "acme:x", "seq": "-1", "output": "x"}, {}, "whole number"),
    ({"stream": "acme:x", "seq": "1" * 20, "output": "x"}, {}, "whole number"),
    ({"event_id": EVENT, "stream": "acme:x", "output": "x"}, {}, "not both"),
    ({"event_id": EVENT.upper(), "output": "x"}, {}, "canonical form"),
    ({"event_id": EVENT}, {}, "Paste the replayed output"),
    ({"event_id": EVENT, "output": "x"}, {"response": b"y"}, "not both"),
])
def test_a_form_that_does_not_name_one_record_and_one_replay_says_what_is_missing(fields, files,
                                                                                 says):
    with pytest.raises(ValueError, match=says):
        verify_body(fields, files)


def key(name: str) -> ApiKey:
    return ApiKey(name, name.encode().ljust(32, b"\0"), Scope.of(["*"]))


def test_an_audit_is_seen_only_by_the_key_that_started_it():
    audits = Audits()
    audits.add(Audit("a1", key("alice").digest, "acme:x", None, None, 3))
    assert audits.get("a1", key("alice")).stream == "acme:x"
    assert audits.get("a1", key("bob")) is None
    assert audits.get("nope", key("alice")) is None


def test_finished_audits_go_first_and_running_ones_are_kept():
    audits = Audits(kept=2)
    running = Audit("run", b"k", "s", None, None, None)
    audits.add(running)
    for n in range(3):
        done = Audit(f"done{n}", b"k", "s", None, None, None)
        done.result = {"findings": [], "projector_findings": []}
        audits.add(done)
    assert [a for a in ("run", "done0", "done1", "done2")
            if audits._audits.get(a)] == ["run", "done2"]


def test_findings_are_reported_within_the_seq_range_asked_for():
    audit = Audit("a", b"k", "s", 3, 5, 9)
    audit.result = {"findings": [{"kind": "gap", "seq": 2}, {"kind": "broken_link", "seq": 4}],
                    "projector_findings": [{"kind": "projection_altered", "seq": 6},
                                           {"kind": "head_mismatch", "seq": None}]}
    assert [f["kind"] for f in audit.findings()] == ["broken_link", "head_mismatch"]


def page_request(path: str) -> Request:
    app = SimpleNamespace(state=SimpleNamespace())
    return Request({"type": "http", "method": "GET", "path": path, "query_string": b"",
                    "headers": [], "app": app, "scheme": "http",
                    "server": ("127.0.0.1", 8000)})


def test_a_running_audits_page_reloads_itself_and_says_how_far_it_got_then_stops():
    alice = key("alice")
    request = page_request("/ui/audit/a1")
    audit = Audit("a1", alice.digest, "acme:x", None, None, 10)
    audit.checked = 3
    toolbox._audits(request).add(audit)
    session = Session(alice, "token", 0.0)

    response = asyncio.run(toolbox.audit_page(request, "a1", session))
    html = response.body.decode()
    assert response.headers["refresh"] == "1"
    assert "Checked 3 records of 10." in html and '<progress max="10" value="3"' in html

    audit.result = {"records": 10, "last_seq": 10, "clean": True, "findings_by_kind": {},
                    "findings": [], "projector_findings": [], "projector_findings_count": 0,
                    "output_digest_checks": {"extracted": 10}, "encrypted_records": 0,
                    "erased_records": 0}
    response = asyncio.run(toolbox.audit_page(request, "a1", session))
    assert "refresh" not in response.headers
    assert "Clean: no findings" in response.body.decode()


def test_another_keys_audit_is_not_found():
    request = page_request("/ui/audit/a1")
    toolbox._audits(request).add(Audit("a1", key("alice").digest, "acme:x", None, None, 1))
    with pytest.raises(PageError) as e:
        asyncio.run(toolbox.audit_page(request, "a1", Session(key("bob"), "t", 0.0)))
    assert e.value.status == 404
