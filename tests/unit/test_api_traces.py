"""Record contract 2.2 in the API: ``GET /traces/{trace_id}/records``'s validation and scope,
and a record's ``capture_method``, ``trace`` and ``telemetry`` (read from a mapped record's own
message); fidelity reports a mapped capture as such."""

from __future__ import annotations

import uuid

import pytest

from api.db import META_COLUMNS
from api.models import record_dict
from evidence_contract import GENESIS, encode, seal
from evidence_contract.vectors import TRACE_ID, mapped_event, traced_event
from tests.unit.test_api_routers import FakeDb, client_for, row

TRACE = TRACE_ID.hex()
W = {"writer_id": "w", "transactional_id": "t", "version": "0"}


class TraceDb(FakeDb):
    async def trace(self, trace_id, scope, limit):
        self.calls.append((trace_id, scope.sql(), limit))
        return self.rows[:limit]


def _traced_row(seq: int, mapped: bool = False):
    values = list(row(seq))
    at = {c: i for i, c in enumerate(META_COLUMNS)}
    values[at["trace_id"]], values[at["span_id"]] = TRACE_ID, bytes.fromhex("00f067aa0ba902b7")
    if mapped:
        e = mapped_event()
        values[at["mapped"]] = True
        values[at["corroborates"]] = uuid.UUID(e["telemetry"]["corroborates"])
        values[at["telemetry_record"]] = encode("EvidenceRecord",
                                                seal(e, 0, GENESIS, 1, W, 0, 0))
    else:
        values[at["mapped"]] = False
    return tuple(values)


def test_the_records_of_a_trace_with_their_trace_and_telemetry():
    db = TraceDb([_traced_row(1), _traced_row(2, mapped=True)])
    r = client_for(db).get(f"/traces/{TRACE}/records")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["trace_id"] == TRACE and body["more"] is False
    wire, mapped = body["records"]
    assert wire["trace"] == {"trace_id": TRACE, "span_id": "00f067aa0ba902b7"}
    assert wire["capture_method"] == "wire" and wire["telemetry"] is None
    assert mapped["capture_method"] == "mapped from telemetry"
    t = mapped_event()["telemetry"]
    assert mapped["telemetry"]["span_digest"] == t["span_digest"].hex()
    assert mapped["telemetry"]["dialect"] == "bijotel"
    assert mapped["telemetry"]["claims"][0]["verdict"] == "VERIFIED"
    trace_id, (cond, params), limit = db.calls[-1]
    assert trace_id == TRACE_ID and limit == 101 and params  # scoped to the key's streams


def test_more_says_the_trace_has_more_records_than_the_limit():
    db = TraceDb([_traced_row(i) for i in range(1, 4)])
    body = client_for(db).get(f"/traces/{TRACE}/records?limit=2").json()
    assert len(body["records"]) == 2 and body["more"] is True


def test_a_trace_without_records_the_key_may_read_is_an_empty_list():
    body = client_for(TraceDb([])).get(f"/traces/{TRACE}/records").json()
    assert body == {"trace_id": TRACE, "records": [], "more": False}


@pytest.mark.parametrize("bad,words", [
    ("4BF92F3577B34DA6A3CE929D0E0E4736", "32 lowercase hex digits"),
    ("4bf92f3577b34da6a3ce929d0e0e473", "32 lowercase hex digits"),
    ("4bf92f3577b34da6a3ce929d0e0e47366", "32 lowercase hex digits"),
    ("4bf92f3577b34da6-3ce929d0e0e4736", "32 lowercase hex digits"),
    ("zz" * 16, "32 lowercase hex digits"),
    ("0" * 32, "all zero"),
])
def test_a_trace_id_that_is_none_is_a_clear_422(bad, words):
    db = TraceDb([_traced_row(1)])
    r = client_for(db).get(f"/traces/{bad}/records")
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid_request" and words in r.json()["message"]
    assert db.calls == []


def test_without_a_key_the_trace_is_not_read():
    from fastapi.testclient import TestClient

    db = TraceDb([_traced_row(1)])
    app = client_for(db).app
    r = TestClient(app, raise_server_exceptions=False).get(f"/traces/{TRACE}/records")
    assert r.status_code == 401 and db.calls == []


def test_a_record_of_an_earlier_contract_is_wire_without_a_trace():
    out = record_dict(row(1))
    assert (out["capture_method"], out["trace"], out["telemetry"]) == ("wire", None, None)


def test_fidelity_reports_a_mapped_capture_as_mapped_not_native_evidence():
    from fidelity import analyze_record

    e = mapped_event()
    record = {"stream": e["stream"], "seq": 1, "content_key": e["content_key"],
              "provider_name": "openai", "provider_endpoint": "", "model_id": "gpt-4o-mini",
              "params": None, "seed": None, "outcome": "COMMITTED", "request_bytes": None,
              "response_bytes": None, "key_id": None, "erased": False,
              "trace_id": e["trace"]["trace_id"], "span_id": e["trace"]["span_id"],
              "mapped": True}
    out = analyze_record(record)
    for mode in ("log_replay", "live_reexecution"):
        prov = out[mode]["manifest"]["provenance"]
        assert prov["capture_method"] == "mapped"
        assert prov["trace_id"] == {"state": "value", "value": TRACE}
        assert any(f["path"] == "provenance.capture_method" and "mapped from telemetry"
                   in f["reason"] and "not native" in f["reason"]
                   for f in out[mode]["missing_evidence"]), out[mode]["missing_evidence"]
    assert "mapped from telemetry" in out["log_replay"]["manifest"]["model"]["determinism"]["basis"]
    native = analyze_record({**record, "mapped": False, "trace_id": None, "span_id": None})
    assert native["log_replay"]["manifest"]["provenance"]["capture_method"] == "native"
    assert traced_event()["trace"]["trace_id"] == TRACE_ID
