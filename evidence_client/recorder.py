"""The Recorder: what a service embeds to capture its LLM calls into ``<prefix>.intake``.

    recorder = Recorder(bootstrap_servers="127.0.0.1:9092", stream="acme:support-bot")
    client = openai.OpenAI(http_client=recorder.http_client())
    other = openai.OpenAI(http_client=recorder.http_client(stream="acme:tenant-2"))
    with evidence_client.stream("acme:tenant-3"):      # per call, over the client's stream
        client.chat.completions.create(...)
    recorder.close()

One Recorder serves any number of streams with one producer and one sender thread: the
stream is chosen per call (an ``evidence_client.stream()`` block), per client
(``http_client(stream=...)``) or for the Recorder (``stream=``), innermost first.

This module is the front: the settings (:mod:`~evidence_client.settings`, one frozen object
validated once), the clients, and the lifecycle. Behind it, the rooms:

    journal    the write-ahead: group commit to the own spool from any thread (Durable)
    sender     the sender thread, the producer, committing what calls left to it
    tracking   the own spool and its captures until Kafka acknowledged them; degraded mode
    orphans    adopting and resending the spools of processes that ended
    encoder    a finished exchange to the bytes that are spooled and produced
    keycache   the subject keys of content_policy="encrypt"

Processes. Every Recorder has a spool directory of its own under the spool root
(``spool_dir``, default ``$EVIDENCE_SPOOL_DIR`` or ``~/.local/state/evidence-store/spool``), so
each worker of a multi-process server records with the default settings. The spool of a
process that ended with captures in it is an orphan: at start and every ``orphan_scan_s`` the
Recorder takes the lock of each orphan it finds (only one process can), resends it oldest
first, and deletes it. A Recorder that cannot start (spool root unusable, bad producer
config) raises :class:`RecorderUnavailable` at each call made through its clients, rather than
letting calls go unrecorded with a log line. A forked child (a pre-forking server that created
the Recorder in its master) starts afresh on its first call, with a spool of its own.

Durability and order. Every capture is written ahead (:mod:`~evidence_client.journal`):
appended to the Recorder's own spool and fsync'd (one fsync for every capture that finished
while the previous one ran: group commit), and only then produced. With
``durability="before_return"`` (the default) that happens before the call that made it returns
to the application (at most ``durable_timeout_ms``): a lone sync call writes its own capture on
its thread, an async call waits for the sender thread's write without blocking its loop. With
``durability="after_return"`` the call returns at once and the sender thread writes the capture
within ``unwaited_commit_ms`` (default 5: the captures no call waits for share an fsync): a
process killed in between loses it. ``group_commit_ms`` (default 0) makes a batch that found
company within that time of the last fsync wait for more. Kafka's
acknowledgement gives a capture up: the spool's delivered prefix is acknowledged at most every
100 ms. So a process killed at any moment has lost no capture of a call that returned (under
``before_return``): its spool is an orphan that a live Recorder adopts and resends (a capture
sent twice is absorbed by the writer, by event id). The spool is the one order of a
Recorder's captures, and every send follows it. A capture the disk refuses (full) is sent from
memory, its call waiting for Kafka's acknowledgement instead, and offered to the spool again
each time Kafka fails it (:mod:`~evidence_client.tracking`).

A direct delivery that fails with a retriable error, a full producer queue, or librdkafka
reporting all brokers down makes the Recorder *degraded*: new captures then wait on disk only,
and the oldest waiting ones are re-sent as one probe batch at a time, with backoff; when a
probe gets through, everything waiting is sent. Adopted orphans are resent first.

Errors Kafka will never accept are not retried (``producer.classify``): a capture the cluster
refuses as too large is truncated (bodies dropped, digests and lengths kept) and sent again;
one refused for any other permanent reason goes to ``<spool root>/undeliverable/`` with its
reason. Both are counted (``truncated``, ``undeliverable``) and logged with the event id.

``close()`` delivers what it can within ``close_timeout``, then purges the producer and
closes the spool: anything not acknowledged stays there, an orphan for the next Recorder on
the same spool root; an empty spool is removed.

Content policy. ``content_policy="plain"`` (the default) records content as it is, with
plain SHA-256 digests. ``content_policy="encrypt"`` with a ``key_store``
(``evidence_contract.keys.KeyStore``, e.g. ``evidence_client.keystore.FileKeyStore``) seals
every content field of every capture under its subject's data key (the call context's
``subject``, else the call's stream) on the sender thread, before the capture is written to
the spool or produced: the spool, the undeliverable folder and Kafka only ever hold
envelopes, and the record's digests are keyed commitments (``docs/erasure.md``). Keys are
cached per subject and stream for ``key_cache_s`` seconds and never past the end of the key's
epoch (``keycache``). A capture whose key the store cannot give is dropped and counted
(``failed``), never sent in the clear. Log lines never carry a plain content key then.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import queue
import threading
import weakref
from pathlib import Path
from typing import Any, Callable

from evidence_contract import now_micros

from .capture import VALUE, Exchange
from .context import current_stream
from .encoder import LIBRARY
from .errors import ConfigError, GatewayError, ProducerError, RecorderUnavailable, SpoolError
from .metrics import Metrics
from .otel import Spans
from .sender import Durable, Sender
from .settings import (
    AFTER_RETURN,
    BEFORE_RETURN,
    CONTENT_POLICIES,
    ENCRYPT,
    PLAIN,
    RecorderSettings,
    check_stream,
)
from .sizing import DEFAULT_MAX_VERBATIM_BYTES
from .transport import FLAVORS, transport_classes

__all__ = ["CONTENT_POLICIES", "ENCRYPT", "LIBRARY", "Durable", "Metrics", "PLAIN", "Recorder"]

log = logging.getLogger(__name__)

_SETTINGS = frozenset(f.name for f in dataclasses.fields(RecorderSettings)) | {"topic"}
_LIVE: "weakref.WeakSet[Recorder]" = weakref.WeakSet()


@atexit.register
def _close_live_recorders() -> None:
    for r in list(_LIVE):
        try:
            r.close()
        except Exception:  # noqa: BLE001
            log.exception("closing a Recorder at exit failed")


def _forget_in_child() -> None:
    # A forked child has no sender thread, and librdkafka handles do not survive fork. Drop
    # what was inherited without touching it (the parent still owns its spool and lock).
    for r in list(_LIVE):
        r._reset_after_fork()


os.register_at_fork(after_in_child=_forget_in_child)


class Recorder:
    """Captures LLM calls and sends them to ``<topic_prefix>.intake``.

    ``stream`` is the default stream of the calls (optional when every client or call names
    its own). ``tracer_provider`` (default: the global one) receives each call's span and
    ``api_url`` (default ``$EVIDENCE_API_URL``) is the evidence API the spans' record
    references name (:mod:`~evidence_client.otel`). Construction validates the arguments into :attr:`settings` (every setting is
    also readable as an attribute: ``recorder.stream``, ``recorder.topic``,
    ``recorder.spool_dir``...) and does no I/O; the producer, spool and sender thread start in
    :meth:`start` (or at the first captured call) and stop in :meth:`close`.
    """

    def __init__(
        self,
        bootstrap_servers: str | None = None,
        stream: str | None = None,
        *,
        topic_prefix: str | None = None,
        request_policy: str = VALUE,
        spool_dir: str | os.PathLike[str] | None = None,
        delivery_timeout_ms: int = 30_000,
        max_block_ms: int = 1_000,
        max_pending: int = 100_000,
        max_verbatim_bytes: int = DEFAULT_MAX_VERBATIM_BYTES,
        durable_timeout_ms: int = 5_000,
        durability: str = BEFORE_RETURN,
        group_commit_ms: float = 0.0,
        unwaited_commit_ms: float = 5.0,
        orphan_scan_s: float = 10.0,
        close_timeout: float = 30.0,
        producer_config: dict[str, Any] | None = None,
        host: str | None = None,
        content_policy: str = PLAIN,
        key_store: Any = None,
        key_cache_s: float = 60.0,
        key_clock: Callable[[], int] = now_micros,
        tracer_provider: Any = None,
        api_url: str | None = None,
    ) -> None:
        self.settings = RecorderSettings.from_arguments(
            bootstrap_servers, stream=stream, topic_prefix=topic_prefix,
            request_policy=request_policy, spool_dir=spool_dir,
            delivery_timeout_ms=delivery_timeout_ms, max_block_ms=max_block_ms,
            max_pending=max_pending, max_verbatim_bytes=max_verbatim_bytes,
            durable_timeout_ms=durable_timeout_ms, durability=durability,
            group_commit_ms=group_commit_ms, unwaited_commit_ms=unwaited_commit_ms,
            orphan_scan_s=orphan_scan_s, close_timeout=close_timeout,
            producer_config=producer_config, host=host, content_policy=content_policy,
            key_store=key_store, key_cache_s=key_cache_s, key_clock=key_clock,
            tracer_provider=tracer_provider, api_url=api_url)
        self.metrics = Metrics()
        self._spans = Spans(self.settings.tracer_provider, api_url=self.settings.api_url,
                            digests=self.settings.content_policy == PLAIN)
        self._sender = Sender(self.settings, self.metrics)
        self._after_return = self.settings.durability == AFTER_RETURN
        self._state_lock = threading.Lock()
        self._start_error: BaseException | None = None
        self._closed = False

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not attributes: the settings, read-only.
        if name in _SETTINGS and "settings" in self.__dict__:
            return getattr(self.settings, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SETTINGS:
            raise AttributeError(f"{name} is a setting, fixed at construction: give it to "
                                 f"Recorder(...)")
        super().__setattr__(name, value)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> "Recorder":
        """Create this process's spool, adopt orphaned ones, create the producer and start
        the sender thread (idempotent).

        Raises :class:`SpoolError` (the spool root cannot be used) or :class:`ProducerError`
        (bad producer config); the same error then makes every call through this Recorder's
        clients raise :class:`RecorderUnavailable`.
        """
        with self._state_lock:
            if self._closed:
                raise GatewayError("this Recorder is closed")
            if self._sender.thread is not None:
                return self
            if self._start_error is not None:
                raise self._start_error
            try:
                self._sender.start()
            except (SpoolError, ProducerError) as e:
                self._start_error = e
                log.critical("evidence Recorder cannot start, so calls through it will fail "
                             "with RecorderUnavailable: %s", e)
                raise
            _LIVE.add(self)
        return self

    def _reset_after_fork(self) -> None:
        self._state_lock = threading.Lock()
        self._sender = Sender(self.settings, self.metrics)

    def close(self, timeout: float | None = None) -> None:
        """Deliver what can be delivered within ``timeout`` (default ``close_timeout``) s;
        anything else stays in the spool for the next Recorder on this spool root."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        self._sender.stop(self.settings.close_timeout if timeout is None else timeout)
        _LIVE.discard(self)

    def __enter__(self) -> "Recorder":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def own_spool(self) -> Path | None:
        """This Recorder's spool directory (inside :attr:`spool_dir`), once started."""
        return self._sender.own_spool

    # -- clients ---------------------------------------------------------------------------

    def _transport(self, flavor: str, asynchronous: bool, inner: Any, stream: str | None) -> Any:
        if flavor not in FLAVORS:
            raise ConfigError(f"flavor must be one of {FLAVORS}, not {flavor!r}")
        check_stream(stream)
        sync_cls, async_cls = transport_classes(flavor)
        cls = async_cls if asynchronous else sync_cls
        if self._after_return:
            sink = self._submit_after_return
        elif asynchronous:  # its loop must not wait in an fsync: the sender writes
            sink = self._submit_awaited
        else:
            sink = self._submit_and_lead
        return cls(inner, stream, self.settings.request_policy, sink,
                   self._capture_error, self._begin_call, self._spans)

    def transport(self, inner: Any = None, *, flavor: str = "httpx2",
                  stream: str | None = None) -> Any:
        """A sync capture transport wrapping ``inner`` (default: a fresh HTTPTransport);
        its calls go to ``stream`` (default: the Recorder's)."""
        return self._transport(flavor, False, inner, stream)

    def async_transport(self, inner: Any = None, *, flavor: str = "httpx2",
                        stream: str | None = None) -> Any:
        """An async capture transport wrapping ``inner`` (default: AsyncHTTPTransport)."""
        return self._transport(flavor, True, inner, stream)

    def http_client(self, *, flavor: str = "httpx2", transport: Any = None,
                    stream: str | None = None, **kwargs: Any) -> Any:
        """An ``httpx2.Client`` (or ``httpx.Client`` for ``flavor="httpx"``) that captures
        into ``stream`` (default: the Recorder's; an ``evidence_client.stream()`` block wins).

        ``transport`` is the real transport to wrap; other kwargs go to the client, with
        ``follow_redirects=True`` by default as in the SDKs' own clients.
        """
        mod = _flavor_module(flavor)
        kwargs.setdefault("follow_redirects", True)
        return mod.Client(transport=self.transport(transport, flavor=flavor, stream=stream),
                          **kwargs)

    def async_http_client(self, *, flavor: str = "httpx2", transport: Any = None,
                          stream: str | None = None, **kwargs: Any) -> Any:
        """An ``httpx2.AsyncClient`` (or ``httpx.AsyncClient``) that captures."""
        mod = _flavor_module(flavor)
        kwargs.setdefault("follow_redirects", True)
        return mod.AsyncClient(
            transport=self.async_transport(transport, flavor=flavor, stream=stream), **kwargs)

    # -- application side ------------------------------------------------------------------

    def _begin_call(self, client_stream: str | None) -> str:
        """Before a call is sent: its stream, with the Recorder running (or a loud error)."""
        stream = current_stream() or client_stream or self.settings.stream
        if stream is None:
            raise ConfigError("this call has no stream: give Recorder(stream=...), "
                              "http_client(stream=...) or wrap it in evidence_client.stream()")
        if self._sender.thread is None:
            try:
                self.start()
            except GatewayError as e:
                raise RecorderUnavailable(
                    f"the evidence Recorder cannot start, so this call would go unrecorded: {e}"
                ) from e
        return stream

    def _capture_error(self, exc: BaseException) -> None:
        self.metrics.add("errors")
        log.error("capture failed; the application's call was not affected", exc_info=exc)

    def submit(self, exchange: Exchange) -> Durable:
        """Hand a finished exchange to be written ahead (by the sender thread) and sent.
        Never raises; waits at most ``max_block_ms`` when ``max_pending`` captures are
        already waiting. Returns the capture's :class:`Durable`: waiting on it returns once
        the capture is on disk. Until something waits on it, the capture may wait up to
        ``unwaited_commit_ms`` for others to share its fsync."""
        return self._submit(exchange, lead=False)

    def _submit_awaited(self, exchange: Exchange) -> Durable:
        """The async capture transports' sink under ``durability="before_return"``: the
        sender thread writes the capture, without delay (the call awaits it)."""
        return self._submit(exchange, lead=False, watched=True)

    def _submit_and_lead(self, exchange: Exchange) -> Durable:
        """The sync capture transports' sink under ``durability="before_return"``: the call
        waits for its capture anyway, so it writes it on its own thread when no other write
        is under way (no hand-off to the sender thread and back)."""
        return self._submit(exchange, lead=True, watched=True)

    def _submit_after_return(self, exchange: Exchange) -> None:
        """The capture transports' sink under ``durability="after_return"``: nothing to
        wait for."""
        self._submit(exchange, lead=False)

    def _submit(self, exchange: Exchange, *, lead: bool, watched: bool = False) -> Durable:
        durable = Durable(self.settings.durable_timeout_ms / 1000, self.metrics,
                          watched=watched, on_watch=self._sender.hurry)
        try:
            if self._sender.thread is None:
                self.start()
            if self._closed:
                raise GatewayError("Recorder is closed")
            self._sender.submit(exchange, durable, lead=lead)
        except queue.Full:
            self.metrics.add("failed")
            durable.set()
            log.error("capture dropped: %d captures already wait to be sent (max_pending); "
                      "content_key=%s", self.settings.max_pending,
                      self._sender.encoder.key_text(exchange))
        except Exception as e:  # noqa: BLE001 - includes a start() failure
            self.metrics.add("failed")
            durable.set()
            log.error("capture dropped (content_key=%s): %s",
                      self._sender.encoder.key_text(exchange), e)
        return durable


def _flavor_module(flavor: str) -> Any:
    if flavor == "httpx2":
        import httpx2

        return httpx2
    if flavor == "httpx":
        import httpx

        return httpx
    raise ConfigError(f"flavor must be one of {FLAVORS}, not {flavor!r}")
