"""How the API is served: workers and backlog settings, the uvicorn configuration a spawned
worker receives, TCP_NODELAY on accepted connections, the request head's size bound (431
however the head arrives), and the bench's load generator."""

import asyncio
import json
import os
import pickle
import socket
import threading

import pytest

from api import Keyring, Settings
from api.config import MAX_DEFAULT_WORKERS, default_workers
from api.errors import ApiConfigError
from api.serving import HeadTimeoutProtocol, ServerConfig, _no_delay, uvicorn_config
from bench.loadgen import _read_response, drive, encode_request

KEY = "serving-0123456789abcdef0123456789abcdef"
ENV = {"EVIDENCE_DATABASE_URL": "postgresql://x@127.0.0.1/x", "EVIDENCE_API_KEY": KEY,
       "EVIDENCE_API_KEY_STREAMS": "*"}


def test_workers_default_to_the_usable_cores_and_can_be_set():
    # one per core by default: the workers share one /metrics registry (see api.metrics)
    assert Settings.from_env(ENV).workers == default_workers()
    assert 1 <= default_workers() <= MAX_DEFAULT_WORKERS  # what the bench runs
    assert default_workers() <= len(os.sched_getaffinity(0))
    assert Settings.from_env({**ENV, "EVIDENCE_API_WORKERS": "3"}).workers == 3
    assert Settings.from_env({**ENV, "EVIDENCE_API_BACKLOG": "64"}).backlog == 64
    with pytest.raises(ApiConfigError, match="EVIDENCE_API_WORKERS=0 must be at least 1"):
        Settings.from_env({**ENV, "EVIDENCE_API_WORKERS": "0"})


def test_a_worker_gets_the_bounds_and_can_be_spawned_with_them():
    settings = Settings("postgresql://x@127.0.0.1/x", Keyring([("k", KEY, ["*"])]),
                        header_timeout=3.0, keep_alive_timeout=4.0, max_header_bytes=4096,
                        backlog=77)
    config = uvicorn_config("api.app:app_from_env", settings, factory=True, workers=2,
                            json_logs=True, log_config=None)
    # uvicorn's workers are spawned: the config travels pickled, bounds and all.
    copy = pickle.loads(pickle.dumps(config))
    assert isinstance(copy, ServerConfig)
    assert (copy.header_timeout, copy.timeout_keep_alive, copy.h11_max_incomplete_event_size,
            copy.backlog, copy.workers, copy.json_logs) == (3.0, 4.0, 4096, 77, 2, True)
    assert copy.http is HeadTimeoutProtocol


class _Transport:
    def __init__(self, sock):
        self.sock = sock

    def get_extra_info(self, name):
        return self.sock if name == "socket" else None


def test_no_delay_is_set_on_a_connection_accepted_from_a_proto_0_listener():
    # What uvicorn's bind_socket makes, and asyncio then leaves Nagle on for.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert listener.proto == 0
        with socket.create_connection(listener.getsockname()):
            accepted, _ = listener.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
                _no_delay(_Transport(accepted))
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    _no_delay(_Transport(None))  # no socket (a test transport): nothing to do


async def _parse(data: bytes):
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return await _read_response(reader), await reader.read()


def test_loadgen_reads_whole_responses_and_nothing_more():
    ok = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-type: text/plain\r\n\r\nhello"
    assert asyncio.run(_parse(ok + b"NEXT")) == ((200, True), b"NEXT")
    chunked = (b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n")
    assert asyncio.run(_parse(chunked + b"NEXT")) == ((404, True), b"NEXT")
    close = b"HTTP/1.1 413 Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    assert asyncio.run(_parse(close)) == ((413, False), b"")


def test_loadgen_encodes_a_request_with_its_length():
    req = encode_request("POST", "/replay/verify", "h:1", {"Authorization": "Bearer k"}, b"{}")
    assert req == (b"POST /replay/verify HTTP/1.1\r\nHost: h:1\r\nAuthorization: Bearer k\r\n"
                   b"Content-Length: 2\r\n\r\n{}")


def test_loadgen_keeps_its_connections_alive_and_counts_failures():
    connections, requests = [], []

    async def handle(reader, writer):
        connections.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                requests.append(head)
                status = b"500 Oops" if b"/fail" in head else b"200 OK"
                writer.write(b"HTTP/1.1 " + status + b"\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    ready = threading.Event()
    state = {}

    def serve():
        async def main():
            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            state["port"] = server.sockets[0].getsockname()[1]
            state["stop"] = asyncio.get_running_loop().create_future()
            ready.set()
            async with server:
                await state["stop"]
        state["loop"] = asyncio.new_event_loop()
        state["loop"].run_until_complete(main())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        base = f"http://127.0.0.1:{state['port']}"
        good = [encode_request("GET", "/x", "h")]
        r = drive(base, good, 0.3, 4)
        assert r["n"] > 4 and r["errors"] == 0 and r["rps"] > 0
        assert len(connections) == 4  # one keep-alive connection per concurrent client
        assert r["failures"] == {}
        r = drive(base, [encode_request("GET", "/fail", "h")], 0.2, 2)
        assert r["n"] == r["errors"] > 0
        assert r["failures"] == {"500": r["errors"]}  # what they were, for the report
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set_result, None)
        thread.join(10)


def test_a_served_process_runs_with_the_services_collector_settings():
    import gc

    from server.runtime import GC_THRESHOLDS

    async def app(scope, receive, send):  # pragma: no cover - never called
        raise AssertionError

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        untuned = ServerConfig(app, header_timeout=1.0, log_config=None)
        untuned.load()  # a test serving the app in-process keeps its collector
        assert gc.get_threshold() == (700, 10, 10)
        tuned = ServerConfig(app, header_timeout=1.0, tune_gc=True, log_config=None)
        settings = Settings("postgresql://x@127.0.0.1/x", Keyring([("k", KEY, ["*"])]))
        spawned = uvicorn_config("api.app:app_from_env", settings, factory=True, workers=2,
                                 tune_gc=True, log_config=None)
        assert pickle.loads(pickle.dumps(spawned)).tune_gc  # what a spawned worker receives
        tuned.load()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


# -- the request head's size, however it arrives -----------------------------------------------
LIMIT = 16 << 10


@pytest.fixture(scope="module")
def tiny_server():
    """An app that answers 200 "ok" to anything, served as ``evidence api`` serves (a head
    bound of 16 KiB); yields its port."""
    import time

    import uvicorn

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    settings = Settings("postgresql://x@127.0.0.1/x", Keyring([("k", KEY, ["*"])]),
                        max_header_bytes=LIMIT, header_timeout=5.0)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn_config(app, settings, log_level="warning",
                                           access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(15)
    sock.close()


def _head(size: int, path: str = "/healthz") -> bytes:
    """A GET whose request line and headers, blank line included, are ``size`` bytes."""
    start, end = f"GET {path} HTTP/1.1\r\nhost: x\r\nx-pad: ".encode(), b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


def _exchange(port: int, pieces: list[bytes]) -> bytes:
    """Send ``pieces`` one write each, half-close, and read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for piece in pieces:
            s.sendall(piece)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def _split(data: bytes, n: int) -> list[bytes]:
    step = -(-len(data) // n)
    return [data[i:i + step] for i in range(0, len(data), step)]


@pytest.mark.parametrize("writes", [1, 4, 100])
def test_a_head_over_the_limit_is_431_however_it_arrives(tiny_server, writes):
    for size in (LIMIT + 1, 100_062, 200_000):
        out = _exchange(tiny_server, _split(_head(size), writes))
        assert out.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), out[:200]
        body = json.loads(out.split(b"\r\n\r\n", 1)[1])
        assert body["error"] == "too_large"
        assert f"over {LIMIT} bytes" in body["message"]
        assert "EVIDENCE_API_MAX_HEADER_BYTES" in body["message"]
        assert b"connection: close" in out.lower()


@pytest.mark.parametrize("writes", [1, 4])
def test_a_head_at_the_limit_is_served(tiny_server, writes):
    out = _exchange(tiny_server, _split(_head(LIMIT), writes))
    assert out.startswith(b"HTTP/1.1 200 ") and out.endswith(b"ok")


def test_a_long_head_behind_a_served_request_is_431_too(tiny_server):
    # pipelined in one write, and on a kept-alive connection after a first answer
    out = _exchange(tiny_server, [_head(200) + _head(100_000)])
    assert out.startswith(b"HTTP/1.1 200 ") and b"\r\n\r\nokHTTP/1.1 431 " in out
    with socket.create_connection(("127.0.0.1", tiny_server), timeout=30) as s:
        s.sendall(_head(200))
        first = b""
        while not first.endswith(b"ok"):
            first += s.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 ")
        s.sendall(_head(50_000))
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        assert out.startswith(b"HTTP/1.1 431 ")
