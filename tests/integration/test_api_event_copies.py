"""A read by event id answers the original, never a copy, against real Kafka and PostgreSQL.

Stream A's capture is sealed first; a capture of stream B reuses A's event id. B is chosen to
live on a lower log partition than A, so "first in log position" would be B's record: the
real writer seals both, the real projector flags B ``duplicate_event_id``, and the API, with
a key for every stream, must answer A's record (the first by the contract's order: earliest
``occurred_at``, then log position) and say that a copy exists; ``POST /replay/verify`` by
event id must compare with A's record. A key scoped to B alone gets B's record, marked as a
copy.
"""

from __future__ import annotations

import uuid

import httpx
import pytest

from api import Keyring, Settings
from evidence_contract import new_event_id, output_digest
from evidence_contract.topics import partition_for
from tests.fixtures.log import wait_until
from tests.fixtures.writer import make_capture, produce_captures

pytestmark = pytest.mark.integration

PARTITIONS = 3
ALL_KEY = f"all-{uuid.uuid4().hex}"
B_KEY = f"b-only-{uuid.uuid4().hex}"


def _streams() -> tuple[str, str]:
    """(a, b), this test's own, with b on a lower partition than a."""
    tag = uuid.uuid4().hex[:8]
    for i in range(100):
        a, b = f"dup-a-{tag}-{i}:chat", f"dup-b-{tag}-{i}:chat"
        if partition_for(b, PARTITIONS) < partition_for(a, PARTITIONS):
            return a, b
    raise AssertionError("no stream pair found in 100 tries of a 1-in-3 chance")


def _capture(stream: str, eid: str, text: str) -> dict:
    return make_capture(stream, event_id=eid, response=f'{{"text":"{text}"}}'.encode(),
                        output_digest=output_digest(text))


def test_a_copy_of_an_event_id_never_shadows_the_original(make_pipeline, make_api_server,
                                                          kafka_bootstrap, database_url):
    p = make_pipeline(partitions=PARTITIONS)
    a, b = _streams()
    eid = new_event_id()
    produce_captures(kafka_bootstrap, p.topics, [_capture(a, eid, "A's true output")])
    [rec_a] = p.wait_records(a, 1, timeout=60)
    produce_captures(kafka_bootstrap, p.topics, [_capture(b, eid, "B's other output")])
    [rec_b] = p.wait_records(b, 1, timeout=60)
    assert rec_a["event_id"] == rec_b["event_id"] == eid
    assert rec_b["log"]["partition"] < rec_a["log"]["partition"]  # B first by log position
    assert rec_a["occurred_at_us"] < rec_b["occurred_at_us"]      # A first by the contract
    wait_until("B's duplicate_event_id finding", lambda: [
        f for f in p.api.get(f"/streams/{b}").json()["findings"]
        if f["kind"] == "duplicate_event_id"], 60, 0.1)
    assert not [f for f in p.api.get(f"/streams/{a}").json()["findings"]
                if f["kind"] == "duplicate_event_id"]

    url = make_api_server(Settings(database_url, Keyring([("all", ALL_KEY, ["*"]),
                                                          ("b", B_KEY, [b])]),
                                   views_schema=p.projection.views_schema, max_lag=10**9))
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ALL_KEY}"},
                      timeout=10) as every, \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {B_KEY}"},
                         timeout=10) as b_only:
        # Every stream: the original, and that one copy exists.
        for include in (None, "bytes"):
            r = every.get(f"/events/{eid}", params={"include": include} if include else None)
            assert r.status_code == 200, r.text
            got = r.json()
            assert (got["stream"], got["seq"], got["record_digest"]) == (
                a, 1, rec_a["record_digest"])
            assert (got["copies"], got["is_copy"]) == (1, False)
        v = every.post("/replay/verify", json={"event_id": eid,
                                                "replayed_output": "A's true output"})
        assert v.status_code == 200, v.text
        assert v.json()["match"] is True and v.json()["stream"] == a, v.json()
        assert v.headers["evidence-event-copies"] == "1"
        assert v.headers["evidence-event-is-copy"] == "false"
        v = every.post("/replay/verify", json={"event_id": eid,
                                                "replayed_output": "B's other output"})
        assert v.json()["match"] is False and v.json()["stream"] == a

        # B's key alone: B's record is all it may read; it says it is a copy, nothing more.
        got = b_only.get(f"/events/{eid}").json()
        assert (got["stream"], got["copies"], got["is_copy"]) == (b, 0, True)
        v = b_only.post("/replay/verify", json={"event_id": eid,
                                                 "replayed_output": "B's other output"})
        assert v.json()["match"] is True and v.json()["stream"] == b
        assert (v.headers["evidence-event-copies"], v.headers["evidence-event-is-copy"]) == (
            "0", "true")

        # By stream and seq nothing changes: no event headers, no copies fields.
        v = every.post("/replay/verify", json={"stream": b, "seq": 1,
                                                "replayed_output": "B's other output"})
        assert v.json()["match"] is True and "evidence-event-copies" not in v.headers
        rec = every.get(f"/streams/{a}/records/1").json()
        assert rec["copies"] is None and rec["is_copy"] is None
        # An id nobody sealed is a 404 for both keys.
        for client in (every, b_only):
            assert client.get(f"/events/{new_event_id()}").status_code == 404
