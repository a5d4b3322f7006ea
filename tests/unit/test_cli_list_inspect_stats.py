"""The pure parts of `evidence inspect` (bodies shown safely, the projection compared with the
verified record) and `evidence stats` (percentiles, tokens from response bodies, groups)."""

from __future__ import annotations

import base64
import json

from cli.inspect import compare, render_body, safe_text
from cli.stats import percentiles, summarise, tokens_of

CHAT = "https://api.openai.com/v1/chat/completions"
MESSAGES = "https://api.anthropic.com/v1/messages"


def test_a_script_or_an_escape_is_shown_as_text_never_run():
    shown = render_body(b'<script>alert(1)</script>\x1b[2J\xe2\x80\xaeevil', "text/html", 1000)
    assert shown["kind"] == "text"
    assert shown["text"] == "<script>alert(1)</script>\\u{001b}[2J\\u{202e}evil"
    assert safe_text("a\tb\nc\x07") == "a\tb\nc\\u{0007}"


def test_json_is_pretty_printed_and_sse_shown_as_its_events():
    shown = render_body(b'{"a":[1,"\\u001b"]}', "application/json", 1000)
    # json escapes a control character itself: nothing raw reaches the terminal
    assert shown["kind"] == "json" and shown["text"] == '{\n  "a": [\n    1,\n    "\\u001b"\n  ]\n}'
    sse = render_body(b'data: {"x":1}\n\nevent: done\ndata: [DONE]\n\n', "text/event-stream", 1000)
    assert sse["kind"] == "sse" and sse["text"] == '[message] {"x": 1}\n[done] [DONE]'


def test_binary_is_a_hex_preview_and_long_text_is_cut():
    shown = render_body(bytes(range(250, 256)) + b"\xff" * 100, None, 30)
    assert shown["kind"] == "binary" and shown["bytes"] == 106
    assert shown["text"].startswith("fa fb fc fd fe ff ff") and "more bytes" in shown["text"]
    cut = render_body(b"x" * 50, "text/plain", 10)
    assert cut["text"] == "x" * 10 + "\n… (40 more characters)"
    assert render_body(None, None, 10) == {"kind": "none", "bytes": 0, "text": None}


def test_compare_names_every_field_the_projection_changed():
    decoded = {"body": {"stream": "s", "event_id": "e", "content_key": b"\x01", "outcome":
                        "COMMITTED", "model_id": "m", "response_model": None,
                        "fingerprint": "f", "response_digest": None, "output_digest": None,
                        "input_digest": None, "prompt_digest": None, "request_length": 3,
                        "response_length": None},
               "seal": {"seq": 2, "occurred_at": 7, "record_digest": b"\x02",
                        "prev_digest": b"\x03"}}
    served = {"stream": "s", "seq": 2, "event_id": "e", "occurred_at_us": 7,
              "record_digest": "02", "prev_digest": "03", "content_key": "01",
              "response_digest": None, "output_digest": None, "input_digest": None,
              "prompt_digest": None, "outcome": "COMMITTED", "model_id": "m",
              "response_model": None, "fingerprint": "f", "request_length": 3,
              "response_length": None}
    assert compare(served, decoded) == []
    assert compare({**served, "outcome": "FAILED", "model_id": "x"}, decoded) == [
        "outcome: served 'FAILED', sealed 'COMMITTED'", "model_id: served 'x', sealed 'm'"]


def test_percentiles_by_nearest_rank():
    assert percentiles([]) == {"counted": 0, "p50": None, "p90": None, "p99": None, "max": None}
    assert percentiles(range(1, 101)) == {"counted": 100, "p50": 50, "p90": 90, "p99": 99,
                                          "max": 100}
    assert percentiles([3, 1, 2]) == {"counted": 3, "p50": 2, "p90": 3, "p99": 3, "max": 3}


def record(stream="s", model="gpt-4o", outcome="COMMITTED", response=None, endpoint=CHAT,
           content="plain", streamed=False, at=1, duration=None):
    rec = {"stream": stream, "model_id": model, "response_model": None, "outcome": outcome,
           "content": content, "streamed": streamed, "provider": {"endpoint": endpoint},
           "occurred_at_us": at, "occurred_at": f"t{at}",
           "response_b64": None if response is None else base64.b64encode(response).decode()}
    if duration is not None:
        from tests.fixtures.log import make_body, seal_record

        body = make_body(stream, at, b"{}")
        body["capture"]["duration_us"] = duration
        rec["record_b64"] = base64.b64encode(seal_record(body, 1, b"\0" * 32, at).value).decode()
    return rec


def test_tokens_from_each_wire_format_and_why_not():
    chat = json.dumps({"choices": [], "usage": {"prompt_tokens": 5,
                                                "completion_tokens": 7}}).encode()
    assert tokens_of(record(response=chat)) == ("counted", {"input": 5, "output": 7})
    anthropic = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"m",'
                 b'"usage":{"input_tokens":4,"output_tokens":1}}}\n\n'
                 b'event: message_delta\ndata: {"type":"message_delta","delta":{},'
                 b'"usage":{"output_tokens":9}}\n\n')
    assert tokens_of(record(response=anthropic, endpoint=MESSAGES, streamed=True)) == (
        "counted", {"input": 4, "output": 9})
    assert tokens_of(record(response=b'{"choices":[]}')) == ("without_usage", None)
    assert tokens_of(record(response=chat, endpoint="https://x/v1/embeddings")) == (
        "without_usage", None)
    assert tokens_of(record(response=None)) == ("without_body", None)
    assert tokens_of(record(response=chat, content="encrypted")) == ("without_body", None)


def test_summarise_per_stream_and_model():
    chat = json.dumps({"usage": {"prompt_tokens": 10, "completion_tokens": 20}}).encode()
    found = [record("a", "m1", response=chat, at=3, duration=2000),
             record("a", "m2", outcome="FAILED", at=1, duration=4000),
             record("b", "m1", response=b"{}", at=2)]
    s = summarise(found)
    assert s["total"]["count"] == 3 and s["total"]["outcomes"] == {
        "COMMITTED": 2, "FAILED": 1, "UNKNOWN": 0}
    a = s["streams"]["a"]
    assert a["count"] == 2 and a["first_sealed"] == "t1" and a["last_sealed"] == "t3"
    assert a["latency_ms"] == {"counted": 2, "p50": 2.0, "p90": 4.0, "p99": 4.0, "max": 4.0}
    assert a["tokens"]["counted"] == 1 and a["tokens"]["without_body"] == 1
    assert a["tokens"]["input"]["p50"] == 10 and a["tokens"]["output"]["max"] == 20
    m1 = s["models"]["m1"]
    assert m1["count"] == 2 and m1["tokens"]["without_usage"] == 1
    assert m1["latency_ms"]["counted"] == 1
    assert sorted(s["models"]) == ["m1", "m2"]
