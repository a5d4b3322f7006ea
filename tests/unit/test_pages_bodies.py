"""api.pages.bodies and the templates that show them: text as text, JSON pretty-printed,
SSE as its events, binary as a hex preview, and never anything as HTML."""

from __future__ import annotations

import json

from api.pages.bodies import HEX_PREVIEW, TEXT_LIMIT, hex_rows, show, split_sse
from api.pages.web import templates

SCRIPT = "<script>alert('x')</script>"


def rendered(label: str, data: bytes | None, ctype: str | None) -> str:
    t = templates.from_string('{% from "_body.html" import body %}{{ body(l, b, "i") }}')
    return t.render(l=label, b=show(data, ctype))


def test_json_is_pretty_printed_in_its_key_order():
    b = show(b'{"b":1,"a":[1,2],"s":"\\u00e9"}', "application/json")
    assert b.kind == "json"
    assert b.text == json.dumps({"b": 1, "a": [1, 2], "s": "é"}, indent=2, ensure_ascii=False)


def test_json_without_a_content_type_is_recognised():
    assert show(b'[1, 2]', None).kind == "json"


def test_invalid_json_of_a_json_type_is_text_with_a_note():
    b = show(b'{"a": ', "application/json; charset=utf-8")
    assert (b.kind, b.text) == ("text", '{"a": ') and "not valid JSON" in b.note


def test_plain_text_is_text():
    b = show("héllo\nworld\t!".encode(), "text/plain")
    assert (b.kind, b.text, b.size) == ("text", "héllo\nworld\t!", 14)


def test_binary_is_a_hex_preview():
    data = bytes(range(256)) * 8
    b = show(data, "application/octet-stream")
    assert b.kind == "binary" and b.truncated
    assert len(b.rows) == HEX_PREVIEW // 16
    assert b.rows[0] == ("00000000", " ".join(f"{i:02x}" for i in range(16)), "." * 16)
    assert b.rows[2][2] == " !\"#$%&'()*+,-./"


def test_text_with_control_characters_is_binary():
    assert show(b"abc\x00def", "text/plain").kind == "binary"
    assert show(b"\xff\xfe", None).kind == "binary"


def test_hex_rows_of_a_short_tail():
    assert hex_rows(b"AB\n") == [("00000000", "41 42 0a", "AB.")]
    assert hex_rows(b"") == []


def test_no_body():
    assert show(None, "application/json").kind == "none"


def test_sse_splits_into_events_with_json_data_pretty():
    stream = (b'event: message_start\ndata: {"type":"message_start","n":1}\n\n'
              b': keep-alive\n\n'
              b'id: 7\ndata: line one\ndata: line two\n\n'
              b'data: [DONE]\n\n')
    b = show(stream, "text/event-stream; charset=utf-8")
    assert b.kind == "sse"
    first, comment, multi, done = b.events
    assert first.event == "message_start"
    assert json.loads(first.data) == {"type": "message_start", "n": 1} and "\n" in first.data
    assert comment.comments == ("keep-alive",) and comment.data == ""
    assert (multi.id, multi.data) == ("7", "line one\nline two")
    assert done.data == "[DONE]"


def test_sse_line_endings_and_an_unterminated_last_event():
    events = split_sse("data: a\r\n\r\ndata: b\rdata: c\r\rdata:d")
    assert [e.data for e in events] == ["a", "b\nc", "d"]


def test_sse_without_a_content_type_is_recognised():
    assert show(b"data: {}\n\n", None).kind == "sse"


def test_long_text_is_cut_and_says_so():
    b = show(b"x" * (TEXT_LIMIT + 10), "text/plain")
    assert b.truncated and len(b.text) == TEXT_LIMIT


def test_a_script_in_a_text_body_shows_as_text():
    html = rendered("Response", SCRIPT.encode(), "text/html")
    assert "<script>" not in html and "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html


def test_a_script_in_json_shows_as_text():
    html = rendered("Response", json.dumps({"content": SCRIPT}).encode(), "application/json")
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_a_script_in_an_sse_event_shows_as_text():
    html = rendered("Response", f"event: <b>x</b>\ndata: {SCRIPT}\n\n".encode(),
                    "text/event-stream")
    assert "<script>" not in html and "<b>" not in html and "&lt;script&gt;" in html


def test_a_script_in_a_binary_body_shows_as_dots_and_hex():
    html = rendered("Response", SCRIPT.encode() + b"\x00", None)
    assert "<script>" not in html and "&lt;script&gt;" in html and "3c 73 63" in html


def test_a_script_in_the_content_type_or_label_shows_as_text():
    html = rendered(SCRIPT, b"{}", SCRIPT)
    assert "<script>" not in html
