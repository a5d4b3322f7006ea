"""The Recorder: what a service embeds to capture its LLM calls into ``<prefix>.intake``.

    recorder = Recorder(bootstrap_servers="127.0.0.1:9092", stream="acme:support-bot")
    client = openai.OpenAI(http_client=recorder.http_client())
    ...
    recorder.close()

Threads. The application's threads only build an :class:`Exchange` and put it on a bounded
in-memory queue (``max_pending``; a full queue waits at most ``max_block_ms``). One sender
thread owns everything else: it builds and encodes the CaptureEvent, produces it, runs the
producer's delivery callbacks (``poll``) and drains the spool. Keeping all delivery state on
that one thread is what makes the ordering argument below simple.

Routing and order. Normally a capture is produced straight to Kafka ("direct"). The recorder
becomes *degraded* when a direct delivery fails, the producer's queue is full, or librdkafka
reports all brokers down. While degraded, new captures go to the spool, in order, except that
while direct messages are still in flight they wait in memory (``held``): a direct message
that later fails is appended to the spool when its callback runs, and it must land before
anything captured after it. Callbacks of one partition arrive in produce order (idempotent
producer), so when the in-flight count reaches zero the spool holds every failed direct
message in order and ``held`` is appended after them. The spool is then resent oldest first,
one batch at a time; an entry is acknowledged (given up) only after Kafka acknowledged it.
When the spool is empty the recorder goes back to direct. A capture from an earlier Recorder
left in the same ``spool_dir`` is therefore sent before any new one.

``close()`` delivers what it can within ``close_timeout``, then purges the producer (failed
direct messages go to the spool), appends ``held``, and closes the spool: anything not
acknowledged stays there for the next Recorder with the same ``spool_dir``.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
import weakref
from importlib.metadata import version
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evidence_contract import encode, new_event_id, valid_stream_id
from evidence_contract.topics import TopicNames

from .capture import HASH_ONLY, VALUE, Exchange, build_event
from .errors import ConfigError, GatewayError, ProducerError, SpoolError
from .producer import IntakeProducer
from .spool import Spool
from .transport import FLAVORS, transport_classes

__all__ = ["LIBRARY", "Metrics", "Recorder"]

log = logging.getLogger(__name__)


LIBRARY = f"evidence-store-client/{version('evidence-store-client')}"
"""``capture.library`` of every record this gateway makes."""

_RESEND_BATCH = 500
_BACKOFF_MIN, _BACKOFF_MAX = 0.2, 5.0
_LIVE: "weakref.WeakSet[Recorder]" = weakref.WeakSet()


@atexit.register
def _close_live_recorders() -> None:
    for r in list(_LIVE):
        try:
            r.close()
        except Exception:  # noqa: BLE001
            log.exception("closing a Recorder at exit failed")


@dataclass
class Metrics:
    """Counters of one Recorder. ``captured`` counts calls whose CaptureEvent was built;
    each then ends up ``delivered`` (direct), ``spooled`` (and later ``resent``), or
    ``failed`` (logged with its event id). ``errors`` counts capture-side bugs/failures
    that were kept away from the application; ``pending`` is the spool's length."""

    captured: int = 0
    delivered: int = 0
    spooled: int = 0
    resent: int = 0
    failed: int = 0
    errors: int = 0
    pending: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {k: getattr(self, k) for k in
                    ("captured", "delivered", "spooled", "resent", "failed", "errors", "pending")}


@dataclass
class _Entry:
    event_id: str
    key: bytes
    value: bytes


def _default_spool_dir(stream: str) -> Path:
    base = os.environ.get("EVIDENCE_SPOOL_DIR")
    root = Path(base) if base else Path.home() / ".local" / "state" / "evidence-store" / "spool"
    return root / stream  # stream ids are [A-Za-z0-9._:-]: safe as one path component


class Recorder:
    """Captures the LLM calls of one stream and sends them to ``<topic_prefix>.intake``.

    Construction validates the arguments and does no I/O; the producer, spool and sender
    thread start in :meth:`start` (or on the first captured call) and stop in :meth:`close`.
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
        close_timeout: float = 30.0,
        producer_config: dict[str, Any] | None = None,
        host: str | None = None,
    ) -> None:
        bootstrap = bootstrap_servers or os.environ.get("EVIDENCE_KAFKA_BOOTSTRAP")
        if not bootstrap:
            raise ConfigError("bootstrap_servers is required (or set EVIDENCE_KAFKA_BOOTSTRAP)")
        if not valid_stream_id(stream):
            raise ConfigError(f"stream {stream!r} is not a stream id ([A-Za-z0-9._:-]{{1,128}})")
        policy = getattr(request_policy, "value", request_policy)
        if policy not in (VALUE, HASH_ONLY):
            raise ConfigError(f"request_policy must be {VALUE!r} or {HASH_ONLY!r}, not {policy!r}")
        prefix = topic_prefix or os.environ.get("EVIDENCE_TOPIC_PREFIX") or "evidence"
        for name, value in (("delivery_timeout_ms", delivery_timeout_ms),
                            ("max_block_ms", max_block_ms), ("max_pending", max_pending)):
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive int, not {value!r}")
        if close_timeout < 0:
            raise ConfigError("close_timeout must be >= 0")
        self.stream: str = stream  # type: ignore[assignment]
        self.request_policy: str = policy
        self.topic: str = TopicNames(prefix).intake
        self.spool_dir = Path(spool_dir) if spool_dir is not None else _default_spool_dir(self.stream)
        self.bootstrap_servers = bootstrap
        self.host = host
        self.max_block_ms = max_block_ms
        self.close_timeout = close_timeout
        self._close_timeout = close_timeout  # what the running close() was given
        self.metrics = Metrics()
        self._producer = IntakeProducer(bootstrap, delivery_timeout_ms=delivery_timeout_ms,
                                        config=producer_config)
        self._spool = Spool(self.spool_dir)
        self._queue: queue.Queue[Exchange] = queue.Queue(max_pending)
        self._state_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._closed = False
        # Owned by the sender thread only:
        self._degraded = False
        self._inflight = 0
        self._held: deque[_Entry] = deque()
        self._resend: tuple[list[Any], list[ProducerError | bool | None]] | None = None
        self._backoff = _BACKOFF_MIN
        self._next_resend = 0.0

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> "Recorder":
        """Open the spool, create the producer and start the sender thread (idempotent).

        Raises :class:`SpoolError` (e.g. the spool directory is in use) or
        :class:`ProducerError` (bad producer config).
        """
        with self._state_lock:
            if self._closed:
                raise GatewayError("this Recorder is closed")
            if self._thread is not None:
                return self
            self._spool.open()
            try:
                self._producer.start()
            except BaseException:
                self._spool.close()
                raise
            self._degraded = len(self._spool) > 0  # an earlier Recorder's captures go first
            self.metrics.pending = len(self._spool)
            self._thread = threading.Thread(target=self._run, name=f"evidence-gateway[{self.stream}]",
                                            daemon=True)
            self._thread.start()
            _LIVE.add(self)
        return self

    def close(self, timeout: float | None = None) -> None:
        """Deliver what can be delivered within ``timeout`` (default ``close_timeout``) s;
        anything else stays in the spool for the next Recorder with this ``spool_dir``."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is None:
            return
        self._close_timeout = self.close_timeout if timeout is None else timeout
        self._stopping.set()
        thread.join(self._close_timeout + 30)
        if thread.is_alive():
            log.error("gateway sender thread did not stop; %d captures may be in memory only",
                      self._queue.qsize() + len(self._held) + self._inflight)
        _LIVE.discard(self)

    def __enter__(self) -> "Recorder":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- clients ---------------------------------------------------------------------------

    def _transport(self, flavor: str, asynchronous: bool, inner: Any) -> Any:
        if flavor not in FLAVORS:
            raise ConfigError(f"flavor must be one of {FLAVORS}, not {flavor!r}")
        sync_cls, async_cls = transport_classes(flavor)
        cls = async_cls if asynchronous else sync_cls
        return cls(inner, self.stream, self.request_policy, self.submit, self._capture_error)

    def transport(self, inner: Any = None, *, flavor: str = "httpx2") -> Any:
        """A sync capture transport wrapping ``inner`` (default: a fresh HTTPTransport)."""
        return self._transport(flavor, False, inner)

    def async_transport(self, inner: Any = None, *, flavor: str = "httpx2") -> Any:
        """An async capture transport wrapping ``inner`` (default: AsyncHTTPTransport)."""
        return self._transport(flavor, True, inner)

    def http_client(self, *, flavor: str = "httpx2", transport: Any = None, **kwargs: Any) -> Any:
        """An ``httpx2.Client`` (or ``httpx.Client`` for ``flavor="httpx"``) that captures.

        ``transport`` is the real transport to wrap; other kwargs go to the client, with
        ``follow_redirects=True`` by default as in the SDKs' own clients.
        """
        mod = _flavor_module(flavor)
        kwargs.setdefault("follow_redirects", True)
        return mod.Client(transport=self.transport(transport, flavor=flavor), **kwargs)

    def async_http_client(self, *, flavor: str = "httpx2", transport: Any = None,
                          **kwargs: Any) -> Any:
        """An ``httpx2.AsyncClient`` (or ``httpx.AsyncClient``) that captures."""
        mod = _flavor_module(flavor)
        kwargs.setdefault("follow_redirects", True)
        return mod.AsyncClient(transport=self.async_transport(transport, flavor=flavor), **kwargs)

    # -- application side ------------------------------------------------------------------

    def _capture_error(self, exc: BaseException) -> None:
        self.metrics.add("errors")
        log.error("capture failed; the application's call was not affected", exc_info=exc)

    def submit(self, exchange: Exchange) -> None:
        """Hand a finished exchange to the sender thread. Never raises; waits at most
        ``max_block_ms`` when ``max_pending`` captures are already waiting."""
        try:
            if self._thread is None:
                self.start()
            if self._closed:
                raise GatewayError("Recorder is closed")
            self._queue.put(exchange, timeout=self.max_block_ms / 1000)
        except queue.Full:
            self.metrics.add("failed")
            log.error("capture dropped: %d captures already wait to be sent (max_pending); "
                      "content_key=%s", self._queue.maxsize, exchange.content_key.hex())
        except Exception as e:  # noqa: BLE001 - includes a start() failure
            self.metrics.add("failed")
            log.error("capture dropped (content_key=%s): %s", exchange.content_key.hex(), e)

    # -- sender thread ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._step(0.02)
            self._shutdown()
        except BaseException:  # noqa: BLE001 - keep the thread's death visible
            log.exception("gateway sender thread died")
            self._shutdown_quietly()

    def _step(self, idle_wait: float) -> None:
        took = self._take_new()
        self._producer.poll(0 if took else idle_wait)
        self._after_callbacks()
        self._maybe_resend()

    def _take_new(self) -> int:
        n = 0
        while n < 1000:
            try:
                ex = self._queue.get_nowait()
            except queue.Empty:
                break
            n += 1
            entry = self._encode(ex)
            if entry is not None:
                self._route(entry)
        return n

    def _encode(self, ex: Exchange) -> _Entry | None:
        event_id = new_event_id()
        try:
            value = encode("CaptureEvent", build_event(ex, event_id, LIBRARY, self.host))
        except Exception:  # noqa: BLE001 - a gateway bug, not the application's problem
            self.metrics.add("failed")
            log.exception("capture %s could not be encoded and is dropped (content_key=%s)",
                          event_id, ex.content_key.hex())
            return None
        self.metrics.add("captured")
        return _Entry(event_id, self.stream.encode("utf-8"), value)

    def _route(self, entry: _Entry) -> None:
        if self._producer.brokers_down or self._producer.fatal is not None:
            self._degraded = True
        if not self._degraded:
            try:
                self._producer.produce(self.topic, entry.key, entry.value,
                                       lambda err, e=entry: self._on_direct(e, err))
                self._inflight += 1
                return
            except ProducerError as err:  # QueueFull
                log.warning("capture %s goes to the spool: %s", entry.event_id, err)
                self._degraded = True
        if self._inflight > 0:
            self._held.append(entry)  # after the in-flight ones, whatever their fate
        else:
            self._to_spool([entry])

    def _on_direct(self, entry: _Entry, err: ProducerError | None) -> None:
        self._inflight -= 1
        if err is None:
            self.metrics.add("delivered")
            return
        log.warning("capture %s was not delivered (%s); spooling it", entry.event_id, err)
        self._degraded = True
        self._to_spool([entry])

    def _after_callbacks(self) -> None:
        if self._inflight == 0 and self._held:
            held, self._held = list(self._held), deque()
            self._to_spool(held)
        if self._producer.fatal is not None and self._inflight == 0 and self._resend is None:
            self._replace_producer()

    def _to_spool(self, entries: list[_Entry]) -> None:
        try:
            self._spool.append_many([(e.key, e.value) for e in entries])
        except SpoolError:
            self.metrics.add("failed", len(entries))
            log.exception("spool write failed; %d captures are lost: %s", len(entries),
                          ", ".join(e.event_id for e in entries))
            return
        self.metrics.add("spooled", len(entries))
        self.metrics.pending = len(self._spool)

    def _maybe_resend(self) -> None:
        if self._resend is not None:
            batch, results = self._resend
            if any(r is None for r in results):
                return
            self._resend = None
            ok = 0
            while ok < len(results) and results[ok] is True:
                ok += 1
            if ok:
                self._spool.ack(ok)  # only now: Kafka has acknowledged these
                self.metrics.add("resent", ok)
                self.metrics.pending = len(self._spool)
            if ok < len(results):
                first = next(r for r in results if r is not True)
                log.warning("resending the spool failed (%s); retrying in %.1f s", first,
                            self._backoff)
                self._next_resend = time.monotonic() + self._backoff
                self._backoff = min(self._backoff * 2, _BACKOFF_MAX)
                return
            self._backoff = _BACKOFF_MIN
        if not self._degraded or self._inflight or self._held:
            return
        if len(self._spool) == 0:
            if not self._producer.brokers_down:
                self._degraded = False
            return
        if time.monotonic() < self._next_resend:
            return
        batch = self._spool.peek(_RESEND_BATCH)
        results: list[ProducerError | bool | None] = [None] * len(batch)

        def report(i: int, err: ProducerError | None) -> None:
            results[i] = True if err is None else err

        for i, item in enumerate(batch):
            try:
                self._producer.produce(self.topic, item.key, item.value,
                                       lambda err, i=i: report(i, err))
            except ProducerError as err:
                for j in range(i, len(batch)):
                    results[j] = err
                break
        self._resend = (batch, results)

    def _replace_producer(self) -> None:
        log.error("Kafka producer failed fatally (%s); starting a new one", self._producer.fatal)
        old = self._producer
        self._producer = IntakeProducer(self.bootstrap_servers,
                                        delivery_timeout_ms=old._config["message.timeout.ms"],
                                        config={k: v for k, v in old._config.items()
                                                if k != "error_cb"})
        self._producer.start()
        self._degraded = True
        old.close()

    def _shutdown(self) -> None:
        deadline = time.monotonic() + self._close_timeout
        # 1. Route everything the application handed over, then keep delivering (direct and
        #    spool) until nothing is pending or the time is up.
        while time.monotonic() < deadline:
            self._step(0.05)
            if (self._queue.empty() and self._inflight == 0 and not self._held
                    and self._resend is None and (len(self._spool) == 0 or self._resend_failing())):
                break
        self._take_new()
        self._shutdown_quietly()

    def _resend_failing(self) -> bool:
        return self._next_resend > time.monotonic()

    def _shutdown_quietly(self) -> None:
        # 2. Fail whatever is still queued or in flight in the producer: direct messages go
        #    to the spool through their callbacks, an unfinished resend is simply not acked.
        try:
            self._producer.purge()
            for _ in range(50):
                self._producer.poll(0.02)
                if self._inflight == 0 and (self._resend is None
                                            or all(r is not None for r in self._resend[1])):
                    break
        except Exception:  # noqa: BLE001
            log.exception("purging the producer failed")
        self._resend = None
        # 3. What waited behind in-flight messages goes after them, then the spool closes.
        if self._held:
            held, self._held = list(self._held), deque()
            self._to_spool(held)
        if self._inflight:
            log.error("%d direct captures got no delivery report at close", self._inflight)
        self.metrics.pending = len(self._spool)
        self._spool.close()
        self._producer.close()


def _flavor_module(flavor: str) -> Any:
    if flavor == "httpx2":
        import httpx2

        return httpx2
    if flavor == "httpx":
        import httpx

        return httpx
    raise ConfigError(f"flavor must be one of {FLAVORS}, not {flavor!r}")
