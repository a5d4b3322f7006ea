"""The intake producer: the gateway's only module that imports confluent_kafka.

An idempotent producer (``enable.idempotence``, so ``acks=all`` and per-partition order
survive retries) with ``message.max.bytes`` raised to 65 MiB, one MiB above the intake topic's
default ``max.message.bytes``, so the broker rather than the client decides what is too large.
``allow.auto.create.topics`` is off: a missing intake topic must fail the delivery (and the
capture spools) rather than be created with default configs.

Kafka errors are translated here, once, into :class:`ProducerError` keeping librdkafka's code,
and classified (:func:`classify`): a delivery error is worth retrying later (the capture goes to
the spool), means the message is too large for this cluster (the recorder re-sends it with its
bodies dropped, digests kept), or is permanent (never retried; counted and kept aside). A
delivery report's ``KafkaError.retriable()`` is not set reliably by librdkafka, so the class
is decided from the code.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from confluent_kafka import KafkaError, KafkaException, Producer

from .errors import ProducerError, QueueFull

__all__ = ["MESSAGE_MAX_BYTES", "PERMANENT", "RETRY", "TOO_LARGE", "IntakeProducer", "classify"]

log = logging.getLogger(__name__)

MESSAGE_MAX_BYTES = 65 * 1024 * 1024

DeliveryCallback = Callable[[ProducerError | None], None]

RETRY, TOO_LARGE, PERMANENT = "retry", "too_large", "permanent"
"""The three classes of a produce error; see :func:`classify`."""

_TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
_PERMANENT = frozenset({
    KafkaError.INVALID_RECORD, KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.INVALID_REQUIRED_ACKS,
    KafkaError.POLICY_VIOLATION, KafkaError.UNSUPPORTED_VERSION, KafkaError._INVALID_ARG,
    KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION,
})


def classify(code: int | None) -> str:
    """``TOO_LARGE``, ``PERMANENT`` or ``RETRY`` for a librdkafka error code.

    Everything not known to be permanent is retried from the spool with backoff: timeouts,
    transport errors, a missing topic (an operator can create it), leader changes.
    """
    if code in _TOO_LARGE:
        return TOO_LARGE
    if code in _PERMANENT:
        return PERMANENT
    return RETRY


def _translate(err: KafkaError) -> ProducerError:
    kind = classify(err.code())
    return ProducerError(f"Kafka: {err.str()} ({err.name()})", code=err.code(),
                         retriable=kind == RETRY, fatal=err.fatal(), kind=kind)


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
            # Kafka's own (Java) partitioner: a stream keyed by its id lands on the same
            # partition whichever client produced it. librdkafka's default (CRC32) would put
            # the same stream on another partition than a Java or Go producer does, and the
            # writer would then chain it twice.
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            # A local client: come back quickly after a broker restart.
            "reconnect.backoff.max.ms": 1000,
            "error_cb": self._on_error,
            # librdkafka's own log lines go through Python logging (delivered on poll),
            # not straight to the application's stderr.
            "logger": logging.getLogger("evidence_client.librdkafka"),
            **(config or {}),
        }
        self._producer: Producer | None = None
        self.brokers_down = False
        self.fatal: ProducerError | None = None

    @property
    def linger_s(self) -> float:
        """The producer's ``linger.ms``, in seconds: how long it holds a message for a batch."""
        linger = self._config.get("linger.ms", self._config.get("queue.buffering.max.ms", 5))
        return float(linger) / 1000

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
        """Queue one message. Raises :class:`QueueFull` when the local queue is full and
        :class:`ProducerError` (classified) when librdkafka refuses the message itself, e.g.
        one larger than ``message.max.bytes``."""

        def report(err: KafkaError | None, _msg: Any) -> None:
            if err is None:
                self.brokers_down = False
            on_delivery(None if err is None else _translate(err))

        try:
            self._require().produce(topic, value=value, key=key, on_delivery=report)
        except BufferError as e:
            raise QueueFull(f"producer queue is full: {e}",
                            code=KafkaError._QUEUE_FULL, retriable=True) from e
        except KafkaException as e:
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if err is None:
                raise ProducerError(f"Kafka refused the message: {e}", kind=PERMANENT) from e
            raise _translate(err) from e

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
