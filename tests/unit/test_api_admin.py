"""The admin role and POST /admin/erasures, without a database: a bare app with the router."""

import json
import secrets

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.app import _api_error, _invalid
from api.auth import Keyring
from api.config import Settings, load_keyring
from api.errors import ApiConfigError, ApiError
from api.routers import admin
from fastapi.exceptions import RequestValidationError

ADMIN, READER = secrets.token_hex(32), secrets.token_hex(32)


def test_keys_file_admin_flag_and_admin_keys_env(tmp_path):
    f = tmp_path / "keys.json"
    f.write_text(json.dumps([{"key": READER, "streams": ["*"], "name": "r"},
                             {"key": ADMIN, "streams": ["acme:*"], "name": "a", "admin": True}]))
    f.chmod(0o600)
    ring = load_keyring({"EVIDENCE_API_KEYS_FILE": str(f)})
    assert ring.lookup(ADMIN).admin and not ring.lookup(READER).admin
    other = secrets.token_hex(32)
    ring = load_keyring({"EVIDENCE_API_KEY": READER, "EVIDENCE_API_KEY_STREAMS": "*",
                         "EVIDENCE_API_ADMIN_KEYS": f"{READER}, {other}"})
    assert ring.lookup(READER).admin  # the dev key gains the role
    k = ring.lookup(other)
    assert k.admin and not k.scope.allows("acme:x")  # an admin-only key reads no stream
    f.write_text(json.dumps([{"key": ADMIN, "streams": ["*"], "admin": "yes"}]))
    with pytest.raises(ApiConfigError, match="admin"):
        load_keyring({"EVIDENCE_API_KEYS_FILE": str(f)})


class _Store:
    def __init__(self):
        self.destroyed = []

    def destroy(self, subject, request_id=None):
        self.destroyed.append((subject, request_id))
        return []

    def subjects(self):
        return []


@pytest.fixture
def client():
    app = FastAPI()
    app.include_router(admin.router)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.state.settings = Settings("postgresql://x", Keyring([("r", READER, ["*"]),
                                                            ("a", ADMIN, [], True)]))
    app.state.key_store = _Store()
    return TestClient(app)


def test_a_key_without_the_admin_role_is_refused_with_the_reason(client):
    r = client.post("/admin/erasures", json={"subject": "user-1"},
                    headers={"Authorization": f"Bearer {READER}"})
    assert r.status_code == 403 and "admin role" in r.json()["message"]
    assert client.app.state.key_store.destroyed == []
    assert client.post("/admin/erasures", json={"subject": "u"}).status_code == 401


@pytest.mark.parametrize("body", [{}, {"subject": ""}, {"subject": "u", "extra": 1},
                                  {"subject": 5}, {"subject": "u", "request_id": "a b"},
                                  {"subject": "u", "reason": "x" * 1001}, {"subject": "a\nb"}])
def test_the_body_is_strict(client, body):
    r = client.post("/admin/erasures", json=body, headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 422, r.text
    assert client.app.state.key_store.destroyed == []


def test_an_unknown_field_is_told_the_erasure_body_s_own_fields(client):
    r = client.post("/admin/erasures", json={"subject": "u", "stream": "acme:chat"},
                    headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 422, r.text
    assert r.json()["message"] == ("unknown field 'stream' (allowed: subject, request_id, "
                                   "reason, seal_if_none)")


def test_without_kafka_the_route_is_unavailable_before_destroying(client):
    r = client.post("/admin/erasures", json={"subject": "u"},
                    headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 503 and "Kafka" in r.json()["message"]
    assert client.app.state.key_store.destroyed == []


def test_a_subject_under_a_legal_hold_is_409_and_nothing_is_erased(client):
    from dataclasses import replace

    from evidence_contract.keys import Hold, LegalHold

    class _Held(_Store):
        def destroy(self, subject, request_id=None, **kw):
            raise LegalHold(Hold(subject, "litigation 2026-117", 1_800_000_000_000_000))

        def holds(self):
            return []

    client.app.state.key_store = _Held()
    client.app.state.settings = replace(client.app.state.settings,
                                        kafka_bootstrap="127.0.0.1:1")
    r = client.post("/admin/erasures", json={"subject": "user-1"},
                    headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 409, r.text
    assert "legal hold" in r.json()["message"] and "nothing was erased" in r.json()["message"]


@pytest.fixture
def sent(client, monkeypatch):
    """The erasure requests the route hands to Kafka (none reach a broker)."""
    from dataclasses import replace

    import server.erasure

    out = []
    monkeypatch.setattr(server.erasure, "_send", lambda cfg, topic, req: out.append(req))
    client.app.state.settings = replace(client.app.state.settings,
                                        kafka_bootstrap="127.0.0.1:1")
    return out


def test_a_subject_with_no_keys_is_404_with_the_reason_and_nothing_is_sealed(client, sent):
    from evidence_contract.keys import ERASED, SubjectState

    r = client.post("/admin/erasures", json={"subject": "user-nobody"},
                    headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 404, r.text
    assert r.json()["error"] == "not_found"
    assert "no keys to erase" in r.json()["message"] and "seal_if_none" in r.json()["message"]
    assert sent == []

    class _Erased(_Store):  # its keys went under an earlier request
        def subjects(self):
            return [SubjectState("user-1", "ab" * 16, ERASED, 1, 2, "dsr-1")]

    client.app.state.key_store = _Erased()
    r = client.post("/admin/erasures", json={"subject": "user-1", "request_id": "dsr-2"},
                    headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 404 and "under request dsr-1" in r.json()["message"]
    assert sent == []
    # The same request again is the retry of an erasure that happened: 202, its keys named.
    r = client.post("/admin/erasures", json={"subject": "user-1", "request_id": "dsr-1"},
                    headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 202 and r.json()["key_ids"] == ["ab" * 16]
    assert [q.request_id for q in sent] == ["dsr-1"]


def test_seal_if_none_seals_a_receipt_that_names_no_key(client, sent):
    r = client.post("/admin/erasures", json={"subject": "user-nobody", "request_id": "dsr-9",
                                             "seal_if_none": True},
                    headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 202, r.text
    assert r.json()["key_ids"] == [] and [(q.request_id, q.key_ids) for q in sent] == [
        ("dsr-9", ())]
    r = client.post("/admin/erasures", json={"subject": "u", "seal_if_none": "yes"},
                    headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 422
