"""The receiver's producer to the intake topic: the one module of the receiver that imports
confluent_kafka.

Configured as the capture client's producer is (``evidence_client.producer``): idempotent,
``acks=all``, Kafka's Java partitioner (``murmur2_random``) so a stream lands on the partition
any producer puts it on, no topic auto-creation. What differs is the answer: the client spools
a capture Kafka cannot take, the receiver has no spool and tells the exporter to send again, so
:meth:`Intake.send` returns only when Kafka acknowledged every message, or raises

- :class:`IntakeBusy` (429) when the producer's local queue is full (the receiver is taking
  more than Kafka absorbs);
- :class:`IntakeUnavailable` (503) when a delivery failed or did not finish within the
  delivery timeout, or the brokers are known to be down (then the request is answered at once;
  its messages stay queued, and if they reach Kafka after all the resend is absorbed by the
  writer's dedup: the event ids are the same).

librdkafka reconnects by itself; a producer that reports a fatal error is replaced before the
next send. The service never exits because Kafka is away.

One thread serves the delivery reports (``poll``) and hands each to the request's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from evidence_contract.errors import EvidenceError

__all__ = ["Intake", "IntakeBusy", "IntakeUnavailable"]

log = logging.getLogger("evidence.otlp")

MESSAGE_MAX_BYTES = 65 * 1024 * 1024
"""One MiB above the intake topic's default ``max.message.bytes``: the broker decides."""

_POLL_S = 0.1


class IntakeUnavailable(EvidenceError):
    """Kafka did not acknowledge the captures (503, ``Retry-After``); ``code`` is librdkafka's
    error code when there is one."""

    status = 503

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class IntakeBusy(IntakeUnavailable):
    """The producer's queue is full (429, ``Retry-After``): send later."""

    status = 429


class Intake:
    """Produces encoded captures to one intake topic. ``Intake(...)`` does no I/O;
    :meth:`start` creates the client (which connects in the background), :meth:`close`
    delivers what it can and stops."""

    def __init__(self, bootstrap: str, topic: str, *, delivery_timeout_s: float,
                 queue_max_messages: int, config: dict[str, Any] | None = None) -> None:
        self.topic = topic
        self._timeout = delivery_timeout_s
        self._config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "client.id": "evidence-otlp",
            "enable.idempotence": True,
            "acks": "all",
            "message.max.bytes": MESSAGE_MAX_BYTES,
            "message.timeout.ms": int(delivery_timeout_s * 1000),
            "queue.buffering.max.messages": queue_max_messages,
            "allow.auto.create.topics": False,
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "reconnect.backoff.max.ms": 1000,
            "error_cb": self._on_error,
            "logger": logging.getLogger("evidence.otlp.librdkafka"),
            **(config or {}),
        }
        self._producer: Producer | None = None
        self._fatal = False
        self.brokers_down = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> "Intake":
        """Create the producer and the thread that serves its delivery reports; raises
        :class:`IntakeUnavailable` for a configuration librdkafka refuses."""
        self._producer = self._new_producer()
        self._thread = threading.Thread(target=self._serve_reports, name="evidence-otlp-kafka",
                                        daemon=True)
        self._thread.start()
        return self

    def _new_producer(self) -> Producer:
        try:
            return Producer(self._config)
        except (KafkaException, TypeError, ValueError) as e:
            raise IntakeUnavailable(f"cannot create the Kafka producer: {e}") from e

    def _on_error(self, err: KafkaError) -> None:
        # Runs inside poll, on the reports thread.
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            if not self.brokers_down:
                log.warning("Kafka is not reachable: %s", err.str())
            self.brokers_down = True
        elif err.code() not in (KafkaError._TRANSPORT, KafkaError._RESOLVE):
            log.warning("Kafka producer error: %s", err.str())
        if err.fatal():
            self._fatal = True

    def _serve_reports(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                producer = self._producer
            if producer is not None:
                producer.poll(_POLL_S)

    def _current(self) -> Producer:
        with self._lock:
            if self._producer is None:
                raise IntakeUnavailable("the intake producer is not started")
            if self._fatal:  # a fatal producer cannot go on: a new one, its idempotence anew
                old, self._producer, self._fatal = self._producer, self._new_producer(), False
                old.purge()
                old.poll(0)  # fails what it held, so the requests waiting on it are answered
                log.warning("the Kafka producer failed fatally and was replaced")
            return self._producer

    async def send(self, messages: list[tuple[bytes, bytes]]) -> None:
        """Produce ``(key, value)`` messages to the intake topic and wait until Kafka
        acknowledged every one; raises :class:`IntakeBusy` or :class:`IntakeUnavailable`."""
        if not messages:
            return
        loop = asyncio.get_running_loop()
        producer = self._current()
        futures: list[asyncio.Future[None]] = []

        def report_to(future: asyncio.Future[None]):
            def report(err: KafkaError | None, _msg: Any) -> None:
                if err is None:
                    self.brokers_down = False
                try:
                    loop.call_soon_threadsafe(_settle, future, err)
                except RuntimeError:  # the loop is closed: the request is long gone
                    pass
            return report

        for key, value in messages:
            future = loop.create_future()
            try:
                producer.produce(self.topic, value=value, key=key, on_delivery=report_to(future))
            except BufferError as e:
                raise IntakeBusy(f"the Kafka producer's queue is full: {e}",
                                 KafkaError._QUEUE_FULL) from e
            except KafkaException as e:
                err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                raise IntakeUnavailable(f"Kafka refused a capture: {e}",
                                        err.code() if err is not None else None) from e
            futures.append(future)
        if self.brokers_down:  # answered now; what is queued may still reach Kafka (see above)
            for future in futures:  # settled later, with nobody waiting: not an error to log
                future.add_done_callback(_unawaited)
            raise IntakeUnavailable("Kafka is not reachable", KafkaError._ALL_BROKERS_DOWN)
        try:
            # message.timeout.ms bounds each report; the margin covers the reports' thread
            results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True),
                                             self._timeout + 5)
        except asyncio.TimeoutError as e:
            raise IntakeUnavailable("Kafka did not acknowledge the captures in time") from e
        for result in results:
            if isinstance(result, BaseException):
                raise result

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued (at most ``timeout`` s), then stop the reports thread."""
        producer = self._producer
        if producer is not None:
            left = producer.flush(timeout)
            if left:
                log.warning("%d captures were not delivered before the receiver stopped "
                            "(their exporters were not answered 200 and send them again)", left)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._producer = None


def _unawaited(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()  # retrieved, so asyncio does not report it as never retrieved


def _settle(future: asyncio.Future[None], err: KafkaError | None) -> None:
    if future.done():  # the request gave up waiting (timed out or cancelled)
        return
    if err is None:
        future.set_result(None)
    else:
        future.set_exception(IntakeUnavailable(
            f"Kafka did not take a capture: {err.str()} ({err.name()})", err.code()))
