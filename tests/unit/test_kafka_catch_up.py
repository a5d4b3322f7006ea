"""Every consumer of the project that may meet a backlog fetches it without librdkafka's
second-long pause at a full local queue (``server.kafka.CATCH_UP``), and librdkafka itself
accepts each consumer's settings (a misspelt property is refused when the client is made:
no broker is needed for that)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from audit.kafka_log import consumer_config as audit_config
from projections import ProjectorConfig
from projections.reader import LogReader
from publisher.config import PublisherConfig
from publisher.service import Publisher
from server.kafka import CATCH_UP
from tests.fixtures.writer import log_signing_key
from writer.config import WriterConfig
from writer.kafka_io import QUEUED_KBYTES, consumer_config, reader_config

BOOTSTRAP = "127.0.0.1:1"  # never reached: making a client does not connect


CONSUMERS = ("writer intake", "writer restore", "projector", "projector, one group", "audit",
             "publisher")


def _config(name: str) -> dict:
    writer = WriterConfig.from_env({"EVIDENCE_KAFKA_BOOTSTRAP": BOOTSTRAP})
    projector = ProjectorConfig(bootstrap=BOOTSTRAP)
    if name == "writer intake":
        return consumer_config(writer, print)
    if name == "writer restore":
        return reader_config(writer, print)
    if name == "projector":
        return LogReader(projector).consumer_config()
    if name == "projector, one group":
        return LogReader(projector, group="g").consumer_config()
    if name == "audit":
        return audit_config(BOOTSTRAP)
    key = log_signing_key()[0]
    publisher = Publisher(PublisherConfig.from_env({"EVIDENCE_KAFKA_BOOTSTRAP": BOOTSTRAP,
                                                    "EVIDENCE_LOG_NAME": key.name}), key)
    try:
        return publisher.consumer_config()
    finally:
        publisher.close()


@pytest.mark.parametrize("name", CONSUMERS)
def test_a_consumer_that_may_meet_a_backlog_looks_again_at_once_when_its_queue_was_full(name):
    conf = _config(name)
    # 10 ms, not librdkafka's 1 s: the pause this setting takes away.
    assert conf["fetch.queue.backoff.ms"] == CATCH_UP["fetch.queue.backoff.ms"] == 10
    c = Consumer({k: v for k, v in conf.items() if k != "error_cb"})
    c.close()


def test_the_writer_prefetches_a_few_batches_not_librdkafkas_64_mib():
    conf = consumer_config(WriterConfig.from_env({}), print)
    assert conf["queued.max.messages.kbytes"] == QUEUED_KBYTES == 16 * 1024
    # Room for two default batches of 1 KiB captures (~1.3 KB a message with its envelope).
    assert QUEUED_KBYTES * 1024 >= 2 * WriterConfig.from_env({}).batch_max_messages * 1300
