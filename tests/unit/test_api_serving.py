"""How the API is served: workers and backlog settings, the uvicorn configuration a spawned
worker receives, TCP_NODELAY on accepted connections, and the bench's load generator."""

import asyncio
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
        r = drive(base, [encode_request("GET", "/fail", "h")], 0.2, 2)
        assert r["n"] == r["errors"] > 0
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
