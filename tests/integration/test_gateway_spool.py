"""Kafka down while the application keeps calling: the calls return promptly, the captures
spool to disk, and once Kafka is back they appear on intake in order, exactly the spooled ones,
and a writer against that broker seals them into its log, gapless and chained."""

from __future__ import annotations

import hashlib
import sys
import threading
import time
import uuid

import openai
import pytest

from devstack import StackConfig
from devstack import kafka as devkafka
from devstack.ports import free_port
from evidence_client import Recorder
from evidence_client.spool import scan
import evidence_contract as schemas
from tests.fixtures.provider import read_intake
from tests.fixtures.writer import WriterProcess, verify_log, wait_for_count, writer_env
from topics import TopicNames, TopicSettings, ensure_topics

pytestmark = pytest.mark.integration


def wait_for(what: str, predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def call_n(recorder: Recorder, fake, n: int, tag: str) -> None:
    """``n`` calls through the recorder, in a thread; they must all return within the bounded
    wait, whatever Kafka does (a call that waited on Kafka while it is down never returns)."""
    client = openai.OpenAI(base_url=fake.url + "/v1", api_key="k", max_retries=0,
                           http_client=recorder.http_client())
    errors: list[BaseException] = []

    def calls() -> None:
        try:
            for i in range(n):
                out = client.chat.completions.create(
                    model="gpt-4o", stream=i % 2 == 0,
                    messages=[{"role": "user", "content": f"{tag} {i}"}])
                if i % 2 == 0:
                    list(out)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)

    thread = threading.Thread(target=calls, name=f"calls-{tag}", daemon=True)
    thread.start()
    wait_for(f"{n} calls to return (a call waited on the gateway)",
             lambda: not thread.is_alive(), 60)
    if errors:
        raise errors[0]


def content_keys(fake) -> list[bytes]:
    return [hashlib.sha256(b"\x00" + s.request_body).digest() for s in fake.seen]


def test_kafka_down_captures_spool_and_appear_in_the_log_once_kafka_is_back(tmp_path,
                                                                           fake_provider):
    cfg = StackConfig(root=tmp_path / "kafka", kafka_port=free_port(), controller_port=free_port())
    settings = TopicSettings(names=TopicNames(f"spool{uuid.uuid4().hex[:8]}"), partitions=3)
    spool_dir = tmp_path / "spool"
    n = 8
    recorder = Recorder(cfg.bootstrap, "acme:spool-test", topic_prefix=settings.names.prefix,
                        spool_dir=spool_dir, delivery_timeout_ms=3000, close_timeout=20)
    writer = None
    try:
        recorder.start()
        call_n(recorder, fake_provider, n, "down")
        wait_for("captures to spool", lambda: recorder.metrics.spooled == n, 20)
        spooled = scan(spool_dir)
        assert len(spooled) == n
        assert recorder.metrics.delivered == 0

        devkafka.start(cfg)
        ensure_topics(cfg.bootstrap, settings)
        wait_for("the spool to be resent", lambda: recorder.metrics.resent == n, 45)
        # the acknowledged entries leave the spool file right after they are counted
        wait_for("the spool to be emptied", lambda: scan(spool_dir) == [], 10)

        caps = read_intake(cfg.bootstrap, settings.names.intake, n, timeout=20)
        assert [c.value for c in caps] == [e.value for e in spooled]  # exactly, in order
        assert [c.event["content_key"] for c in caps] == content_keys(fake_provider)
        assert all(c.key == b"acme:spool-test" for c in caps)
        assert len({c.partition for c in caps}) == 1

        # Back to normal: the next call goes straight to Kafka.
        call_n(recorder, fake_provider, 1, "up")
        wait_for("a direct delivery", lambda: recorder.metrics.delivered == 1, 30)
        recorder.close()
        m = recorder.metrics.snapshot()
        assert (m["captured"], m["spooled"], m["resent"], m["delivered"], m["failed"]) == \
            (n + 1, n, n, 1, 0)

        # The writer on the broker that was down seals them: the spooled captures are seq
        # 1..n in the order they were made, the direct one n+1, each exactly once.
        writer = WriterProcess([sys.executable, "-m", "cli.main", "writer"], writer_env(
            cfg.bootstrap, settings, transactional_id=f"tx-{settings.names.prefix}",
            group_id=f"wg-{settings.names.prefix}"))
        log = wait_for_count(cfg.bootstrap, settings.names.log, n + 1, 45, writer.assert_alive)
        by_stream = verify_log(log)
        assert list(by_stream) == ["acme:spool-test"]
        sealed = by_stream["acme:spool-test"]
        assert len(sealed) == n + 1
        spooled_events = [schemas.decode(e.value)[1] for e in spooled]
        assert [r["body"]["event_id"] for r in sealed[:n]] == \
            [e["event_id"] for e in spooled_events]
        assert [r["body"] for r in sealed[:n]] == spooled_events  # sealed as captured
        assert [r["body"]["content_key"] for r in sealed] == content_keys(fake_provider)
        assert [r["body"]["response_bytes"] for r in sealed] == \
            [s.response_body for s in fake_provider.seen]
        assert writer.terminate() == 0
    finally:
        recorder.close(timeout=5)
        if writer is not None and writer.alive():
            writer.kill()
        devkafka.stop(cfg)


def test_close_leaves_the_spool_for_the_next_recorder(kafka_bootstrap, topics, tmp_path,
                                                      fake_provider):
    spool_dir = tmp_path / "spool"
    nowhere = f"127.0.0.1:{free_port()}"
    first = Recorder(nowhere, "acme:handover", topic_prefix=topics.names.prefix,
                     spool_dir=spool_dir, delivery_timeout_ms=2000)
    with first:
        call_n(first, fake_provider, 5, "before")
        wait_for("captures to spool", lambda: first.metrics.spooled == 5, 20)
    spooled = scan(spool_dir)
    assert len(spooled) == 5

    second = Recorder(kafka_bootstrap, "acme:handover", topic_prefix=topics.names.prefix,
                      spool_dir=spool_dir)
    with second:
        call_n(second, fake_provider, 2, "after")  # sent after the old ones
        wait_for("all to be delivered",
                 lambda: second.metrics.resent + second.metrics.delivered == 7, 30)
    caps = read_intake(kafka_bootstrap, topics.names.intake, 7)
    assert [c.value for c in caps[:5]] == [e.value for e in spooled]
    assert [c.event["content_key"] for c in caps] == content_keys(fake_provider)
    assert scan(spool_dir) == []
