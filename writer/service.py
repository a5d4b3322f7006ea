"""The single writer as a service: start, run until stopped, close.

It consumes ``<prefix>.intake`` read_committed and, per batch, runs one Kafka transaction that
carries the sealed records, the new stream heads and the intake offsets. The pieces, each a
plain module:

- :mod:`writer.kafka_io` — the clients (made by :class:`~writer.kafka_io.KafkaClients`, so
  tests can pass fakes) and the librdkafka calls;
- :mod:`writer.restore` — heads and dedup window of a partition, read back on assignment;
- :mod:`writer.loop` — :class:`~writer.loop.SealLoop`, the batch transaction and its abort,
  rewind and commit-retry paths;
- here: the life cycle, librdkafka's callbacks, and what a fatal error or fencing means for
  the exit code (:class:`writer.errors.FencedError` / :class:`writer.errors.WriterKafkaError`,
  exit non-zero).
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, cast

from evidence_contract import now_micros
from server.logs import event_logger
from server.version import version
from writer.config import WriterConfig
from writer.core import Sealer
from writer.errors import FencedError, WriterError, WriterKafkaError
from writer.kafka_io import (
    TIMEOUT_S,
    Consumer,
    KafkaClients,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
    consumer_config,
    error_of,
    is_fatal,
    is_fenced,
    kafka_errors,
    producer_config,
    reader_config,
    translate,
)
from writer.loop import SealLoop
from writer.metrics import WriterMetrics
from writer.restore import restore

__all__ = ["WriterService"]

FENCING_WAIT_S = 10.0  # how long a generic fatal error waits for the consumer to name fencing

log = event_logger("evidence.writer")


class WriterService:
    """The single writer. ``start()`` connects, ``run()`` seals until stopped, ``close()``.

    No I/O in ``__init__``. ``request_stop()`` is safe from a signal handler: the open
    transaction is finished (committed or aborted) before ``run()`` returns 0. ``clients``
    makes the Kafka clients (confluent_kafka's unless given).
    """

    def __init__(self, config: WriterConfig, metrics: WriterMetrics | None = None,
                 clock: Callable[[], int] = now_micros, clients: KafkaClients | None = None,
                 fencing_wait_s: float = FENCING_WAIT_S) -> None:
        self.config = config
        self.metrics = metrics or WriterMetrics()
        self.names = config.topics.names
        self._clock = clock
        self._clients = clients or KafkaClients()
        self._fencing_wait_s = fencing_wait_s
        self._writer = {"writer_id": config.writer_id, "transactional_id": config.transactional_id,
                        "version": version()}
        self.sealer = Sealer(self._writer, config.topics.max_message_bytes,
                             config.dedup_window_s * 1_000_000, config.dedup_max_ids,
                             partitions=config.topics.partitions)
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._reader: Consumer | None = None
        self._loop: SealLoop | None = None
        self._stop = False
        self._failure: WriterError | None = None  # set from librdkafka callbacks

    # -- life cycle ---------------------------------------------------------------------------
    def request_stop(self) -> None:
        self._stop = True

    def start(self) -> None:
        """Check topics, fence any previous writer, join the group; raises on failure."""
        cfg, make = self.config, self._clients
        make.check_topics(cfg.bootstrap, cfg.topics)  # never creates: a wrong topic stops start-up
        self._producer = make.producer(producer_config(cfg, self._on_producer_error))
        # init_transactions bumps the producer epoch for our transactional.id: a previous
        # writer with this id is fenced and its open transaction aborted *before* we read
        # any state, so the heads we restore cannot move under us.
        with kafka_errors("init_transactions"):
            self._producer.init_transactions(TIMEOUT_S)
        self._reader = make.consumer(reader_config(cfg, self._on_consumer_error))
        self._consumer = make.consumer(consumer_config(cfg, self._on_consumer_error))
        self._consumer.subscribe([self.names.intake], on_assign=self._on_assign,
                                 on_revoke=self._on_revoke, on_lost=self._on_revoke)
        self._loop = SealLoop(self._producer, self._consumer, self.sealer, cfg, self.metrics,
                              self._clock, self._raise_failure)
        self.metrics.serve(cfg.metrics_port)
        log("info", "started", transactional_id=cfg.transactional_id, group_id=cfg.group_id,
            group_instance_id=cfg.instance_id, writer_id=cfg.writer_id, prefix=self.names.prefix,
            batch_max_messages=cfg.batch_max_messages, batch_linger_ms=cfg.batch_linger_ms)

    def close(self) -> None:
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                self._consumer.close()
            self._consumer = None
        if self._reader is not None:
            with contextlib.suppress(Exception):
                self._reader.close()
            self._reader = None
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._producer.flush(5)
            self._producer = None
        self._loop = None

    def run(self) -> int:
        """Seal until ``request_stop()``; 0 on a clean stop, 1 on a fatal error or fencing."""
        assert self._loop is not None, "start() first"
        try:
            while not self._stop:
                self._raise_failure()
                self._loop.step()
            log("info", "stopped", reason="stop requested; no transaction open")
            return 0
        except FencedError as e:
            return self._fenced(e)
        except WriterKafkaError as e:
            # A transactional producer that is fenced often reports only a generic _FATAL on
            # the operation it was in. Our consumer shares the writer's group.instance.id, so a
            # new writer fences it too, by code (FENCED_INSTANCE_ID), at its next heartbeat:
            # wait for that before calling the failure anything else.
            fenced = self._consumer_fenced() if e.fatal else None
            if fenced is not None:
                return self._fenced(fenced)
            return self._fatal(e)
        except WriterError as e:
            return self._fatal(e)
        finally:
            self.close()

    def _fatal(self, e: WriterError) -> int:
        log("error", "fatal", error=str(e), error_type=type(e).__name__,
            message="the writer cannot continue; exiting")
        return 1

    def _fenced(self, e: FencedError) -> int:
        log("error", "fenced", error=str(e), code=e.name, transactional_id=self.config.transactional_id,
            message="another writer with this transactional id / group instance id took over; exiting")
        return 1

    def _consumer_fenced(self) -> FencedError | None:
        """Serve the consumer's callbacks for a while; the fencing it reports, if any."""
        consumer = self._consumer
        if consumer is None:
            return None
        deadline = time.monotonic() + self._fencing_wait_s
        while time.monotonic() < deadline:
            if isinstance(self._failure, FencedError):
                return self._failure
            try:
                # Serves callbacks; nothing consumed here is processed.
                for m in consumer.consume(100, 0.2):
                    fenced = _fencing(m.error())
                    if fenced is not None:
                        return fenced
            except KafkaException as ke:
                return _fencing(error_of(ke))
        return self._failure if isinstance(self._failure, FencedError) else None

    # -- librdkafka callbacks (run inside poll/consume on this thread) ---------------------------
    def _on_producer_error(self, err: KafkaError) -> None:
        self._on_error(err, consumer=False)

    def _on_consumer_error(self, err: KafkaError) -> None:
        self._on_error(err, consumer=True)

    def _on_error(self, err: KafkaError, consumer: bool) -> None:
        if is_fatal(err):
            translated = translate(err, "kafka client", consumer)
            # Fencing names the cause best; let it replace a generic fatal error seen first.
            if self._failure is None or (isinstance(translated, FencedError)
                                         and not isinstance(self._failure, FencedError)):
                self._failure = translated
        else:
            log("warning", "kafka_error", code=err.name(), error=err.str())

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        reader = self._reader
        try:
            assert reader is not None, "start() creates the reader before subscribing"
            t0 = time.monotonic()
            # committed() asks for stable offsets (KIP-447): it waits for any transaction
            # still carrying offsets for these partitions, so the heads read next are those
            # of the last committed transaction, matching where we resume.
            with kafka_errors("committed offsets"):
                committed = consumer.committed(partitions, timeout=TIMEOUT_S)
            for tp in committed:
                heads, window = restore(reader, self.config, self.sealer, tp.partition, self._clock)
                self.sealer.assign(tp.partition, heads, window)
                log("info", "partition_assigned", partition=tp.partition, committed_offset=tp.offset,
                    streams=len(heads), dedup_ids=len(window))
            consumer.assign(committed)
            log("info", "assigned", partitions=[tp.partition for tp in committed],
                restore_s=round(time.monotonic() - t0, 3))
        except WriterError as e:
            self._failure = self._failure or e
            consumer.assign([])  # own nothing we could not restore
        except Exception as e:  # noqa: BLE001 - an exception must not vanish in a callback
            self._failure = self._failure or WriterError(f"partition assignment failed: {e!r}")
            consumer.assign([])

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Callbacks run inside consume(), which is only called between transactions, so no
        # transaction holds records of these partitions.
        for tp in partitions:
            self.sealer.revoke(tp.partition)
        log("info", "revoked", partitions=[tp.partition for tp in partitions])
        with contextlib.suppress(Exception):
            consumer.unassign()


def _fencing(err: KafkaError | None) -> FencedError | None:
    """``err`` as a :class:`FencedError` if it is the consumer's fencing, else None."""
    if err is not None and is_fenced(err, consumer=True):
        return cast(FencedError, translate(err, "consume", consumer=True))
    return None
