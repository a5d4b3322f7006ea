"""Record contract 2.2 end to end, against real Kafka and PostgreSQL: the real writer seals a
capture with a trace, a capture mapped from telemetry and a 2.1 producer's capture; the real
projector projects them (trace_id, span_id, mapped, corroborates); the API finds the first two
by their trace id and says which is which; the 2.1 capture stays a 2.1 record."""

from __future__ import annotations

import io
import os
import uuid

import fastavro
import psycopg
import pytest

from evidence_contract import content_key, new_event_id, span_digest
from evidence_contract._avro import HISTORY
from evidence_contract.vectors import mapped_event
from tests.fixtures.writer import make_capture, produce_captures, produce_intake

pytestmark = pytest.mark.integration


def _trace() -> dict[str, bytes]:
    return {"trace_id": os.urandom(16), "span_id": os.urandom(8)}


def _mapped(stream: str, trace: dict[str, bytes], corroborates: str) -> dict:
    """The contract's mapped vector for this test's stream and trace: another span's bytes."""
    span = b"span of " + trace["trace_id"] + trace["span_id"]
    e = mapped_event()
    return {**e, "stream": stream, "event_id": new_event_id(), "trace": trace,
            "content_key": span_digest(span), "request_length": len(span),
            "telemetry": {**e["telemetry"], "span_digest": span_digest(span),
                          "corroborates": corroborates}}


def _encode_2_1(event: dict) -> bytes:
    old = next(s for s in HISTORY if s.fingerprint.hex() == "dcad4f6e8bfbc7de")
    body = {k: v for k, v in event.items() if k not in ("trace", "telemetry")}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, old.parsed, {**body, "schema_version": "2.1"}, strict=True)
    return b"\xc3\x01" + old.fingerprint + out.getvalue()


def test_traced_and_mapped_captures_are_sealed_projected_and_found_by_trace(make_pipeline,
                                                                            kafka_bootstrap):
    p = make_pipeline()
    stream = f"otel-{uuid.uuid4().hex[:8]}:chat"
    trace = _trace()
    wire = make_capture(stream, trace=trace)
    mapped = _mapped(stream, {**trace, "span_id": os.urandom(8)}, wire["event_id"])
    other = make_capture(stream, trace=_trace())  # another trace: not in the answer
    old = make_capture(stream)
    produce_captures(kafka_bootstrap, p.topics, [wire, mapped, other])
    produce_intake(kafka_bootstrap, p.topics, [(stream.encode(), _encode_2_1(old))])
    records = p.wait_records(stream, 4, timeout=60)
    by_event = {r["event_id"]: r for r in records}
    assert set(by_event) == {wire["event_id"], mapped["event_id"], other["event_id"],
                             old["event_id"]}, "a capture was rejected"

    # Sealed with their own contract version, and their trace.
    assert by_event[wire["event_id"]]["schema_version"] == "2.2"
    assert by_event[old["event_id"]]["schema_version"] == "2.1"
    assert by_event[old["event_id"]]["trace"] is None
    got = p.api.get(f"/streams/{stream}/records/{by_event[old['event_id']]['seq']}",
                    params={"include": "bytes"}).json()
    import base64

    assert base64.b64decode(got["record_b64"])[2:10].hex() == "598d7a24f41b9228"

    r = p.api.get(f"/traces/{trace['trace_id'].hex()}/records")
    assert r.status_code == 200, r.text
    found = r.json()["records"]
    assert [x["event_id"] for x in found] == [wire["event_id"], mapped["event_id"]]
    w, m = found
    assert w["trace"] == {"trace_id": trace["trace_id"].hex(),
                          "span_id": trace["span_id"].hex()}
    assert w["capture_method"] == "wire" and w["telemetry"] is None
    assert m["capture_method"] == "mapped from telemetry"
    assert m["telemetry"]["corroborates"] == wire["event_id"]
    assert m["content_key"] == m["telemetry"]["span_digest"] == mapped["content_key"].hex()
    assert m["response_digest"] is None and m["outcome"] == "COMMITTED"
    assert m["content_key"] != content_key(b"").hex()

    # The projection's columns, as the projector wrote them.
    with psycopg.connect(p.projection.database_url) as conn:
        rows = conn.execute(
            f'select event_id, trace_id, span_id, mapped, corroborates '
            f'from "{p.projection.views_schema}".records where stream = %s order by seq',
            (stream,)).fetchall()
    cols = {str(e): (t, s, mp, c) for e, t, s, mp, c in rows}
    assert cols[wire["event_id"]] == (trace["trace_id"], trace["span_id"], False, None)
    assert cols[mapped["event_id"]][2:] == (True, uuid.UUID(wire["event_id"]))
    assert cols[old["event_id"]] == (None, None, False, None)

    # Fidelity says what the mapped record is.
    fid = p.api.get(f"/streams/{stream}/records/{m['seq']}/fidelity").json()
    assert fid["log_replay"]["manifest"]["provenance"]["capture_method"] == "mapped"

    # A trace of no record, and one that is no trace id.
    assert p.api.get(f"/traces/{os.urandom(16).hex()}/records").json()["records"] == []
    bad = p.api.get("/traces/" + "0" * 32 + "/records")
    assert bad.status_code == 422 and "all zero" in bad.json()["message"]
