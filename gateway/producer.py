"""The intake producer: the gateway's only module that imports confluent_kafka.

An idempotent producer (``enable.idempotence``, so ``acks=all`` and per-partition order
survive retries) with ``message.max.bytes`` raised to 17 MiB, one MiB above the intake topic's
``max.message.bytes``, so the broker rather than the client decides what is too large.
``allow.auto.create.topics`` is off: a missing intake topic must fail the delivery (and the
capture spools) rather than be created with default configs.

Kafka errors are translated here, once, into :class:`ProducerError` keeping librdkafka's code.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from confluent_kafka import KafkaError, Producer

from .errors import ProducerError, QueueFull

__all__ = ["MESSAGE_MAX_BYTES", "IntakeProducer"]

log = logging.getLogger(__name__)

MESSAGE_MAX_BYTES = 17 * 1024 * 1024

DeliveryCallback = Callable[[ProducerError | None], None]


def _translate(err: KafkaError) -> ProducerError:
    return ProducerError(f"Kafka: {err.str()} ({err.name()})", code=err.code(),
                         retriable=err.retriable(), fatal=err.fatal())


class IntakeProducer:
    """Produces encoded CaptureEvents; callbacks run in whichever thread calls poll/flush.

    ``IntakeProducer(...)`` does no I/O; :meth:`start` creates the client (which connects in
    the background).
    """

    def __init__(self, bootstrap_servers: str, *, delivery_timeout_ms: int = 30_000,
                 config: dict[str, Any] | None = None) -> None:
        self._config: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            "client.id": "evidence-gateway",
            "enable.idempotence": True,
            "acks": "all",
            "message.max.bytes": MESSAGE_MAX_BYTES,
            "message.timeout.ms": delivery_timeout_ms,
            "allow.auto.create.topics": False,
            "linger.ms": 5,
            # A local client: come back quickly after a broker restart.
            "reconnect.backoff.max.ms": 1000,
            "error_cb": self._on_error,
            **(config or {}),
        }
        self._producer: Producer | None = None
        self.brokers_down = False
        self.fatal: ProducerError | None = None

    def start(self) -> "IntakeProducer":
        if self._producer is None:
            try:
                self._producer = Producer(self._config)
            except Exception as e:  # KafkaException, TypeError/ValueError for bad config
                raise ProducerError(f"cannot create the Kafka producer: {e}") from e
        return self

    def _on_error(self, err: KafkaError) -> None:
        # Runs inside poll/flush. All-brokers-down is the early signal that deliveries
        # will time out: the recorder starts spooling new captures right away.
        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT,
                          KafkaError._RESOLVE):
            if err.code() == KafkaError._ALL_BROKERS_DOWN:
                self.brokers_down = True
            log.debug("Kafka connection: %s", err.str())
        else:
            log.warning("Kafka producer error: %s", err.str())
        if err.fatal():
            self.fatal = _translate(err)

    def _require(self) -> Producer:
        if self._producer is None:
            raise ProducerError("producer is not started")
        return self._producer

    def produce(self, topic: str, key: bytes, value: bytes, on_delivery: DeliveryCallback) -> None:
        """Queue one message. Raises :class:`QueueFull` when the local queue is full."""

        def report(err: KafkaError | None, _msg: Any) -> None:
            if err is None:
                self.brokers_down = False
            on_delivery(None if err is None else _translate(err))

        try:
            self._require().produce(topic, value=value, key=key, on_delivery=report)
        except BufferError as e:
            raise QueueFull(f"producer queue is full: {e}",
                            code=KafkaError._QUEUE_FULL, retriable=True) from e

    def poll(self, timeout: float = 0.0) -> int:
        return self._require().poll(timeout)

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for outstanding deliveries; returns how many are left."""
        return self._require().flush(timeout)

    def purge(self) -> None:
        """Fail every queued and in-flight message now (their callbacks run on next poll)."""
        self._require().purge()

    def close(self) -> None:
        self._producer = None  # librdkafka frees the handle when it is collected
