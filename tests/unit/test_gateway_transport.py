"""The capture transports in-process (MockTransport, no network, no Kafka): the application
sees the wrapped transport's response unchanged, the tee sees the same bytes, failures are
re-raised untouched and capture-side bugs never reach the application."""

from __future__ import annotations

import asyncio
import hashlib

import httpx
import httpx2
import pytest

from evidence_client import ConfigError, Recorder
from evidence_client.capture import VALUE
from evidence_client.transport import transport_classes

BODY = b'{"model":"m","messages":[]}'
URL = "https://api.openai.com/v1/chat/completions"


def sha(prefix: int, data: bytes) -> bytes:
    return hashlib.sha256(bytes([prefix]) + data).digest()


class Sink(list):
    def __call__(self, ex) -> None:
        self.append(ex)


def chunked(mod, parts: list[bytes], status: int = 200, ctype: str = "text/event-stream",
            asynchronous: bool = False):
    class Stream(mod.SyncByteStream):
        def __iter__(self):
            yield from parts

    class AStream(mod.AsyncByteStream):
        async def __aiter__(self):
            for p in parts:
                yield p

    def handler(request):
        stream = AStream() if asynchronous else Stream()
        return mod.Response(status, headers={"content-type": ctype, "x-id": "1"}, stream=stream)

    return handler


def wrap(mod_name: str, handler, sink, asynchronous: bool = False, errors=None):
    mod = {"httpx2": httpx2, "httpx": httpx}[mod_name]
    sync_cls, async_cls = transport_classes(mod_name)
    cls = async_cls if asynchronous else sync_cls
    on_error = errors.append if errors is not None else (lambda e: (_ for _ in ()).throw(e))
    t = cls(mod.MockTransport(handler), "s:1", VALUE, sink, on_error)
    return (mod.AsyncClient if asynchronous else mod.Client)(transport=t)


@pytest.mark.parametrize("flavor", ["httpx2", "httpx"])
def test_sync_response_is_unchanged_and_teed(flavor):
    mod = {"httpx2": httpx2, "httpx": httpx}[flavor]
    parts = [b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n"]
    sink = Sink()
    with wrap(flavor, chunked(mod, parts), sink) as client:
        with client.stream("POST", URL, content=BODY) as r:
            assert [c for c in r.iter_raw()] == parts
            assert r.status_code == 200 and r.headers["x-id"] == "1"
    [ex] = sink
    assert ex.content_key == sha(0, BODY) and ex.request_bytes == BODY
    assert ex.chunks == parts and ex.eof and not ex.closed_by_app and ex.streamed
    assert ex.status == 200 and ex.error is None and ex.finished_at >= ex.started_at


def test_async_response_is_unchanged_and_teed():
    parts = [b'{"a":', b"1}"]
    sink = Sink()

    async def run():
        async with wrap("httpx2", chunked(httpx2, parts, ctype="application/json", asynchronous=True), sink,
                        asynchronous=True) as client:
            return await client.post(URL, content=BODY)

    r = asyncio.run(run())
    assert r.content == b'{"a":1}' and r.json() == {"a": 1}
    [ex] = sink
    assert ex.chunks == parts and ex.eof and not ex.streamed


def test_closing_before_the_end_is_recorded_once():
    parts = [b"data: %d\n\n" % i for i in range(10)]
    sink = Sink()
    with wrap("httpx2", chunked(httpx2, parts), sink) as client:
        with client.stream("POST", URL, content=BODY) as r:
            it = r.iter_raw()
            next(it), next(it)
    [ex] = sink
    assert ex.closed_by_app and not ex.eof and ex.chunks == parts[:2]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_transport_failure_is_recorded_and_the_same_exception_reraised(asynchronous):
    boom = httpx2.ConnectError("connection refused")

    def handler(request):
        raise boom

    sink = Sink()
    client = wrap("httpx2", handler, sink, asynchronous=asynchronous)
    with pytest.raises(httpx2.ConnectError) as info:
        if asynchronous:
            asyncio.run(client.post(URL, content=BODY))
        else:
            client.post(URL, content=BODY)
    assert info.value is boom
    [ex] = sink
    assert ex.status is None and ex.error == "ConnectError: connection refused"
    assert ex.content_key == sha(0, BODY)


def test_an_error_mid_body_is_recorded_and_reraised():
    class Broken(httpx2.SyncByteStream):
        def __iter__(self):
            yield b"data: 1\n\n"
            raise httpx2.RemoteProtocolError("peer closed")

    sink = Sink()
    with wrap("httpx2", lambda r: httpx2.Response(200, stream=Broken()), sink) as client:
        with pytest.raises(httpx2.RemoteProtocolError):
            client.post(URL, content=BODY)
    [ex] = sink
    assert ex.chunks == [b"data: 1\n\n"] and "RemoteProtocolError" in ex.error


def test_a_failing_sink_never_breaks_the_call():
    def sink(ex):
        raise RuntimeError("gateway bug")

    errors: list[BaseException] = []
    with wrap("httpx2", chunked(httpx2, [b"ok"], ctype="text/plain"), sink, errors=errors) as client:
        assert client.post(URL, content=BODY).content == b"ok"
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)


@pytest.mark.parametrize("kwargs", [
    {"stream": "bad stream!"}, {"stream": ""}, {"stream": "x" * 129},
    {"stream": "s", "request_policy": "SOMETIMES"}, {"stream": "s", "max_block_ms": 0},
    {"stream": "s", "bootstrap_servers": ""},
])
def test_config_errors_are_raised_at_construction(kwargs, monkeypatch):
    monkeypatch.delenv("EVIDENCE_KAFKA_BOOTSTRAP", raising=False)
    kwargs.setdefault("bootstrap_servers", "127.0.0.1:1")
    with pytest.raises(ConfigError):
        Recorder(**kwargs)


def test_construction_does_no_io_and_the_clients_have_the_sdk_types(tmp_path, monkeypatch):
    monkeypatch.setenv("EVIDENCE_TOPIC_PREFIX", "acme")
    spool = tmp_path / "not-yet"
    r = Recorder("127.0.0.1:1", "acme:bot", spool_dir=spool)
    assert r.topic == "acme.intake"
    assert isinstance(r.http_client(), httpx2.Client)
    assert isinstance(r.async_http_client(), httpx2.AsyncClient)
    assert isinstance(r.http_client(flavor="httpx"), httpx.Client)
    assert isinstance(r.async_http_client(flavor="httpx"), httpx.AsyncClient)
    with pytest.raises(ConfigError):
        r.http_client(flavor="requests")
    assert not spool.exists()  # nothing opened, no thread, no producer
    r.close()
    assert r.closed


_URLS = [
    "http://127.0.0.1:8000/v1/chat/completions",
    "https://api.openai.com/v1/chat/completions?api-version=2024-01-01",
    "https://x.openai.azure.com/openai/deployments/gpt/chat/completions?api-version=1&a=b#frag",
    "http://user:p%40ss@h:1/p%3Fq/r?x=1#f?g",
    "http://[::1]:8080/a b?c=d",
    "https://h/p#only?frag",
    "https://h/?",
    "https://h/p?#",
    "https://éxample.com/päth?q=ü",
    "http://h/p;params?q",
]


@pytest.mark.parametrize("flavor", ["httpx2", "httpx"])
@pytest.mark.parametrize("text", _URLS)
def test_the_recorded_endpoint_is_the_url_without_its_query_as_httpx_makes_it(flavor, text):
    """What a capture records as its endpoint, from the URL's string form, is exactly what
    ``url.copy_with(query=None)`` makes of it (the fragment kept), for both flavors."""
    from evidence_client.transport import _endpoint

    mod = __import__(flavor)
    url = mod.URL(text)
    where, has_query = _endpoint(url)
    assert where == str(url.copy_with(query=None))
    assert has_query or not url.params  # no query: no api-version to look for
