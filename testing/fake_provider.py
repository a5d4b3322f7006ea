"""A fake model provider: a real HTTP/1.1 server on 127.0.0.1 speaking the OpenAI chat
completions and responses wire formats and Anthropic messages, streamed (SSE, chunked) or
not, and logging the exact request body it received and response body it sent.

It ships with the gateway so that ``evidence demo`` and the tests (``tests.fakes.provider``
re-exports it) run the official SDKs end to end without a provider account. It is not a
provider adapter: nothing in the capture or replay path imports it.

Behaviour is chosen by the requested model, so a test needs no server-side setup:

    "fail-429" / "fail-400"  a provider error with the format's JSON error body
    "slow"                   answers after ``slow_seconds`` (for client timeouts)
    "drip"                   a long stream with a pause between events (to close early)
    anything else            answers "echo: <last user text>"; the response's ``model`` is the
                             requested one plus "-2026-07-01"

Any other path answers 200 with a small JSON body.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

__all__ = ["FINGERPRINT", "RESPONSE_MODEL_SUFFIX", "FakeProvider", "Seen", "anthropic_body",
           "anthropic_events", "chat_body", "chat_events", "error_body", "output_text",
           "responses_events"]

FINGERPRINT = "fp_fake_2026"
RESPONSE_MODEL_SUFFIX = "-2026-07-01"


@dataclass
class Seen:
    """One exchange as the fake saw it: the bytes it read and the bytes it wrote."""

    method: str
    path: str
    headers: dict[str, str]
    request_body: bytes
    status: int
    response_body: bytes
    content_type: str
    finished: bool  # the whole response was written without the client going away


def output_text(model: str, body: dict[str, Any]) -> str:
    """The text the fake answers with, for a request ``body``."""
    text = ""
    for m in body.get("messages") or []:
        if m.get("role") == "user":
            c = m.get("content")
            text = c if isinstance(c, str) else "".join(p.get("text", "") for p in c)
    inp = body.get("input")
    if isinstance(inp, str):
        text = inp
    elif isinstance(inp, list):
        for m in inp:
            c = m.get("content")
            text = c if isinstance(c, str) else "".join(p.get("text", "") for p in c)
    if model == "drip":
        return "".join(f"w{i} " for i in range(200))
    return f"echo: {text} ✓"


def _pieces(text: str, size: int = 4) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else _dumps(data)
    return f"{head}data: {payload}\n\n".encode()


# -- wire formats -------------------------------------------------------------------------

def chat_body(model: str, text: str) -> dict[str, Any]:
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 1767225600,
            "model": model + RESPONSE_MODEL_SUFFIX, "system_fingerprint": FINGERPRINT,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text,
                                                 "refusal": None},
                         "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}}


def chat_events(model: str, text: str) -> Iterator[bytes]:
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1767225600,
            "model": model + RESPONSE_MODEL_SUFFIX, "system_fingerprint": FINGERPRINT}
    yield _sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                     "finish_reason": None}]})
    for p in _pieces(text):
        yield _sse({**base, "choices": [{"index": 0, "delta": {"content": p},
                                         "finish_reason": None}]})
    yield _sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    yield _sse("[DONE]")


def response_obj(model: str, text: str | None, status: str) -> dict[str, Any]:
    output = [] if text is None else [
        {"type": "message", "id": "msg_fake", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "text": text, "annotations": []}]}]
    return {"id": "resp_fake", "object": "response", "created_at": 1767225600, "status": status,
            "model": model + RESPONSE_MODEL_SUFFIX, "output": output, "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "error": None, "incomplete_details": None,
            "usage": {"input_tokens": 5, "output_tokens": 7, "total_tokens": 12,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}


def responses_events(model: str, text: str) -> Iterator[bytes]:
    seq = 0

    def ev(kind: str, **fields: Any) -> bytes:
        nonlocal seq
        seq += 1
        return _sse({"type": kind, "sequence_number": seq - 1, **fields}, event=kind)

    def item(status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {"type": "message", "id": "msg_fake", "status": status, "role": "assistant",
                "content": content}

    def part(t: str) -> dict[str, Any]:
        return {"type": "output_text", "text": t, "annotations": []}

    # The full event sequence: the SDKs' stream helpers need the item and part events.
    yield ev("response.created", response=response_obj(model, None, "in_progress"))
    yield ev("response.output_item.added", output_index=0, item=item("in_progress", []))
    yield ev("response.content_part.added", item_id="msg_fake", output_index=0,
             content_index=0, part=part(""))
    for p in _pieces(text):
        yield ev("response.output_text.delta", item_id="msg_fake", output_index=0,
                 content_index=0, delta=p)
    yield ev("response.output_text.done", item_id="msg_fake", output_index=0, content_index=0,
             text=text)
    yield ev("response.content_part.done", item_id="msg_fake", output_index=0,
             content_index=0, part=part(text))
    yield ev("response.output_item.done", output_index=0, item=item("completed", [part(text)]))
    yield ev("response.completed", response=response_obj(model, text, "completed"))


def anthropic_body(model: str, text: str) -> dict[str, Any]:
    return {"id": "msg_fake", "type": "message", "role": "assistant",
            "model": model + RESPONSE_MODEL_SUFFIX, "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 7}}


def anthropic_events(model: str, text: str) -> Iterator[bytes]:
    start = {**anthropic_body(model, ""), "content": [], "stop_reason": None,
             "usage": {"input_tokens": 5, "output_tokens": 1}}
    yield _sse({"type": "message_start", "message": start}, "message_start")
    yield _sse({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}, "content_block_start")
    yield _sse({"type": "ping"}, "ping")
    for p in _pieces(text):
        yield _sse({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": p}}, "content_block_delta")
    yield _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
    yield _sse({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 7}}, "message_delta")
    yield _sse({"type": "message_stop"}, "message_stop")


def error_body(kind: str, status: int) -> dict[str, Any]:
    if kind == "anthropic":
        t = "rate_limit_error" if status == 429 else "invalid_request_error"
        return {"type": "error", "error": {"type": t, "message": f"fake {status} error"}}
    code = "rate_limit_exceeded" if status == 429 else "invalid_request_error"
    return {"error": {"message": f"fake {status} error", "type": code, "param": None, "code": code}}


# -- server -------------------------------------------------------------------------------

class FakeProvider:
    """``with FakeProvider() as fake:`` serves on ``fake.url`` until the block ends."""

    def __init__(self, slow_seconds: float = 3.0, drip_seconds: float = 0.02) -> None:
        self.slow_seconds = slow_seconds
        self.drip_seconds = drip_seconds
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "FakeProvider is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeProvider":
        fake = self

        class Handler(_Handler):
            provider = fake

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-provider", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> "FakeProvider":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def wait_for(self, n: int, timeout: float = 10.0) -> list[Seen]:
        """The first ``n`` exchanges once that many have finished writing."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.seen) >= n:
                    return list(self.seen[:n])
            time.sleep(0.01)
        raise AssertionError(f"fake provider saw {len(self.seen)} exchanges, expected {n}")

    def by_request(self, body: bytes) -> Seen:
        with self._lock:
            matches = [s for s in self.seen if s.request_body == body]
        assert len(matches) == 1, f"{len(matches)} exchanges with that request body"
        return matches[0]


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: a burst of concurrent async calls overflows
    # it, and the kernel then drops or resets connections the clients believe are open.
    request_queue_size = 256


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # A response's head and body go out in two writes: with Nagle's algorithm on, the body
    # waited for the client's delayed ACK (~40 ms a call).
    disable_nagle_algorithm = True
    provider: FakeProvider

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        path = self.path.split("?")[0]
        try:
            req = json.loads(body)
        except ValueError:
            req = {}
        model = req.get("model", "") if isinstance(req, dict) else ""
        stream = bool(req.get("stream")) if isinstance(req, dict) else False
        if path.endswith("/chat/completions"):
            kind = "openai"
            whole = lambda t: chat_body(model, t)  # noqa: E731
            events = lambda t: chat_events(model, t)  # noqa: E731
        elif path.endswith("/responses"):
            kind = "openai"
            whole = lambda t: response_obj(model, t, "completed")  # noqa: E731
            events = lambda t: responses_events(model, t)  # noqa: E731
        elif path.endswith("/messages"):
            kind = "anthropic"
            whole = lambda t: anthropic_body(model, t)  # noqa: E731
            events = lambda t: anthropic_events(model, t)  # noqa: E731
        else:
            self._send_whole(body, 200, _dumps({"ok": True, "received": len(body)}).encode())
            return
        if model.startswith("fail-"):
            status = int(model.split("-")[1])
            self._send_whole(body, status, _dumps(error_body(kind, status)).encode())
            return
        if model == "slow":
            self.provider._stop.wait(self.provider.slow_seconds)
        text = output_text(model, req)
        if stream:
            self._send_stream(body, events(text), drip=self.provider.drip_seconds if model == "drip" else 0)
        else:
            self._send_whole(body, 200, _dumps(whole(text)).encode())

    def _record(self, body: bytes, status: int, sent: bytes, ctype: str, finished: bool) -> None:
        self.provider.record(Seen("POST", self.path, {k.lower(): v for k, v in self.headers.items()},
                                  body, status, sent, ctype, finished))

    def _send_whole(self, body: bytes, status: int, payload: bytes) -> None:
        ctype = "application/json"
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("x-request-id", "req_fake")
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
            finished = True
        except (BrokenPipeError, ConnectionResetError):
            finished = False
        self._record(body, status, payload, ctype, finished)

    def _send_stream(self, body: bytes, events: Iterator[bytes], drip: float) -> None:
        ctype = "text/event-stream; charset=utf-8"
        sent: list[bytes] = []
        finished = False
        try:
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            for ev in events:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                self.wfile.flush()
                sent.append(ev)
                if drip and self.provider._stop.wait(drip):
                    break
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            finished = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        self._record(body, 200, b"".join(sent), ctype, finished)
