"""Verification on BIJOTEL's basis: a mapped record's ``bijotel.replay.output_hash`` claim,
compared as BIJOTEL's own ``verify_replay`` compares it, over records the writer sealed."""

from __future__ import annotations

import pytest
from bijotel.replay import record_replay_context, verify_replay

from api.verify import (
    BIJOTEL_OUTPUT_HASH, NoBijotelClaim, Original, verify, verify_bijotel,
)
from evidence_contract import encode, output_digest
from evidence_contract.chain import Head
from otlp import PROTOBUF, decode_traces
from otlp.capture import Streams, captures_in_traces
from tests.unit import otlp_harness as h
from writer.capture import Capture, seal_capture, validate

SCOPE = "bijotel.decorators"
PROMPT = [{"role": "user", "content": h.USER}]
# What BIJOTEL's trace_genai and its Anthropic extractors put on a span, without the claims.
CALL = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-haiku-4-5",
        "gen_ai.response.model": "claude-haiku-4-5-20251001"}
CONTENT = {"gen_ai.input.messages": h.json.dumps(PROMPT),
           "gen_ai.output.messages": h.OUTPUT}


def sealed(attrs: dict, scope: str = SCOPE) -> tuple[Original, dict]:
    """The span ``attrs`` exported under ``scope``, mapped, sealed by the writer as seq 1 of
    its stream: the record as the API reads it for a verify, and the span's attributes."""
    body = h.export(h.span(attrs), scope=scope, version="2.17.0")
    (capture,) = captures_in_traces(decode_traces(body, PROTOBUF), body, Streams(),
                                    "9.9.9").captures
    checked = validate(encode("CaptureEvent", capture), capture["stream"].encode(), 1 << 24)
    assert isinstance(checked, Capture), checked
    record, _ = seal_capture(checked, Head(checked.stream), 1_764_000_000_000_000,
                             {"writer_id": "w", "transactional_id": "t", "version": "1"},
                             0, 0)
    return Original(stream=checked.stream, seq=1, output_digest=capture["output_digest"],
                    deterministic=capture["replay"]["deterministic"],
                    model_version="claude-haiku-4-5-20251001", outcome="COMMITTED",
                    telemetry_record=record), attrs


def claims(output: str = h.ANSWER, seed: int | None = 7) -> dict:
    return record_replay_context(prompt=PROMPT, output=output, model="claude-haiku-4-5",
                                 seed=seed, temperature=0.0)


def bijotels(attrs: dict, replayed: str) -> dict:
    return verify_replay({"attributes": attrs}, replayed).to_dict()


@pytest.mark.parametrize("seed", [None, 7])
@pytest.mark.parametrize("content", [True, False])
@pytest.mark.parametrize("replayed", [h.ANSWER, h.ANSWER + " ", "something else", ""])
def test_answers_are_bijotels(seed, content, replayed):
    original, attrs = sealed({**CALL, **(CONTENT if content else {}), **claims(seed=seed)})
    r = verify_bijotel(original, replayed)
    theirs = bijotels(attrs, replayed)
    assert {k: v for k, v in r.bijotel.items() if k not in ("claim", "claim_verdict")} == theirs
    assert (r.match, r.original_hash, r.replay_hash, r.reason) == (
        theirs["match"], theirs["original_hash"], theirs["replay_hash"], theirs["reason"])
    assert r.compared == BIJOTEL_OUTPUT_HASH == r.bijotel["claim"]
    assert r.outcome == ("match" if replayed == h.ANSWER else "mismatch")
    assert r.to_dict()["bijotel"] == r.bijotel
    # the claim's verdict at mapping time: checked only when the span carried the output
    assert r.bijotel["claim_verdict"] == ("VERIFIED" if content else "UNVERIFIABLE")


def test_the_hash_has_no_prefix_unlike_the_records_own_digest():
    import hashlib

    original, _ = sealed({**CALL, **CONTENT, **claims()})
    ours = verify_bijotel(original, h.ANSWER)
    assert ours.replay_hash == hashlib.sha256(h.ANSWER.encode()).hexdigest()
    on_record = verify(original, replayed_output=h.ANSWER)
    assert on_record.match and on_record.replay_hash == output_digest(h.ANSWER).hex()
    assert on_record.replay_hash != ours.replay_hash


def test_a_claim_the_content_contradicts_is_said_so_and_still_compared_as_bijotel_does():
    original, attrs = sealed({**CALL, **CONTENT, **claims(output="not what was said")})
    r = verify_bijotel(original, "not what was said")
    assert r.match is True and r.bijotel["claim_verdict"] == "MISMATCHED"
    assert bijotels(attrs, "not what was said")["match"] is True
    # on the record's basis the replay is compared with what the span carried
    assert verify(original, replayed_output="not what was said").match is False


def test_the_record_keeps_its_own_deterministic_and_bijotel_its_claims():
    original, _ = sealed({**CALL, **CONTENT, **claims(seed=None),
                          "bijotel.replay.model_version": "a-checkpoint"})
    r = verify_bijotel(original, "other")
    assert (r.bijotel["deterministic"], r.bijotel["model_version"]) == (False, "a-checkpoint")
    assert r.model_version == "claude-haiku-4-5-20251001"
    assert "replay drift is expected" in r.reason


def test_a_wire_record_has_no_claim():
    with pytest.raises(NoBijotelClaim, match="captured at the wire.*omit basis"):
        verify_bijotel(Original(stream="acme:chat", seq=3, output_digest=output_digest("x")),
                       "x")


def test_a_mapped_record_of_another_dialect_has_no_claim():
    original, _ = sealed(h.GENAI, scope="opentelemetry.instrumentation.genai.openai")
    with pytest.raises(NoBijotelClaim, match=r"mapped from a gen_ai span .*made no BIJOTEL"):
        verify_bijotel(original, h.ANSWER)


def test_bijotel_claims_without_an_output_hash_are_what_bijotel_cannot_verify_either():
    attrs = {k: v for k, v in claims().items() if k != BIJOTEL_OUTPUT_HASH}
    original, attrs = sealed({**CALL, **CONTENT, **attrs})
    assert bijotels(attrs, h.ANSWER)["original_hash"] is None
    with pytest.raises(NoBijotelClaim, match="verify_replay cannot verify it either"):
        verify_bijotel(original, h.ANSWER)


def test_a_record_that_does_not_decode_is_an_answer_not_an_error():
    original, _ = sealed({**CALL, **CONTENT, **claims()})
    broken = Original(stream=original.stream, seq=1, telemetry_record=b"\xc3\x01" + b"x" * 40)
    r = verify_bijotel(broken, h.ANSWER)
    assert (r.match, r.outcome, r.stream, r.seq) == (False, "invalid", original.stream, 1)
    assert r.reason == "verification could not run: DecodeError"


def test_the_request_names_the_basis_and_it_needs_an_output_text():
    from pydantic import ValidationError

    from api.models import VerifyRequest

    record = {"stream": "acme:chat", "seq": 1}
    assert VerifyRequest(**record, replayed_output="x").basis is None
    assert VerifyRequest(**record, replayed_output="x", basis=None).basis is None
    assert VerifyRequest(**record, replayed_output="x", basis="bijotel").basis == "bijotel"
    with pytest.raises(ValidationError, match="basis bijotel compares an output text"):
        VerifyRequest(**record, replayed_response_b64="YQ==", basis="bijotel")
    with pytest.raises(ValidationError, match="basis"):
        VerifyRequest(**record, replayed_output="x", basis="langfuse")
