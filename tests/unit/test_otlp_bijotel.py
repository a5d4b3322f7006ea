"""BIJOTEL's claims recomputed from mapped content, and replay verdicts equal to its own."""

from __future__ import annotations

import json

import pytest
from bijotel.replay import record_replay_context, verify_replay
from opentelemetry.trace import SpanKind

from otlp import PROTOBUF, calls_in_traces, check_claims, decode_traces, verify_replay_claim
from otlp.bijotel import output_hash, prompt_hash
from tests.unit import otlp_harness as h


def _bijotel_span(tmp_path, *, prompt, output, seed=7, claimed_output=None, with_content=True):
    """A span as BIJOTEL users make one: its trace_genai extractors' attributes and
    record_replay_context's claims, sealed by BIJOTEL's HmacChainSpanProcessor."""
    from bijotel.decorators.extractors import extract_anthropic_response
    from bijotel.decorators.trace_genai import _set_request_attrs, _set_response_attrs
    from bijotel.processors.hmac_chain import HmacChainSpanProcessor
    import anthropic

    providers = h.Providers()
    providers.tracer_provider.add_span_processor(
        HmacChainSpanProcessor(db_path=tmp_path / "chain.db", secret_key=b"k" * 32))
    # trace_genai reads the global tracer provider; the same attributes, on our provider
    tracer = providers.tracer_provider.get_tracer("bijotel.decorators")
    response = anthropic.types.Message.model_validate(h.ANTHROPIC_MESSAGE)
    with tracer.start_as_current_span("bijotel.llm.call", kind=SpanKind.CLIENT) as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.provider.name", "anthropic")
        if with_content:
            _set_request_attrs(span, {"model": "claude-haiku-4-5",
                                      "messages": json.dumps(prompt, ensure_ascii=False)})
            _set_response_attrs(span, extract_anthropic_response(response))
        for key, value in record_replay_context(
                prompt=prompt, output=claimed_output or output, model="claude-haiku-4-5",
                seed=seed, temperature=0.0).items():
            span.set_attribute(key, value)
    (call,) = calls_in_traces(decode_traces(providers.telemetry().traces, PROTOBUF))
    return call, dict(providers.spans.get_finished_spans()[0].attributes)


PROMPT = [{"role": "user", "content": h.USER}]


def test_claims_verified(tmp_path):
    call, _ = _bijotel_span(tmp_path, prompt=PROMPT, output=h.ANSWER)
    assert (call.dialect, call.scope_name) == ("bijotel", "bijotel.decorators")
    assert call.output_text == h.ANSWER and call.bijotel.seed == "7"
    assert call.bijotel.deterministic is True and call.bijotel.model_version == "claude-haiku-4-5"
    assert check_claims(call).prompt == "verified" and check_claims(call).output == "verified"


def test_claims_mismatched(tmp_path):
    call, _ = _bijotel_span(tmp_path, prompt=PROMPT, output=h.ANSWER, claimed_output="other")
    assert check_claims(call).output == "mismatched" and check_claims(call).prompt == "verified"


def test_claims_unverifiable_without_content(tmp_path):
    call, _ = _bijotel_span(tmp_path, prompt=PROMPT, output=h.ANSWER, with_content=False)
    assert check_claims(call).prompt == "unverifiable"
    assert check_claims(call).output == "unverifiable"


def test_prompt_hash_is_bijotels():
    from bijotel.replay.recorder import _hash_prompt

    for prompt in (PROMPT, h.USER, [{"role": "user", "content": "é ü 中"}]):
        assert prompt_hash(prompt) == _hash_prompt(prompt)
    assert output_hash(h.ANSWER) == record_replay_context(
        prompt="p", output=h.ANSWER, model="m")["bijotel.replay.output_hash"]


@pytest.mark.parametrize("seed", [None, 7])
@pytest.mark.parametrize("replayed", [h.ANSWER, h.ANSWER + " ", "something else"])
def test_replay_verdicts_equal_bijotels(tmp_path, seed, replayed):
    call, attributes = _bijotel_span(tmp_path, prompt=PROMPT, output=h.ANSWER, seed=seed)
    theirs = verify_replay({"attributes": attributes}, replayed)
    ours = verify_replay_claim(call.bijotel, replayed)
    assert ours.__dict__ == theirs.to_dict()


def test_replay_without_claims_equals_bijotels():
    theirs = verify_replay({"attributes": {}}, h.ANSWER)
    assert verify_replay_claim(None, h.ANSWER).__dict__ == theirs.to_dict()
