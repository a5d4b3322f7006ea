"""Route handlers alone: one router on a bare app, its dependencies overridden, no database."""

import base64
import datetime as dt

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api import Keyring, Settings
from api.db import META_COLUMNS  # noqa: F401 - the row's columns
from api.deps import get_db
from api.routers import records

KEY = "acme-key-0123456789abcdef0123456789"
T = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)


def row(seq, key_id=None, erased=None, **extra):
    """A ``records`` row (META_COLUMNS, ERASED_COLUMNS), with BYTES_COLUMNS appended if
    given; ``erased`` is (erased_at_us, request_id)."""
    r = {c: None for c in META_COLUMNS}
    r.update(stream="acme:chat", seq=seq, event_id="0190b6d2-7c3e-7a51-9f00-1234567890ab",
             schema_version="2.0", occurred_at=T, occurred_at_us=0, captured_at=T,
             outcome="COMMITTED", content_key=b"\0" * 32, prev_digest=b"\0" * 32,
             record_digest=b"\1" * 32, provider_name="openai",
             provider_endpoint="https://api.openai.com/v1/chat/completions",
             deterministic=False, request_policy="VALUE", streamed=False, closed_early=False,
             truncated=False, writer_id="w", request_length=2, log_partition=0,
             log_offset=seq)
    values = tuple(r.values()) + (key_id, *(erased or (None, None)))
    if extra:
        values += (extra.get("request"), extra.get("response"), None, None, None,
                   extra.get("record"))
    return values


class FakeDb:
    def __init__(self, rows, redaction=None):
        self.rows, self.calls, self._redaction = rows, [], redaction

    async def redaction(self, fresh=False):
        return self._redaction

    async def page(self, stream, after_seq, limit, with_bytes=False):
        self.calls.append((stream, after_seq, limit, with_bytes))
        return [r for r in self.rows if r[1] > after_seq][:limit]


def client_for(db):
    app = FastAPI()
    app.state.settings = Settings("postgresql://unused/unused",
                                  Keyring([("acme", KEY, ["acme:*"])]))
    app.dependency_overrides[get_db] = lambda: db
    app.include_router(records.router)
    from api.app import _api_error
    from api.errors import ApiError

    app.add_exception_handler(ApiError, _api_error)
    return TestClient(app, headers={"Authorization": f"Bearer {KEY}"},
                      raise_server_exceptions=False)


def test_list_records_include_bytes_asks_for_the_bodies_and_returns_them():
    db = FakeDb([row(1, request=b"{}", response=b"hi", record=b"\xc3\x01rec")])
    body = client_for(db).get("/streams/acme:chat/records?include=bytes").json()
    assert db.calls[-1][3] is True
    (r,) = body["records"]
    assert base64.b64decode(r["response_b64"]) == b"hi"
    assert base64.b64decode(r["record_b64"]) == b"\xc3\x01rec"


def test_list_records_with_bytes_pages_at_most_bytes_page_max():
    db = FakeDb([row(i, response=b"x") for i in range(1, 4)])
    client_for(db).get("/streams/acme:chat/records?include=bytes&limit=1000")
    assert db.calls[-1][2] == records.BYTES_PAGE_MAX + 1


@pytest.mark.parametrize("after_seq", [0, 1])
def test_a_readable_stream_without_records_is_an_empty_page(after_seq):
    r = client_for(FakeDb([])).get(f"/streams/acme:new/records?after_seq={after_seq}")
    assert r.status_code == 200, r.text
    assert r.json() == {"stream": "acme:new", "records": [], "next_after_seq": None}


class OneRecordDb(FakeDb):
    async def record(self, stream, seq, with_bytes):
        self.calls.append((stream, seq, with_bytes))
        return next((r for r in self.rows if r[1] == seq), None)


ERASED_ROW = dict(key_id=b"\x07" * 16, erased=(1_735_689_600_000_000, "dsr-1"))


def test_an_erased_record_says_so_and_never_serves_its_bodies():
    db = OneRecordDb([row(1, **ERASED_ROW, request=b"env", response=b"env", record=b"rec"),
                      row(2, key_id=b"\x08" * 16, response=b"env", record=b"rec"),
                      row(3, response=b"hi", record=b"rec")])
    c = client_for(db)
    r = c.get("/streams/acme:chat/records/1").json()
    assert r["content"] == "erased" and r["key_id"] == "07" * 16
    assert r["erasure"] == {"erased_at": "2025-01-01T00:00:00+00:00",
                            "erased_at_us": 1_735_689_600_000_000, "request_id": "dsr-1"}
    assert r["record_digest"] == "01" * 32 and r["seq"] == 1
    one = c.get("/streams/acme:chat/records/1?include=bytes")
    assert one.status_code == 200  # as in a page: no bodies, the message (ciphertext) given
    assert (one.json()["response_b64"], one.json()["request_b64"]) == (None, None)
    assert base64.b64decode(one.json()["record_b64"]) == b"rec"
    page = c.get("/streams/acme:chat/records?include=bytes").json()["records"]
    assert [(p["content"], p["response_b64"] is None, p["record_b64"] is None)
            for p in page] == [("erased", True, False), ("encrypted", False, False),
                               ("plain", False, False)]
    assert c.get("/streams/acme:chat/records/2?include=bytes").status_code == 200
