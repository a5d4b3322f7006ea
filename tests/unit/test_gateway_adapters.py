"""Provider adapters: detection, params and replay context, output text per wire format."""

from __future__ import annotations

import json

import pytest

from evidence_client import adapters
from evidence_client.adapters import ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_RESPONSES
from tests.fakes.provider import (
    anthropic_body,
    anthropic_events,
    chat_body,
    chat_events,
    responses_events,
    response_obj as _response_obj,
)


@pytest.mark.parametrize("host, path, headers, query, expected", [
    ("api.openai.com", "/v1/chat/completions", {}, {}, ("openai", OPENAI_CHAT, "v1")),
    ("api.openai.com", "/v1/responses", {}, {}, ("openai", OPENAI_RESPONSES, "v1")),
    ("api.anthropic.com", "/v1/messages", {"anthropic-version": "2023-06-01"}, {},
     ("anthropic", ANTHROPIC_MESSAGES, "2023-06-01")),
    ("res.openai.azure.com", "/openai/deployments/d/chat/completions", {},
     {"api-version": "2024-10-21"}, ("azure-openai", OPENAI_CHAT, "2024-10-21")),
    ("127.0.0.1", "/v1/chat/completions/", {}, {}, ("openai-compatible", OPENAI_CHAT, "v1")),
    ("localhost", "/messages", {}, {}, ("anthropic-compatible", ANTHROPIC_MESSAGES, None)),
    ("api.openai.com", "/v1/embeddings", {}, {}, ("openai", None, "v1")),
    ("example.com", "/generate", {}, {}, ("unknown", None, None)),
    ("api.anthropic.com", "/v1/messages/count_tokens", {}, {}, ("anthropic", None, "v1")),
])
def test_detect(host, path, headers, query, expected):
    r = adapters.detect(host, path, headers, query)
    assert (r.provider, r.kind, r.api_version) == expected


def test_detect_answers_each_request_by_its_own_headers_when_it_remembers_an_endpoint():
    """An endpoint's route is worked out once; the version a header or query gives is still
    read from each request."""
    host, path = "api.anthropic.com", "/v1/messages"
    assert adapters.detect(host, path, {"anthropic-version": "2023-06-01"}).api_version == "2023-06-01"
    assert adapters.detect(host, path, {}).api_version == "v1"
    assert adapters.detect(host, path, {"anthropic-version": "2024-01-01"}).api_version == "2024-01-01"
    assert adapters.detect("API.Anthropic.COM", path + "/", None).provider == "anthropic"


def test_params_drop_only_the_prompt_and_keep_the_order_sent():
    body = b'{"model":"m","messages":[{"role":"user","content":"x"}],"seed":3,"top_p":1,"temperature":0}'
    f = adapters.parse_request(OPENAI_CHAT, body)
    assert f.model_id == "m"
    assert f.params == '{"model":"m","seed":3,"top_p":1,"temperature":0}'
    assert (f.seed, f.temperature, f.top_p) == ("3", 0.0, 1.0)

    f = adapters.parse_request(ANTHROPIC_MESSAGES,
                               b'{"model":"c","system":"s","messages":[],"max_tokens":9}')
    assert json.loads(f.params) == {"model": "c", "max_tokens": 9}
    assert f.seed is None

    f = adapters.parse_request(OPENAI_RESPONSES,
                               b'{"model":"r","input":"i","instructions":"s","store":false}')
    assert json.loads(f.params) == {"model": "r", "store": False}


@pytest.mark.parametrize("body", [b"", b"not json", b"[1,2]", b'"str"', b"\xff\xfe"])
def test_unreadable_requests_give_nulls(body):
    assert adapters.parse_request(OPENAI_CHAT, body) == adapters.RequestFacts()


def test_replay_values_of_the_wrong_type_are_not_taken():
    f = adapters.parse_request(OPENAI_CHAT, b'{"seed":true,"temperature":"0.5","top_p":null}')
    assert (f.seed, f.temperature, f.top_p) == (None, None, None)
    assert adapters.parse_request(OPENAI_CHAT, b'{"seed":1.5}').seed is None
    assert adapters.parse_request(OPENAI_CHAT, b'{"seed":false}').seed is None
    assert adapters.parse_request(OPENAI_CHAT, b'{"seed":"7"}').seed is None


@pytest.mark.parametrize("seed", ["0", "-1", "9223372036854775807", "9223372036854775808",
                                  "18446744073709551616", "-9223372036854775809", "1" * 300])
def test_an_integer_seed_of_any_size_is_kept_as_decimal_text(seed):
    f = adapters.parse_request(OPENAI_CHAT, b'{"model":"m","seed":%s}' % seed.encode())
    assert f.seed == seed
    assert json.loads(f.params)["seed"] == int(seed)


def _bytes(obj) -> bytes:
    return json.dumps(obj).encode()


def test_output_text_of_whole_responses():
    r = adapters.parse_response(OPENAI_CHAT, _bytes(chat_body("m", "hi there")), streamed=False)
    assert r == adapters.ResponseFacts("fp_fake_2026", "m-2026-07-01", "hi there")
    r = adapters.parse_response(OPENAI_RESPONSES, _bytes(_response_obj("m", "yo", "completed")), False)
    assert r == adapters.ResponseFacts(None, "m-2026-07-01", "yo")
    r = adapters.parse_response(ANTHROPIC_MESSAGES, _bytes(anthropic_body("c", "ok")), False)
    assert r == adapters.ResponseFacts(None, "c-2026-07-01", "ok")


def test_output_text_of_streams_is_the_concatenated_deltas():
    text = "a longer reply ✓ with unicode"
    for kind, events in [(OPENAI_CHAT, chat_events), (OPENAI_RESPONSES, responses_events),
                         (ANTHROPIC_MESSAGES, anthropic_events)]:
        body = b"".join(events("m", text))
        r = adapters.parse_response(kind, body, streamed=True)
        assert r.output_text == text, kind
        assert r.response_model == "m-2026-07-01", kind
        assert adapters.stream_complete(kind, body), kind
        # Cut before the final event: not complete.
        assert not adapters.stream_complete(kind, body[: len(body) - 20]), kind


def test_chat_output_takes_choice_zero_and_no_text_is_null():
    body = {"choices": [{"index": 1, "message": {"content": "other"}},
                        {"index": 0, "message": {"content": "zero"}}]}
    assert adapters.parse_response(OPENAI_CHAT, _bytes(body), False).output_text == "zero"
    tool_only = {"choices": [{"index": 0, "message": {"content": None, "tool_calls": []}}]}
    assert adapters.parse_response(OPENAI_CHAT, _bytes(tool_only), False).output_text is None


def test_sse_parser_handles_crlf_comments_multiline_and_a_torn_tail():
    raw = b": keepalive\r\nevent: a\r\ndata: 1\r\ndata: 2\r\n\r\ndata: x\n\ndata: torn"
    assert list(adapters.parse_sse(raw)) == [("a", "1\n2"), (None, "x")]


def test_unknown_kind_or_garbage_gives_nulls():
    assert adapters.parse_response(None, b'{"model":"x"}', False) == adapters.ResponseFacts()
    assert adapters.parse_response(OPENAI_CHAT, b"<html>", False) == adapters.ResponseFacts()
    assert adapters.parse_response(OPENAI_CHAT, b"data: {bad\n\n", True) == adapters.ResponseFacts()
    assert adapters.stream_complete(None, b"data: [DONE]\n\n") is False
