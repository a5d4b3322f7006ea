"""Replay for services: HTTP clients whose transport answers from the evidence store.

    from gateway import Replayer

    replayer = Replayer(api_url="http://127.0.0.1:8000", api_key="...")
    client = openai.OpenAI(api_key="unused", http_client=replayer.http_client(), max_retries=0)
    client.chat.completions.create(...)   # the recorded response, byte for byte

For each request the transport computes ``content_key`` over the exact request body, asks
``GET /replay/{content_key_hex}`` of the evidence API, and answers with the recorded bytes
and content type. There is no path to the provider: the transport never opens a connection
to the request's URL, it only talks to the evidence API. A request with no recording raises
:class:`ReplayMiss`; it is never forwarded.

SDKs wrap transport exceptions (openai and anthropic raise ``APIConnectionError`` with the
``ReplayMiss`` as ``__cause__``) and retry them: pass ``max_retries=0`` in replay mode.
"""

from __future__ import annotations

from typing import Any

from schemas import content_key

from .errors import GatewayError

__all__ = ["ReplayError", "ReplayMiss", "Replayer"]

# Headers of the evidence API's answer passed on to the application with the recorded bytes.
_PASS_HEADERS = ("content-type", "evidence-stream", "evidence-seq", "evidence-record-digest",
                 "evidence-content-key")


class ReplayError(GatewayError):
    """The evidence API could not answer a replay (unreachable, unauthorised, failing)."""


class ReplayMiss(ReplayError, LookupError):
    """No committed record has the request's content key: nothing to replay."""

    def __init__(self, key_hex: str, method: str, url: str):
        self.content_key = key_hex
        super().__init__(f"no recorded response for {method} {url} "
                         f"(content_key {key_hex}); replay never calls the provider")


def _lookup(request: Any, body: bytes) -> tuple[str, str]:
    key_hex = content_key(body).hex()
    return key_hex, f"/replay/{key_hex}"


def _answer(mod: Any, api_response: Any, key_hex: str, request: Any) -> Any:
    if api_response.status_code == 404:
        raise ReplayMiss(key_hex, request.method, str(request.url))
    if api_response.status_code != 200:
        raise ReplayError(f"evidence API answered {api_response.status_code} for "
                          f"/replay/{key_hex}: {api_response.text[:300]}")
    headers = [(k, v) for k, v in api_response.headers.items() if k.lower() in _PASS_HEADERS]
    return mod.Response(200, headers=headers, content=api_response.content, request=request)


class Replayer:
    """Clients that replay recorded responses from the evidence API.

    ``stream`` limits lookups to one stream. The API client is created on first use and let go
    in :meth:`close`.
    """

    def __init__(self, api_url: str, api_key: str, *, stream: str | None = None,
                 timeout: float = 10.0):
        self.api_url = api_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._params = {"stream": stream} if stream else {}
        self._timeout = timeout
        self._sync: Any = None
        self._async: Any = None

    # The API clients are plain httpx: they only ever reach api_url.
    def _sync_client(self) -> Any:
        if self._sync is None:
            import httpx

            self._sync = httpx.Client(base_url=self.api_url, headers=self._headers,
                                      timeout=self._timeout)
        return self._sync

    def _async_client(self) -> Any:
        if self._async is None:
            import httpx

            self._async = httpx.AsyncClient(base_url=self.api_url, headers=self._headers,
                                            timeout=self._timeout)
        return self._async

    def fetch(self, request: Any, mod: Any) -> Any:
        key_hex, path = _lookup(request, request.read())
        try:
            answer = self._sync_client().get(path, params=self._params)
        except Exception as e:  # noqa: BLE001 - any transport failure to the API
            raise ReplayError(f"evidence API at {self.api_url} unreachable: {e}") from e
        return _answer(mod, answer, key_hex, request)

    async def afetch(self, request: Any, mod: Any) -> Any:
        key_hex, path = _lookup(request, await request.aread())
        try:
            answer = await self._async_client().get(path, params=self._params)
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
            async def handle_async_request(self, request: Any) -> Any:
                return await replayer.afetch(request, mod)

        return AsyncReplayTransport()

    def http_client(self, *, flavor: str = "httpx2", **kwargs: Any) -> Any:
        """An ``httpx2.Client`` (or ``httpx.Client``) that replays instead of calling out."""
        return _module(flavor).Client(transport=self.transport(flavor), **kwargs)

    def async_http_client(self, *, flavor: str = "httpx2", **kwargs: Any) -> Any:
        return _module(flavor).AsyncClient(transport=self.async_transport(flavor), **kwargs)

    def close(self) -> None:
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    async def aclose(self) -> None:
        self.close()
        if self._async is not None:
            await self._async.aclose()
            self._async = None

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
