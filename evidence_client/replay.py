"""Replay for services: HTTP clients whose transport answers from the evidence store.

    from evidence_client import Replayer

    replayer = Replayer(api_url="http://127.0.0.1:8000", api_key="...", log_key=".stack/log.vkey")
    client = openai.OpenAI(api_key="unused", http_client=replayer.http_client(), max_retries=0)
    client.chat.completions.create(...)   # the recorded response, byte for byte, verified

For each request the transport computes ``content_key`` over the exact request body, asks
``GET /replay/{content_key_hex}/bundle`` of the evidence API, verifies the answer and answers
with the verified record's response bytes and the recorded content type.

Verified by default. The API is not trusted: the bundle (``evidence_contract.bundle``) holds
the record's log message, the stream's signed checkpoint and the record's inclusion proof,
and the Replayer checks the record bytes -> leaf -> inclusion -> a checkpoint signed by the
log key it was given (``log_key=``: the key, its text or a file; the API's own key only with
``trust_on_first_use=True``) and cosigned by ``min_witnesses`` of ``witnesses=``, the record's
digests, that it is the record of this content key, and that the checkpoint is consistent
with the last one this Replayer verified for the stream (``LogVerifier``: a rollback or a
fork raises :class:`CheckpointRolledBack`), and with ``log_witnesses=`` that a deployment
checkpoint cosigned by ``min_log_witnesses`` of them covers the record (the bundle's ``log``
path, docs/witnessing.md). A failed check raises :class:`EvidenceTampered`
(an ``EvidenceUnverified``) and never returns the bytes. A record newer than the latest
checkpoint is asked for again until one covers it, for up to ``checkpoint_wait_s`` (then
``EvidenceUncovered``). With ``stream=`` a verified replay is one request (the bundle carries
the consistency proof from the size the Replayer last verified); without it, a second one
when the checkpoint has moved. A record on a stream the read side redacts is proved by its
leaf alone, and raises :class:`ReplayRedacted`: its masked bytes are not the recording.
``verify=False`` asks ``GET /replay/{content_key_hex}`` and takes the API's word. There is no path to the provider: the transport never opens a connection
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

Encrypted streams (``Replayer(..., key_store=store)``, the Recorder's ``content_policy=
"encrypt"``): a record's ``content_key`` is then a keyed commitment, so the transport takes
the call's subject (``call_context(subject=...)``, else the stream: ``stream()``'s, else the
Replayer's), asks the key store for that subject's keys and computes the keyed content key
with each live one, newest first, and opens the answer's ``response_bytes`` envelope with the
key (associated data: the ``Evidence-Stream`` and ``Evidence-Event-Id`` headers and the field
``response_bytes``). The application gets the plaintext bytes, as recorded. Replay never
creates a key: a subject the store has never seen is a miss.

Erased content raises :class:`ReplayErased` (a ``ReplayError``) with ``erased_at`` and the
erasure's ``request_id``: when the API answers 410 ``erased`` for the record, when the key
store says the key that sealed it was erased, and when none of the subject's live keys finds
a recording but the subject has erased keys, whose recordings nobody can look up any more
(the keyed content key needs the key); such a miss is reported as erased, since it may be.

Reading the API's answers (and the errors they mean) is ``replay_answer``; the key store's
keys by subject, cached, are ``replay_keys``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from evidence_contract import content_key

from .context import current_call, current_stream
from .errors import ConfigError, EvidenceUncovered, ReplayError
from .replay_answer import (
    ReplayErased,
    ReplayMiss,
    ReplayRedacted,
    bundle_doc,
    consistency_doc,
    unverified_response,
    verified_response,
)
from .replay_keys import Sealed, SubjectKeyRing
from .trust import LogVerifier

__all__ = ["ReplayErased", "ReplayError", "ReplayMiss", "ReplayRedacted", "Replayer"]


def _lookup(request: Any, body: bytes) -> tuple[str, str]:
    key_hex = content_key(body).hex()
    if not body:
        raise ReplayMiss(key_hex, request.method, str(request.url),
                         ": a request without a body has no content key of its own")
    return key_hex, f"/replay/{key_hex}"


class Replayer:
    """Clients that replay recorded responses from the evidence API.

    ``stream`` limits lookups to one stream (and is the default subject of an encrypted
    stream). ``key_store`` (an ``evidence_contract.keys.KeyStore``) replays encrypted
    streams: see the module docstring; a subject's key list is cached for ``key_cache_s``
    seconds, the keys themselves for the Replayer's life (a key never changes, it is only
    destroyed, and a destroyed key is found by the API or by the next listing).
    Construction does no I/O: the sync API client is created on first use (shared by every
    sync client, it is thread-safe) and let go in :meth:`close`; each async client owns its
    API client (see the module docstring).
    """

    def __init__(self, api_url: str, api_key: str, *, stream: str | None = None,
                 timeout: float = 10.0, key_store: Any = None, key_cache_s: float = 5.0,
                 log_key: Any = None, witnesses: Any = (), min_witnesses: int | None = None,
                 trust_on_first_use: bool = False, verify: bool = True,
                 checkpoint_wait_s: float = 15.0, state_file: Any = None,
                 log_witnesses: Any = None, min_log_witnesses: int | None = None):
        if key_store is not None:
            try:
                from evidence_contract import sealing  # noqa: F401 - needs the [encrypt] extra
            except ImportError as e:
                raise ConfigError("Replayer(key_store=...) needs the [encrypt] extra "
                                  "(the cryptography package)") from e
        if key_cache_s < 0:
            raise ConfigError(f"key_cache_s must be >= 0, not {key_cache_s!r}")
        if not checkpoint_wait_s >= 0:
            raise ConfigError(f"checkpoint_wait_s must be >= 0, not {checkpoint_wait_s!r}")
        self.api_url = api_url.rstrip("/")
        self.stream = stream
        self.key_store = key_store
        self.verifier = LogVerifier(log_key, witnesses=witnesses, min_witnesses=min_witnesses,
                                    trust_on_first_use=trust_on_first_use,
                                    state_file=state_file, log_witnesses=log_witnesses,
                                    min_log_witnesses=min_log_witnesses) if verify else None
        self._checkpoint_wait_s = checkpoint_wait_s
        self._keys = SubjectKeyRing(key_store, key_cache_s) if key_store is not None else None
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

    # -- encrypted streams ----------------------------------------------------------------
    def _subject(self) -> str:
        call = current_call()
        subject = (call.subject if call is not None and call.subject else None) \
            or current_stream() or self.stream
        if subject is None:
            raise ReplayError("replaying an encrypted stream needs the call's subject: "
                              "call_context(subject=...), stream(...) or Replayer(stream=...)")
        return subject

    def _plan(self, request: Any, body: bytes) -> tuple[Sealed | None, list[tuple[str, Any]]]:
        """What to ask the API: ``[(key_hex, SubjectKeys or None)]``, in order."""
        if self._keys is None:
            key_hex, _ = _lookup(request, body)
            return None, [(key_hex, None)]
        if not body:
            _lookup(request, body)  # raises the miss of a request without a body
        sealed = self._keys.sealed(self._subject())
        return sealed, [(keys.content_key(body).hex(), keys) for keys in sealed.live]

    # -- verified reads ----------------------------------------------------------------
    def _ask(self, key_hex: str, snapshot: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The path and parameters of the bundle for ``key_hex``: with the stream known, the
        size verified last for its origin, so the answer proves consistency from it."""
        params = dict(self._params)
        verifier = self.verifier
        if self.stream is not None and verifier is not None and verifier.log_key is not None:
            from evidence_contract.tlog import checkpoint_origin

            known = snapshot.get(checkpoint_origin(verifier.log_key.name, self.stream))
            if known is not None:
                params["known_size"] = known.size
        return f"/replay/{key_hex}/bundle", params

    def _wait(self, deadline: float, e: EvidenceUncovered) -> float:
        """Seconds to wait before asking again for a record no checkpoint covers yet."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise EvidenceUncovered(f"{e} (waited {self._checkpoint_wait_s:g} s: "
                                    f"checkpoint_wait_s)") from e
        return min(0.5, left)

    def _verified_fetch(self, request: Any, mod: Any, key_hex: str, keys: Any) -> Any:
        api = self._sync_client()
        verifier = self.verifier
        verifier.pin(lambda: self._get(api, "/log/key", {}).text)
        deadline = time.monotonic() + self._checkpoint_wait_s
        while True:
            snapshot = verifier.snapshot()
            path, params = self._ask(key_hex, snapshot)
            doc = bundle_doc(self._get(api, path, params), key_hex, request)
            want = verifier.wants_consistency(doc, snapshot)
            if want is not None:
                doc["consistency"] = consistency_doc(self._get(api, *_consistency_ask(want)))
            try:
                verified = verifier.check(doc, snapshot, content_key=bytes.fromhex(key_hex))
            except EvidenceUncovered as e:
                time.sleep(self._wait(deadline, e))
                continue
            return verified_response(mod, doc, verified, key_hex, request, keys)

    async def _averified_fetch(self, request: Any, mod: Any, api: Any, key_hex: str,
                               keys: Any) -> Any:
        import asyncio

        verifier = self.verifier
        if verifier.log_key is None:
            verifier.pin(lambda: self._get(self._sync_client(), "/log/key", {}).text)
        deadline = time.monotonic() + self._checkpoint_wait_s
        while True:
            snapshot = verifier.snapshot()
            path, params = self._ask(key_hex, snapshot)
            doc = bundle_doc(await self._aget(api, path, params), key_hex, request)
            want = verifier.wants_consistency(doc, snapshot)
            if want is not None:
                doc["consistency"] = consistency_doc(await self._aget(api, *_consistency_ask(want)))
            try:
                verified = verifier.check(doc, snapshot, content_key=bytes.fromhex(key_hex))
            except EvidenceUncovered as e:
                await asyncio.sleep(self._wait(deadline, e))
                continue
            return verified_response(mod, doc, verified, key_hex, request, keys)

    def _get(self, api: Any, path: str, params: dict[str, Any]) -> Any:
        try:
            return api.get(path, params=params)
        except Exception as e:  # noqa: BLE001 - any transport failure to the API
            raise ReplayError(f"evidence API at {self.api_url} unreachable: {e}") from e

    async def _aget(self, api: Any, path: str, params: dict[str, Any]) -> Any:
        try:
            return await api.get(path, params=params)
        except Exception as e:  # noqa: BLE001
            raise ReplayError(f"evidence API at {self.api_url} unreachable: {e}") from e

    # -- the transports' entry points ----------------------------------------------------
    def fetch(self, request: Any, mod: Any) -> Any:
        """The recorded answer to ``request`` as a ``mod.Response``, verified unless the
        Replayer was made with ``verify=False``; raises ReplayMiss (nothing recorded),
        ReplayErased (recorded, and erased), ReplayRedacted (withheld by the read side's
        redaction) or an EvidenceUnverified (it failed its check: never the bytes)."""
        body = request.read()
        sealed, plan = self._plan(request, body)
        for key_hex, keys in plan:
            try:
                if self.verifier is not None:
                    return self._verified_fetch(request, mod, key_hex, keys)
                answer = self._get(self._sync_client(), f"/replay/{key_hex}", self._params)
                return unverified_response(mod, answer, key_hex, request, keys)
            except ReplayMiss:
                if sealed is None:
                    raise
        assert sealed is not None  # without a key store the one lookup returned or raised
        raise sealed.miss(request, body)

    async def afetch(self, request: Any, mod: Any, api: Any) -> Any:
        body = await request.aread()
        # The key store is synchronous (files or a database round trip), as in the Recorder's
        # sender thread; a lookup is rare next to the API call, and cached.
        sealed, plan = self._plan(request, body)
        for key_hex, keys in plan:
            try:
                if self.verifier is not None:
                    return await self._averified_fetch(request, mod, api, key_hex, keys)
                answer = await self._aget(api, f"/replay/{key_hex}", self._params)
                return unverified_response(mod, answer, key_hex, request, keys)
            except ReplayMiss:
                if sealed is None:
                    raise
        assert sealed is not None  # without a key store the one lookup returned or raised
        raise sealed.miss(request, body)

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


def _consistency_ask(want: tuple[str, int, int]) -> tuple[str, dict[str, Any]]:
    stream, first, second = want
    return f"/streams/{stream}/proof/consistency", {"first": first, "second": second}


def _module(flavor: str) -> Any:
    if flavor == "httpx2":
        import httpx2

        return httpx2
    if flavor == "httpx":
        import httpx

        return httpx
    raise ValueError(f"unknown flavor {flavor!r}; expected httpx2 or httpx")
