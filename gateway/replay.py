"""Replay for services: HTTP clients whose transport answers from the evidence store.

    from evidence_client import Replayer

    replayer = Replayer(api_url="http://127.0.0.1:8000", api_key="...")
    client = openai.OpenAI(api_key="unused", http_client=replayer.http_client(), max_retries=0)
    client.chat.completions.create(...)   # the recorded response, byte for byte

For each request the transport computes ``content_key`` over the exact request body, asks
``GET /replay/{content_key_hex}`` of the evidence API, and answers with the recorded bytes
and content type. There is no path to the provider: the transport never opens a connection
to the request's URL, it only talks to the evidence API. A request with no recording raises
:class:`ReplayMiss`; it is never forwarded.

How a miss reaches the application depends on the SDK: the openai SDK (3.x) lets an
exception that is not an ``httpx2.RequestError`` through as it is, so the application sees
``ReplayMiss`` itself; the anthropic SDK (2.x) raises ``APIConnectionError`` with the
``ReplayMiss`` as ``__cause__``, and retries it. Catch both ways (walk ``__cause__``) and
pass ``max_retries=0`` in replay mode: a retry can only ask the evidence API again.

A request without a body (``GET /models``, ``GET /responses/{id}``) is a miss too: its
content key is the key of the empty body, shared by every such request, so it cannot name
one recording.

Each async client gets its own connection to the API, opened on first use in the event loop
that uses it and closed with the client (``await client.aclose()``, or the SDK's
``close()``), so a Replayer can serve several event loops one after another.
"""

from __future__ import annotations

import threading
from typing import Any

from evidence_contract import content_key

from .errors import GatewayError

__all__ = ["ReplayError", "ReplayMiss", "Replayer"]

# Headers of the evidence API's answer passed on to the application with the recorded bytes.
_PASS_HEADERS = ("content-type", "evidence-stream", "evidence-seq", "evidence-record-digest",
                 "evidence-content-key", "evidence-event-id")


class ReplayError(GatewayError):
    """The evidence API could not answer a replay (unreachable, unauthorised, failing)."""


class ReplayMiss(ReplayError, LookupError):
    """No committed record has the request's content key: nothing to replay."""

    def __init__(self, key_hex: str, method: str, url: str, why: str = ""):
        self.content_key = key_hex
        super().__init__(f"no recorded response for {method} {url} "
                         f"(content_key {key_hex}){why}; replay never calls the provider")


def _lookup(request: Any, body: bytes) -> tuple[str, str]:
    key_hex = content_key(body).hex()
    if not body:
        raise ReplayMiss(key_hex, request.method, str(request.url),
                         ": a request without a body has no content key of its own")
    return key_hex, f"/replay/{key_hex}"


def _is_miss(api_response: Any) -> bool:
    """A 404 with the evidence API's JSON ``not_found`` error; the 404 page of some other
    server (a wrong api_url) is a ReplayError instead."""
    try:
        return api_response.json().get("error") == "not_found"
    except (ValueError, AttributeError):
        return False


def _answer(mod: Any, api_response: Any, key_hex: str, request: Any) -> Any:
    if api_response.status_code == 404 and _is_miss(api_response):
        raise ReplayMiss(key_hex, request.method, str(request.url))
    if api_response.status_code != 200:
        raise ReplayError(f"evidence API at {api_response.url.copy_with(path='/')} answered "
                          f"{api_response.status_code} for /replay/{key_hex} (is api_url the "
                          f"evidence API, and is the key valid?): {api_response.text[:300]}")
    headers = [(k, v) for k, v in api_response.headers.items() if k.lower() in _PASS_HEADERS]
    return mod.Response(200, headers=headers, content=api_response.content, request=request)


class Replayer:
    """Clients that replay recorded responses from the evidence API.

    ``stream`` limits lookups to one stream. Construction does no I/O: the sync API client is
    created on first use (shared by every sync client, it is thread-safe) and let go in
    :meth:`close`; each async client owns its API client (see the module docstring).
    """

    def __init__(self, api_url: str, api_key: str, *, stream: str | None = None,
                 timeout: float = 10.0):
        self.api_url = api_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._params = {"stream": stream} if stream else {}
        self._timeout = timeout
        self._lock = threading.Lock()
        self._sync: Any = None

    # The API clients are plain httpx: they only ever reach api_url.
    def _sync_client(self) -> Any:
        with self._lock:
            if self._sync is None:
                import httpx

                self._sync = httpx.Client(base_url=self.api_url, headers=self._headers,
                                          timeout=self._timeout)
            return self._sync

    def _new_async_client(self) -> Any:
        import httpx

        return httpx.AsyncClient(base_url=self.api_url, headers=self._headers,
                                 timeout=self._timeout)

    def fetch(self, request: Any, mod: Any) -> Any:
        """The recorded answer to ``request`` as a ``mod.Response``; raises ReplayMiss."""
        key_hex, path = _lookup(request, request.read())
        try:
            answer = self._sync_client().get(path, params=self._params)
        except Exception as e:  # noqa: BLE001 - any transport failure to the API
            raise ReplayError(f"evidence API at {self.api_url} unreachable: {e}") from e
        return _answer(mod, answer, key_hex, request)

    async def afetch(self, request: Any, mod: Any, api: Any) -> Any:
        key_hex, path = _lookup(request, await request.aread())
        try:
            answer = await api.get(path, params=self._params)
        except Exception as e:  # noqa: BLE001
            raise ReplayError(f"evidence API at {self.api_url} unreachable: {e}") from e
        return _answer(mod, answer, key_hex, request)

    def transport(self, flavor: str = "httpx2") -> Any:
        mod = _module(flavor)
        replayer = self

        class ReplayTransport(mod.BaseTransport):  # type: ignore[name-defined,misc]
            def handle_request(self, request: Any) -> Any:
                return replayer.fetch(request, mod)

        return ReplayTransport()

    def async_transport(self, flavor: str = "httpx2") -> Any:
        mod = _module(flavor)
        replayer = self

        class AsyncReplayTransport(mod.AsyncBaseTransport):  # type: ignore[name-defined,misc]
            def __init__(self) -> None:
                self._api: Any = None

            async def handle_async_request(self, request: Any) -> Any:
                if self._api is None:
                    self._api = replayer._new_async_client()
                return await replayer.afetch(request, mod, self._api)

            async def aclose(self) -> None:
                api, self._api = self._api, None
                if api is not None:
                    await api.aclose()

        return AsyncReplayTransport()

    def http_client(self, *, flavor: str = "httpx2", **kwargs: Any) -> Any:
        """An ``httpx2.Client`` (or ``httpx.Client``) that replays instead of calling out."""
        return _module(flavor).Client(transport=self.transport(flavor), **kwargs)

    def async_http_client(self, *, flavor: str = "httpx2", **kwargs: Any) -> Any:
        """An ``httpx2.AsyncClient`` (or ``httpx.AsyncClient``); close it in its event loop."""
        return _module(flavor).AsyncClient(transport=self.async_transport(flavor), **kwargs)

    def close(self) -> None:
        with self._lock:
            sync, self._sync = self._sync, None
        if sync is not None:
            sync.close()

    async def aclose(self) -> None:
        """Close the shared sync API client; async clients close their own."""
        self.close()

    def __enter__(self) -> "Replayer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _module(flavor: str) -> Any:
    if flavor == "httpx2":
        import httpx2

        return httpx2
    if flavor == "httpx":
        import httpx

        return httpx
    raise ValueError(f"unknown flavor {flavor!r}; expected httpx2 or httpx")
