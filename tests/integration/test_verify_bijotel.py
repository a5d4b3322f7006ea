"""``POST /replay/verify`` on BIJOTEL's basis against real Kafka and PostgreSQL: captures
mapped from BIJOTEL spans, sealed by the real writer and projected, compared with their
``bijotel.replay.output_hash`` claim as BIJOTEL's own ``verify_replay`` compares it; a record
without that claim is a 422, the record's own basis is unchanged."""

from __future__ import annotations

import json
import os
import uuid

import pytest
from bijotel.replay import record_replay_context, verify_replay

from otlp import PROTOBUF, decode_traces
from otlp.capture import Streams, captures_in_traces
from tests.fixtures.writer import make_capture, produce_captures
from tests.unit import otlp_harness as h

pytestmark = pytest.mark.integration

PROMPT = [{"role": "user", "content": h.USER}]
CALL = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-haiku-4-5",
        "gen_ai.response.model": "claude-haiku-4-5-20251001"}
CONTENT = {"gen_ai.input.messages": json.dumps(PROMPT), "gen_ai.output.messages": h.OUTPUT}


def _mapped(stream: str, attrs: dict, scope: str = "bijotel.decorators") -> dict:
    body = h.export(h.span(attrs, span_id=os.urandom(8), trace_id=os.urandom(16)),
                    scope=scope, version="2.17.0")
    (capture,) = captures_in_traces(decode_traces(body, PROTOBUF), body, Streams(stream),
                                    "9.9.9").captures
    return capture


def _claims(output: str = h.ANSWER, seed: int | None = 7) -> dict:
    return record_replay_context(prompt=PROMPT, output=output, model="claude-haiku-4-5",
                                 seed=seed, temperature=0.0)


def test_verify_on_bijotels_basis(make_pipeline, kafka_bootstrap):
    p = make_pipeline()
    stream = f"bijotel-{uuid.uuid4().hex[:8]}:chat"
    attrs = {
        "content": {**CALL, **CONTENT, **_claims()},
        "no content": {**CALL, **_claims(seed=None)},
        "contradicted": {**CALL, **CONTENT, **_claims(output="what BIJOTEL was told")},
    }
    captures = {name: _mapped(stream, a) for name, a in attrs.items()}
    captures["gen_ai"] = _mapped(stream, h.GENAI, "opentelemetry.instrumentation.genai.openai")
    captures["wire"] = make_capture(stream)
    produce_captures(kafka_bootstrap, p.topics, captures.values())
    records = p.wait_records(stream, len(captures), timeout=60)
    seq = {name: next(r["seq"] for r in records if r["event_id"] == c["event_id"])
           for name, c in captures.items()}

    def verify(name: str, **body):
        return p.api.post("/replay/verify", json={"stream": stream, "seq": seq[name], **body})

    verdicts = {"content": "VERIFIED", "no content": "UNVERIFIABLE",
                "contradicted": "MISMATCHED"}
    for name, claim_verdict in verdicts.items():
        claimed = "what BIJOTEL was told" if name == "contradicted" else h.ANSWER
        for replayed in (claimed, claimed + "!"):
            r = verify(name, replayed_output=replayed, basis="bijotel")
            assert r.status_code == 200, r.text
            ours = r.json()
            theirs = verify_replay({"attributes": attrs[name]}, replayed).to_dict()
            assert ours["bijotel"] == {**theirs, "claim": "bijotel.replay.output_hash",
                                       "claim_verdict": claim_verdict}
            assert {k: ours[k] for k in ("match", "original_hash", "replay_hash", "reason")} \
                == {k: theirs[k] for k in ("match", "original_hash", "replay_hash", "reason")}
            assert (ours["compared"], ours["stream"], ours["seq"]) == (
                "bijotel.replay.output_hash", stream, seq[name])
            assert ours["match"] is (replayed == claimed)

    # By event id as well; the record's own basis is unchanged (and has no bijotel).
    by_event = p.api.post("/replay/verify", json={
        "event_id": captures["content"]["event_id"], "replayed_output": h.ANSWER,
        "basis": "bijotel"}).json()
    assert by_event["match"] is True and by_event["seq"] == seq["content"]
    own = verify("content", replayed_output=h.ANSWER).json()
    assert own["compared"] == "output_digest" and own["match"] is True and "bijotel" not in own
    assert verify("contradicted", replayed_output="what BIJOTEL was told",
                  basis="record").json()["match"] is False

    # No claim: a 422 that says what the record is, never a 5xx.
    for name, words in (("wire", "captured at the wire"),
                        ("gen_ai", "mapped from a gen_ai span")):
        r = verify(name, replayed_output=h.ANSWER, basis="bijotel")
        assert r.status_code == 422, r.text
        assert r.json()["error"] == "invalid_request" and words in r.json()["message"]
    r = verify("content", replayed_response_b64="YQ==", basis="bijotel")
    assert r.status_code == 422 and "give replayed_output" in r.json()["message"]
