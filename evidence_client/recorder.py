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

Threads. The application's threads only build an :class:`Exchange` and put it on a bounded
in-memory queue (``max_pending``; a full queue waits at most ``max_block_ms``). One sender
thread owns everything else: it builds and encodes the CaptureEvent (applying the size
policy, ``sizing``), produces it, runs the producer's delivery callbacks (``poll``), drains the
spools and adopts orphaned ones. Keeping all delivery state on that one thread is what makes
the ordering argument below simple. An exception in one step is logged and counted; the
thread goes on (it stops only in :meth:`close`).

Processes. Every Recorder has a spool directory of its own under the spool root
(``spool_dir``, default ``$EVIDENCE_SPOOL_DIR`` or ``~/.local/state/evidence-store/spool``), so
each worker of a multi-process server records with the default settings. The spool of a
process that ended with captures in it is an orphan: at start and every ``orphan_scan_s`` the
Recorder takes the lock of each orphan it finds (only one process can), resends it oldest
first, and deletes it. A Recorder that cannot start (spool root unusable, bad producer
config) raises :class:`RecorderUnavailable` at each call made through its clients, rather than
letting calls go unrecorded with a log line.

Durability and order. Every capture is written ahead: the sender thread appends it to the
Recorder's own spool and fsyncs (one fsync per batch of captures: group commit) before the
call that made it returns to the application (at most ``durable_timeout_ms``), and only then
produces it. An idle sender waits on the queue, so a capture is taken the moment it is
submitted; one that arrives within ``group_commit_ms`` (default 2) of the last fsync waits
that long for more to share the next one, so under load a gateway makes at most a few hundred
fsyncs a second, not one a capture. Kafka's acknowledgement gives it up: the spool's
delivered prefix is acknowledged at most every 100 ms. So a process killed at any moment has
lost no capture of a call that returned: its spool is an orphan that a live Recorder adopts
and resends (a capture sent twice is absorbed by the writer, by event id). The spool is the
one order of a Recorder's captures, and every send follows it.

A direct delivery that fails with a retriable error, a full producer queue, or librdkafka
reporting all brokers down makes the Recorder *degraded*: new captures then wait on disk only
(their bytes are dropped from memory), and the oldest waiting ones are re-sent as one probe
batch at a time, with backoff; when a probe gets through, everything waiting is sent. Adopted
orphans are resent first, one batch at a time, and acknowledged only after Kafka acknowledged
them; the own captures wait behind them, so a stream's earlier captures go first.

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
cached per subject and stream for ``key_cache_s`` seconds, so a subject erased elsewhere gets
a new key within that time, and never past the end of the key's epoch (a key is per subject
*per epoch*: content of a new day or month goes under that epoch's key, which retention can
shred on its own); the stream is passed to the store, which records it on the key. A capture whose key the store cannot give is dropped and counted
(``failed``), never sent in the clear. Log lines never carry a plain content key then.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import queue
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable

from evidence_contract import decode, encode, new_event_id, now_micros, valid_stream_id
from evidence_contract.topics import TopicNames

from .capture import HASH_ONLY, VALUE, Exchange, build_event
from .context import current_stream
from .errors import ConfigError, GatewayError, ProducerError, RecorderUnavailable, SpoolError
from .producer import RETRY, TOO_LARGE, IntakeProducer
from .sizing import DEFAULT_MAX_VERBATIM_BYTES, apply_size_policy, truncate
from .spool import Spool, claim_orphans, keep_undeliverable, new_spool
from .transport import FLAVORS, transport_classes

__all__ = ["CONTENT_POLICIES", "ENCRYPT", "LIBRARY", "Metrics", "PLAIN", "Recorder"]

log = logging.getLogger(__name__)

LIBRARY = f"evidence-store-client/{version('evidence-store-client')}"
"""``capture.library`` of every record this gateway makes."""

PLAIN = "plain"
ENCRYPT = "encrypt"
CONTENT_POLICIES = (PLAIN, ENCRYPT)
"""``Recorder(content_policy=...)``: record content as it is, or sealed per subject."""

_KEY_CACHE_MAX = 10_000
_RESEND_BATCH = 500
_TAKE_BATCH = 1000
_ACK_INTERVAL_S = 0.1
_BACKOFF_MIN, _BACKOFF_MAX = 0.2, 5.0
_LIVE: "weakref.WeakSet[Recorder]" = weakref.WeakSet()


@atexit.register
def _close_live_recorders() -> None:
    for r in list(_LIVE):
        try:
            r.close()
        except Exception:  # noqa: BLE001
            log.exception("closing a Recorder at exit failed")


def _forget_in_child() -> None:
    # A forked child (a pre-forking server that created the Recorder in its master) has no
    # sender thread, and librdkafka handles do not survive fork. Drop what was inherited
    # without touching it (the parent still owns its spool and lock); the child starts afresh
    # on its first call, with a spool of its own.
    for r in list(_LIVE):
        r._reset_after_fork()


os.register_at_fork(after_in_child=_forget_in_child)

_COUNTERS = ("captured", "delivered", "spooled", "resent", "adopted", "truncated",
             "undeliverable", "unspooled", "slow_durable", "failed", "errors", "pending")


@dataclass
class Metrics:
    """Counters of one Recorder. ``captured`` counts calls whose CaptureEvent was built;
    every capture is written to the spool before its call returns (``unspooled`` counts those
    the disk refused), and each ends up ``delivered`` (at its first attempt), ``spooled`` (it
    waited in the spool for Kafka) and later ``resent``,
    ``undeliverable`` (refused by Kafka for good, kept under ``undeliverable/``), or
    ``failed`` (lost, logged with its event id). ``slow_durable`` counts calls that went on
    before their capture was on disk (``durable_timeout_ms``). ``truncated`` counts captures sent without
    their bodies (size policy); ``adopted`` those of ``resent`` that came from the orphaned
    spools of other (ended) processes; ``errors`` capture-side failures kept away from the application; ``pending`` is
    the number of captures waiting in this Recorder's spools."""

    captured: int = 0
    delivered: int = 0
    spooled: int = 0
    resent: int = 0
    adopted: int = 0
    truncated: int = 0
    undeliverable: int = 0
    unspooled: int = 0
    slow_durable: int = 0
    failed: int = 0
    errors: int = 0
    pending: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {k: getattr(self, k) for k in _COUNTERS}


_PENDING, _INFLIGHT, _DONE = "pending", "inflight", "done"


@dataclass(eq=False)
class _Tracked:
    """A capture of this Recorder, from its spool entry to its delivery."""

    event_id: str
    key: bytes
    value: bytes | None  # None while it waits on disk only
    spooled: bool = True
    state: str = _PENDING
    waited: bool = False  # not delivered at its first attempt: counted in metrics.spooled


class Durable:
    """The answer to "is my capture on disk yet?" for one call (see :meth:`Recorder.submit`).

    :meth:`wait` blocks until the sender thread has fsync'd the capture to the spool, at most
    ``timeout`` s; a capture still not on disk then is counted (``metrics.slow_durable``) and
    the call goes on, its capture still queued."""

    __slots__ = ("_event", "_timeout", "_metrics")

    def __init__(self, timeout: float, metrics: "Metrics") -> None:
        self._event = threading.Event()
        self._timeout = timeout
        self._metrics = metrics

    def set(self) -> None:
        self._event.set()

    @property
    def ready(self) -> bool:
        return self._event.is_set()

    def wait(self) -> bool:
        if self._event.wait(self._timeout):
            return True
        self._metrics.add("slow_durable")
        log.warning("a capture was not on disk within %.1f s; the call goes on", self._timeout)
        return False


def _default_spool_root() -> Path:
    base = os.environ.get("EVIDENCE_SPOOL_DIR")
    return Path(base) if base else Path.home() / ".local" / "state" / "evidence-store" / "spool"


def _event_id_of(value: bytes) -> str:
    try:
        return decode(value)[1]["event_id"]
    except Exception:  # noqa: BLE001 - only for log lines
        return "?"


class Recorder:
    """Captures LLM calls and sends them to ``<topic_prefix>.intake``.

    ``stream`` is the default stream of the calls (optional when every client or call names
    its own). Construction validates the arguments and does no I/O; the producer, spool and
    sender thread start in :meth:`start` (or at the first captured call) and stop in
    :meth:`close`.
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
        group_commit_ms: float = 2.0,
        orphan_scan_s: float = 10.0,
        close_timeout: float = 30.0,
        producer_config: dict[str, Any] | None = None,
        host: str | None = None,
        content_policy: str = PLAIN,
        key_store: Any = None,
        key_cache_s: float = 60.0,
        key_clock: Callable[[], int] = now_micros,
    ) -> None:
        bootstrap = bootstrap_servers or os.environ.get("EVIDENCE_KAFKA_BOOTSTRAP")
        if not bootstrap:
            raise ConfigError("bootstrap_servers is required (or set EVIDENCE_KAFKA_BOOTSTRAP)")
        if stream is not None and not valid_stream_id(stream):
            raise ConfigError(f"stream {stream!r} is not a stream id ([A-Za-z0-9._:-]{{1,128}})")
        policy = getattr(request_policy, "value", request_policy)
        if policy not in (VALUE, HASH_ONLY):
            raise ConfigError(f"request_policy must be {VALUE!r} or {HASH_ONLY!r}, not {policy!r}")
        prefix = topic_prefix or os.environ.get("EVIDENCE_TOPIC_PREFIX") or "evidence"
        for name, value in (("delivery_timeout_ms", delivery_timeout_ms),
                            ("max_block_ms", max_block_ms), ("max_pending", max_pending),
                            ("max_verbatim_bytes", max_verbatim_bytes),
                            ("durable_timeout_ms", durable_timeout_ms)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive int, not {value!r}")
        if close_timeout < 0:
            raise ConfigError("close_timeout must be >= 0")
        if (not isinstance(group_commit_ms, (int, float)) or isinstance(group_commit_ms, bool)
                or not 0 <= group_commit_ms <= 1000):
            raise ConfigError(f"group_commit_ms must be a number of ms from 0 to 1000, "
                              f"not {group_commit_ms!r}")
        if orphan_scan_s <= 0:
            raise ConfigError("orphan_scan_s must be > 0")
        if content_policy not in CONTENT_POLICIES:
            raise ConfigError(f"content_policy must be one of {CONTENT_POLICIES}, "
                              f"not {content_policy!r}")
        if content_policy == ENCRYPT:
            if key_store is None:
                raise ConfigError("content_policy='encrypt' needs a key_store")
            try:
                from evidence_contract import sealing  # noqa: F401 - needs the extra
            except ImportError as e:
                raise ConfigError("content_policy='encrypt' needs the [encrypt] extra "
                                  f"(cryptography): {e}") from e
        if key_cache_s < 0:
            raise ConfigError("key_cache_s must be >= 0")
        self.content_policy: str = content_policy
        self.key_store = key_store
        self.key_cache_s = key_cache_s
        # (subject, stream) -> (SubjectKeys, fetched at (monotonic), epoch end (UTC µs) or None)
        self._keys: dict[tuple[str, str], tuple[Any, float, int | None]] = {}
        self._key_clock = key_clock  # UTC µs, for the epoch's end (tests pass a fake one)
        self.stream: str | None = stream
        self.request_policy: str = policy
        self.topic: str = TopicNames(prefix).intake
        self.spool_dir = Path(spool_dir) if spool_dir is not None else _default_spool_root()
        """The spool root: this Recorder's own spool is a directory inside it."""
        self.bootstrap_servers = bootstrap
        self.host = host
        self.max_block_ms = max_block_ms
        self.max_verbatim_bytes = max_verbatim_bytes
        self.durable_timeout_ms = durable_timeout_ms
        self.group_commit_ms = group_commit_ms
        self.orphan_scan_s = orphan_scan_s
        self.close_timeout = close_timeout
        self._close_timeout = close_timeout  # what the running close() was given
        self.metrics = Metrics()
        self._delivery_timeout_ms = delivery_timeout_ms
        self._producer_config = producer_config
        self._producer = IntakeProducer(bootstrap, delivery_timeout_ms=delivery_timeout_ms,
                                        config=producer_config)
        self._spool: Spool | None = None
        self._queue: queue.Queue[tuple[Exchange, Durable]] = queue.Queue(max_pending)
        self._state_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._start_error: BaseException | None = None
        self._stopping = threading.Event()
        self._closed = False
        self._reset_sender_state()

    def _reset_sender_state(self) -> None:
        # Owned by the sender thread only:
        self._track: deque[_Tracked] = deque()
        self._unspooled: deque[_Tracked] = deque()
        self._orphans: deque[Spool] = deque()
        self._orphan_resend: tuple[Spool, list[Any], list[ProducerError | bool | None]] | None \
            = None
        self._probe: set[int] = set()
        self._next_scan = 0.0
        self._degraded = False
        self._inflight = 0
        self._backoff = _BACKOFF_MIN
        self._next_resend = 0.0
        self._last_ack = 0.0
        self._last_append = float("-inf")  # monotonic end of the last spool append

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
            if self._thread is not None:
                return self
            if self._start_error is not None:
                raise self._start_error
            try:
                self._start_locked()
            except (SpoolError, ProducerError) as e:
                self._start_error = e
                log.critical("evidence Recorder cannot start, so calls through it will fail "
                             "with RecorderUnavailable: %s", e)
                raise
        return self

    def _start_locked(self) -> None:
        spool = new_spool(self.spool_dir)
        try:
            self._producer.start()
        except BaseException:
            spool.remove()
            raise
        self._spool = spool
        # Captures of earlier processes go before this one's: resend them first.
        self._orphans = deque(claim_orphans(self.spool_dir, exclude=spool.directory))
        self._next_scan = time.monotonic() + self.orphan_scan_s
        self._update_pending()
        self._thread = threading.Thread(target=self._run, name="evidence-client-sender",
                                        daemon=True)
        self._thread.start()
        _LIVE.add(self)

    def _reset_after_fork(self) -> None:
        self._state_lock = threading.Lock()
        self._thread = None
        self._spool = None
        self._reset_sender_state()
        self._queue = queue.Queue(self._queue.maxsize)
        self._producer = IntakeProducer(self.bootstrap_servers,
                                        delivery_timeout_ms=self._delivery_timeout_ms,
                                        config=self._producer_config)

    def close(self, timeout: float | None = None) -> None:
        """Deliver what can be delivered within ``timeout`` (default ``close_timeout``) s;
        anything else stays in the spool for the next Recorder on this spool root."""
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
                      self._queue.qsize() + len(self._unspooled))
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
        return self._spool.directory if self._spool is not None else None

    # -- clients ---------------------------------------------------------------------------

    def _transport(self, flavor: str, asynchronous: bool, inner: Any, stream: str | None) -> Any:
        if flavor not in FLAVORS:
            raise ConfigError(f"flavor must be one of {FLAVORS}, not {flavor!r}")
        if stream is not None and not valid_stream_id(stream):
            raise ConfigError(f"stream {stream!r} is not a stream id ([A-Za-z0-9._:-]{{1,128}})")
        sync_cls, async_cls = transport_classes(flavor)
        cls = async_cls if asynchronous else sync_cls
        return cls(inner, stream, self.request_policy, self.submit, self._capture_error,
                   self._begin_call)

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
        stream = current_stream() or client_stream or self.stream
        if stream is None:
            raise ConfigError("this call has no stream: give Recorder(stream=...), "
                              "http_client(stream=...) or wrap it in evidence_client.stream()")
        if self._thread is None:
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
        """Hand a finished exchange to the sender thread. Never raises; waits at most
        ``max_block_ms`` when ``max_pending`` captures are already waiting. Returns the
        capture's :class:`Durable`: waiting on it returns once the capture is on disk."""
        durable = Durable(self.durable_timeout_ms / 1000, self.metrics)
        try:
            if self._thread is None:
                self.start()
            if self._closed:
                raise GatewayError("Recorder is closed")
            self._queue.put((exchange, durable), timeout=self.max_block_ms / 1000)
        except queue.Full:
            self.metrics.add("failed")
            durable.set()
            log.error("capture dropped: %d captures already wait to be sent (max_pending); "
                      "content_key=%s", self._queue.maxsize, self._key_text(exchange))
        except Exception as e:  # noqa: BLE001 - includes a start() failure
            self.metrics.add("failed")
            durable.set()
            log.error("capture dropped (content_key=%s): %s", self._key_text(exchange), e)
        return durable

    # -- sender thread ---------------------------------------------------------------------
    #
    # Write-ahead: every capture is appended to this Recorder's spool, and fsync'd, before
    # the call that made it returns (group commit: one fsync per batch of captures), and only
    # then produced. ``_track`` mirrors the spool's unacknowledged entries in order; an entry
    # is acknowledged in the spool once it and every entry before it are delivered (or dealt
    # with for good). So a crash at any point loses no capture whose call returned: the spool
    # holds it until Kafka has it, and whoever adopts the spool resends it (the writer
    # absorbs the duplicates a resend may make).

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._step(0.02)
            except Exception:  # noqa: BLE001 - one bad step must not end recording
                self.metrics.add("errors")
                log.exception("gateway sender step failed; continuing")
                time.sleep(0.1)
        try:
            self._shutdown()
        except BaseException:  # noqa: BLE001 - keep the failure visible
            log.exception("gateway sender shutdown failed")
            self._shutdown_quietly()

    def _step(self, idle_wait: float) -> None:
        # With deliveries to wait for, the producer's poll is where an idle sender waits
        # (callbacks come soon); with none, the queue is, and a submit wakes it at once.
        waiting = self._inflight > 0 or self._orphan_resend is not None
        took = self._take_new(0.0 if waiting or self._stopping.is_set() else idle_wait)
        self._producer.poll(0 if took or not waiting else idle_wait)
        self._after_callbacks()
        self._ack(force=False)
        self._maybe_adopt()
        if self._orphans or self._orphan_resend is not None:
            self._resend_orphans()
        else:
            self._send_own()

    def _take_new(self, wait: float = 0.0) -> int:
        """Take what the application submitted (waiting up to ``wait`` s for the first),
        make it durable with one fsync and track it; returns how many were taken. Right
        after an append, a batch waits up to ``group_commit_ms`` for more to join it."""
        q = self._queue
        try:
            batch = [q.get(timeout=wait) if wait > 0 else q.get_nowait()]
        except queue.Empty:
            return 0
        linger = self.group_commit_ms / 1000
        until = None
        if linger > 0 and not self._stopping.is_set():
            now = time.monotonic()
            if now - self._last_append < linger:
                until = now + linger
        while len(batch) < _TAKE_BATCH:
            try:
                batch.append(q.get_nowait())
            except queue.Empty:
                left = until - time.monotonic() if until is not None else 0.0
                if left <= 0:
                    break
                try:
                    batch.append(q.get(timeout=left))
                except queue.Empty:
                    break
        entries = [e for e in (self._encode(ex) for ex, _ in batch) if e is not None]
        self._append(entries)
        for _, durable in batch:
            durable.set()
        return len(batch)

    def _key_text(self, ex: Exchange) -> str:
        # A plain content key of sealed content would let a log reader confirm a guess.
        return "(sealed)" if self.content_policy == ENCRYPT else ex.content_key.hex()

    def _subject_keys(self, subject: str, stream: str) -> Any:
        """The subject's SubjectKeys, from the cache or the key store (sender thread only).
        A cached key is served for ``key_cache_s`` at most and never once its epoch has
        ended: new content must go under the new epoch's key, or retention would shred it
        with the old epoch's."""
        from evidence_contract.sealing import SubjectKeys

        now = time.monotonic()
        hit = self._keys.get((subject, stream))
        if (hit is not None and now - hit[1] < self.key_cache_s
                and (hit[2] is None or self._key_clock() < hit[2])):
            return hit[0]
        key = self.key_store.data_key(subject, stream=stream)
        keys = SubjectKeys(key.key_id, key.material)
        if len(self._keys) >= _KEY_CACHE_MAX:
            self._keys.clear()
        self._keys[(subject, stream)] = (keys, now, getattr(key, "expires_at", None))
        return keys

    def _build(self, ex: Exchange, event_id: str) -> dict[str, Any]:
        """The capture as it leaves the process: sized, and sealed under ``encrypt``."""
        if self.content_policy != ENCRYPT:
            return apply_size_policy(build_event(ex, event_id, LIBRARY, self.host),
                                     self.max_verbatim_bytes)
        from evidence_contract.sealing import seal_body

        call = ex.call
        keys = self._subject_keys(call.subject if call is not None and call.subject
                                  else ex.stream, ex.stream)
        event = build_event(ex, event_id, LIBRARY, self.host, digests=keys)
        return seal_body(apply_size_policy(event, self.max_verbatim_bytes, to_seal=True), keys)

    def _encode(self, ex: Exchange) -> _Tracked | None:
        event_id = new_event_id()
        try:
            sized = self._build(ex, event_id)
            value = encode("CaptureEvent", sized)
        except Exception:  # noqa: BLE001 - a gateway bug, not the application's problem
            self.metrics.add("failed")
            log.exception("capture %s could not be encoded and is dropped (content_key=%s)",
                          event_id, self._key_text(ex))
            return None
        self.metrics.add("captured")
        if sized["capture"]["truncated"]:
            self.metrics.add("truncated")
            log.warning("capture %s is larger than max_verbatim_bytes=%d: sealed truncated "
                        "(digests and lengths only)", event_id, self.max_verbatim_bytes)
        return _Tracked(event_id, ex.stream.encode("utf-8"), value)

    def _append(self, entries: list[_Tracked]) -> None:
        """Make ``entries`` durable in the own spool (one fsync) and track them."""
        if not entries:
            return
        assert self._spool is not None
        try:
            self._spool.append_many([(e.key, e.value) for e in entries])
            self._last_append = time.monotonic()
        except SpoolError:
            # The disk refuses (full, gone): these captures can only be sent from memory.
            self.metrics.add("unspooled", len(entries))
            log.exception("spool write failed: %d captures are sent from memory only and are "
                          "lost if this process dies first: %s", len(entries),
                          ", ".join(e.event_id for e in entries))
            for e in entries:
                e.spooled = False
                self._unspooled.append(e)
            return
        for e in entries:
            if self._degraded:
                e.value = None  # re-read from the spool when resent: memory stays bounded
                e.waited = True
            self._track.append(e)
        if self._degraded:
            self.metrics.add("spooled", len(entries))
        self._update_pending()

    def _healthy(self) -> bool:
        if self._producer.brokers_down or self._producer.fatal is not None:
            self._degraded = True
        return not self._degraded

    def _send_own(self) -> None:
        """Produce what is waiting in the own spool: everything while healthy; one probe
        batch, with backoff, while degraded."""
        while self._unspooled:  # never on disk: first, and whatever the state
            self._produce(self._unspooled.popleft())
        if self._healthy():
            pending = list(itertools.islice((e for e in self._track if e.state == _PENDING),
                                            _TAKE_BATCH))
        elif self._inflight == 0 and time.monotonic() >= self._next_resend:
            pending = [e for e in self._track if e.state == _PENDING][:_RESEND_BATCH]
            if pending:
                self._probe = {id(e) for e in pending}
        else:
            return
        if not pending:
            return
        missing = [e for e in pending if e.value is None]
        if missing:
            self._reload(missing)
        for e in pending:
            if not self._produce(e):
                break

    def _reload(self, entries: list[_Tracked]) -> None:
        """Read the values of tracked entries back from the spool (they align in order)."""
        assert self._spool is not None
        want = {id(e) for e in entries}
        last = max(i for i, e in enumerate(self._track) if id(e) in want)
        for e, item in zip(self._track, self._spool.peek(last + 1, max_bytes=1 << 62)):
            if id(e) in want:
                e.value = item.value

    def _produce(self, e: _Tracked) -> bool:
        """Produce one entry; False when the producer's queue is full (try again later)."""
        assert e.value is not None
        try:
            self._producer.produce(self.topic, e.key, e.value,
                                   lambda err, e=e: self._on_delivery(e, err))
        except ProducerError as err:
            if err.kind == RETRY:  # the local queue is full: the rest waits in the spool
                self._degraded = True
                if not e.spooled:
                    self._unspooled.appendleft(e)
                return False
            self._not_retried(e, err)
            return True
        e.state = _INFLIGHT
        self._inflight += 1
        return True

    def _on_delivery(self, e: _Tracked, err: ProducerError | None) -> None:
        self._inflight -= 1
        probing = id(e) in self._probe
        self._probe.discard(id(e))
        if err is None:
            e.state, e.value = _DONE, None
            self.metrics.add("resent" if e.waited else "delivered")
            if probing and not self._probe:
                self._degraded, self._backoff = False, _BACKOFF_MIN  # the probe got through
            return
        if err.kind != RETRY:
            self._not_retried(e, err)
            return
        if not self._degraded or probing:
            log.warning("capture %s was not delivered (%s); it waits in the spool, retried "
                        "in %.1f s", e.event_id, err, self._backoff)
            self._next_resend = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, _BACKOFF_MAX)
            self._probe.clear()
        self._degraded = True
        if not e.spooled:
            self.metrics.add("failed")
            log.error("capture %s is lost: Kafka failed it and it is not on disk (%s)",
                      e.event_id, err)
            e.state = _DONE
            return
        e.state, e.value = _PENDING, None
        if not e.waited:
            e.waited = True
            self.metrics.add("spooled")

    def _not_retried(self, e: _Tracked, err: ProducerError) -> None:
        """Kafka will never take ``e`` as it is: send it truncated, or keep it aside."""
        e.state = _DONE
        value, e.value = e.value, None
        if value is None:
            self._reload([e]) if e.spooled else None
            value, e.value = e.value, None
        if err.kind == TOO_LARGE and value is not None:
            smaller = self._truncated(e.event_id, e.key, value)
            if smaller is not None:
                self.metrics.add("truncated")
                log.warning("capture %s is too large for Kafka (%s): resent truncated",
                            e.event_id, err)
                self._append([smaller])
                return
        self.metrics.add("undeliverable")
        log.error("capture %s cannot be delivered and is kept under %s/undeliverable: %s",
                  e.event_id, self.spool_dir, err)
        try:
            assert self._spool is not None
            keep_undeliverable(self.spool_dir, self._spool.directory.name,
                               [(e.key, value or b"", f"{e.event_id} {err}")])
        except (SpoolError, OSError):
            self.metrics.add("failed")
            log.exception("capture %s is lost: it cannot be kept aside either", e.event_id)

    def _truncated(self, event_id: str, key: bytes, value: bytes) -> _Tracked | None:
        try:
            _, event = decode(value)
        except Exception:  # noqa: BLE001 - not ours to fix
            return None
        if event["capture"].get("truncated"):
            return None  # already as small as it gets
        return _Tracked(event_id, key, encode("CaptureEvent", truncate(event)))

    def _after_callbacks(self) -> None:
        if self._producer.fatal is not None and self._inflight == 0 \
                and self._orphan_resend is None:
            self._replace_producer()

    def _ack(self, force: bool) -> None:
        """Give up the spool's delivered prefix: at most every _ACK_INTERVAL_S (each ack is
        an fsync'd HEAD update), or now when ``force``."""
        done = 0
        for e in self._track:
            if e.state != _DONE:
                break
            done += 1
        if not done:
            return
        now = time.monotonic()
        if not force and done < _RESEND_BATCH and now - self._last_ack < _ACK_INTERVAL_S:
            return
        assert self._spool is not None
        try:
            self._spool.ack(done)
        except SpoolError as e:
            # The disk refuses (full?): the entries stay, delivered; acknowledged later.
            self._last_ack = now
            log.warning("cannot record %d deliveries in the spool yet: %s", done, e)
            return
        for _ in range(done):
            self._track.popleft()
        self._last_ack = now
        self._update_pending()

    def _update_pending(self) -> None:
        own = sum(1 for e in self._track if e.state != _DONE)
        self.metrics.pending = own + sum(len(o) for o in self._orphans)

    def _maybe_adopt(self) -> None:
        if time.monotonic() < self._next_scan or self._spool is None:
            return
        self._next_scan = time.monotonic() + self.orphan_scan_s
        found = claim_orphans(self.spool_dir, exclude=self._spool.directory)
        if found:
            log.warning("adopting %d orphaned spool(s) with %d captures: %s", len(found),
                        sum(map(len, found)), ", ".join(o.directory.name for o in found))
            self._orphans.extend(found)
            self._update_pending()

    def _resend_orphans(self) -> None:
        """Resend adopted spools oldest first, one batch at a time; this process's own
        captures wait behind them, so a stream's earlier captures go first."""
        if self._orphan_resend is not None:
            source, batch, results = self._orphan_resend
            if any(r is None for r in results):
                return
            self._orphan_resend = None
            done = 0
            failure: ProducerError | None = None
            for item, r in zip(batch, results):
                if r is True:
                    done += 1
                elif r.kind == RETRY:
                    failure = r
                    break
                else:
                    self._not_retried(_Tracked(_event_id_of(item.value), item.key, item.value,
                                               spooled=False), r)
                    done += 1  # dealt with for good: never retried
            if done:
                source.ack(done)  # only now: Kafka has acknowledged (or refused) these
                self.metrics.add("resent", done)
                self.metrics.add("adopted", done)
                self._update_pending()
            if failure is not None:
                log.warning("resending an adopted spool failed (%s); retrying in %.1f s",
                            failure, self._backoff)
                self._next_resend = time.monotonic() + self._backoff
                self._backoff = min(self._backoff * 2, _BACKOFF_MAX)
                return
            self._backoff = _BACKOFF_MIN
        while self._orphans and len(self._orphans[0]) == 0:
            self._orphans.popleft().remove()
        if not self._orphans or time.monotonic() < self._next_resend:
            return
        source = self._orphans[0]
        batch = source.peek(_RESEND_BATCH)
        results: list[ProducerError | bool | None] = [None] * len(batch)

        def report(i: int, err: ProducerError | None) -> None:
            results[i] = True if err is None else err

        for i, item in enumerate(batch):
            try:
                self._producer.produce(self.topic, item.key, item.value,
                                       lambda err, i=i: report(i, err))
            except ProducerError as err:
                results[i] = err
                if err.kind == RETRY:  # queue full: the rest waits for the next batch
                    for j in range(i + 1, len(batch)):
                        results[j] = err
                    break
        self._orphan_resend = (source, batch, results)

    def _replace_producer(self) -> None:
        log.error("Kafka producer failed fatally (%s); starting a new one", self._producer.fatal)
        old = self._producer
        self._producer = IntakeProducer(self.bootstrap_servers,
                                        delivery_timeout_ms=self._delivery_timeout_ms,
                                        config=self._producer_config)
        self._producer.start()
        self._degraded = True
        old.close()

    def _settled(self) -> bool:
        return (self._queue.empty() and self._inflight == 0 and not self._unspooled
                and self._orphan_resend is None
                and (self.metrics.pending == 0 or self._next_resend > time.monotonic()))

    def _shutdown(self) -> None:
        deadline = time.monotonic() + self._close_timeout
        # 1. Take everything the application handed over (it is on disk then), and keep
        #    delivering until nothing is pending or the time is up.
        while time.monotonic() < deadline:
            self._step(0.05)
            self._ack(force=True)
            if self._settled():
                break
        self._take_new()
        self._shutdown_quietly()

    def _shutdown_quietly(self) -> None:
        # 2. Fail whatever is still queued or in flight in the producer: those entries stay
        #    unacknowledged in the spool.
        try:
            self._producer.purge()
            for _ in range(50):
                self._producer.poll(0.02)
                if self._inflight == 0 and (self._orphan_resend is None or all(
                        r is not None for r in self._orphan_resend[2])):
                    break
        except Exception:  # noqa: BLE001
            log.exception("purging the producer failed")
        self._orphan_resend = None
        # 3. Record what was delivered, then close the spools: an empty own spool is
        #    removed, anything left is an orphan for the next Recorder on this root.
        try:
            self._ack(force=True)
        except SpoolError:
            log.exception("recording deliveries in the spool failed; they will be resent")
        if self._inflight:
            log.error("%d captures got no delivery report at close; they stay in the spool",
                      self._inflight)
        self._update_pending()
        for orphan in self._orphans:
            if len(orphan) == 0:
                orphan.remove()
            else:
                orphan.close()
        self._orphans.clear()
        if self._spool is not None:
            if len(self._spool) == 0:
                self._spool.remove()
            else:
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
