"""The API's one Kafka module: a producer for accepted cosignatures, made on first use.

The API serves reads from PostgreSQL and must start, and keep serving, without Kafka; only
``POST /streams/{stream}/checkpoint/cosignatures`` produces. So the producer is created lazily
(the first such request), never in ``create_app`` or the lifespan, and every failure to reach
Kafka, to find the topic or to have the message acknowledged within ``timeout`` is
:class:`~api.errors.Unavailable` (503 with Retry-After and the reason), translated here and
nowhere else. A message for stream S goes to S's partition of ``evidence.checkpoints``
(``evidence_contract.topics.partition_for``, the partition of its log), keyed by S.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Sequence

from evidence_contract.topics import TopicNames, partition_for

from server.logs import event_logger

from .errors import Unavailable

__all__ = ["CheckpointProducer"]

log = event_logger("evidence.api")


class CheckpointProducer:
    """Produces to ``<prefix>.checkpoints``; ``bootstrap`` None means the API has no Kafka."""

    def __init__(self, bootstrap: str | None, prefix: str = "evidence",
                 timeout: float = 10.0) -> None:
        self.bootstrap = bootstrap
        self.topic = TopicNames(prefix).checkpoints
        self.timeout = timeout
        self._producer = None
        self._partitions: int | None = None
        self._lock = threading.Lock()

    def _unavailable(self, what: str, e: object) -> Unavailable:
        log("warning", "kafka_unavailable", what=what, error=str(e))
        return Unavailable(f"Kafka did not take the message ({what}: {e}); retry shortly",
                           retry_after=5)

    def _produce(self, stream: str, value: bytes, headers: Sequence[tuple[str, bytes]]) -> None:
        from confluent_kafka import KafkaException, Producer

        with self._lock:  # one request at a time makes the producer and learns the topic
            try:
                if self._producer is None:
                    self._producer = Producer({
                        "bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                        "acks": "all", "message.timeout.ms": int(self.timeout * 1000),
                        "socket.connection.setup.timeout.ms": int(self.timeout * 1000)})
                if self._partitions is None:
                    md = self._producer.list_topics(self.topic, timeout=self.timeout)
                    t = md.topics.get(self.topic)
                    if t is None or t.error is not None or not t.partitions:
                        raise Unavailable(f"the topic {self.topic} does not exist (yet); "
                                          f"`evidence topics create` makes it", retry_after=5)
                    self._partitions = len(t.partitions)
            except KafkaException as e:
                raise self._unavailable("metadata", e.args[0] if e.args else e) from e
            producer, partitions = self._producer, self._partitions
        errors: list[object] = []
        try:
            producer.produce(self.topic, value=value, key=stream.encode("utf-8"),
                             partition=partition_for(stream, partitions), headers=list(headers),
                             on_delivery=lambda err, _msg: err and errors.append(err))
            left = producer.flush(self.timeout)
        except (KafkaException, BufferError) as e:
            raise self._unavailable("produce", e) from e
        if errors:
            raise self._unavailable("delivery", errors[0])
        if left:
            raise self._unavailable("delivery", f"not acknowledged within {self.timeout:g} s")

    async def produce(self, stream: str, value: bytes,
                      headers: Sequence[tuple[str, bytes]]) -> None:
        """Produce one message and wait for its acknowledgement (off the event loop)."""
        if not self.bootstrap:
            raise Unavailable("this API has no Kafka to produce to (EVIDENCE_KAFKA_BOOTSTRAP is "
                              "not set)", retry_after=60)
        await asyncio.to_thread(self._produce, stream, value, headers)

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(min(self.timeout, 5.0))
                self._producer = None
