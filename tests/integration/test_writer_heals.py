"""The writer rides out what breaks around it: a broker killed and restarted, a broker
stalled past the session timeout, a rebalance mid-batch, a coordinator that fences it
without a second writer. It exits only when a real second writer holds its identity (exit 3,
so a supervisor does not restart it into a fencing war).

The broker tests run a private broker (devstack on free ports) that they may kill."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import uuid
from typing import Any

import pytest

from devstack import StackConfig
from devstack import kafka as devkafka
from devstack.config import read_pid
from devstack.ports import free_port
from tests.fixtures.writer import (
    WriterProcess,
    encode_capture,
    make_capture,
    verify_log,
    wait_for_count,
    writer_env,
)
from topics import TopicNames, TopicSettings, ensure_topics

pytestmark = pytest.mark.integration


@pytest.fixture
def private_kafka(tmp_path):
    cfg = StackConfig(root=tmp_path / "kafka", kafka_port=free_port(),
                      controller_port=free_port())
    devkafka.start(cfg)
    try:
        yield cfg
    finally:
        devkafka.stop(cfg)


def broker_pid(cfg: StackConfig) -> int:
    pid = read_pid(cfg.kafka_dir / "pid")
    assert pid, "no broker pid"
    return pid


def kill_broker(cfg: StackConfig) -> None:
    pid = broker_pid(cfg)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:  # the broker may be our child (devstack started it from this process): reap it
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
        time.sleep(0.05)
    raise AssertionError("the broker did not die")


class Load(threading.Thread):
    """Captures to intake in small bursts until stopped, as a gateway sends them: a capture
    counts as sent once the broker acknowledged it, and one whose delivery failed (a broker
    stalled or restarted under a burst's producer) is sent again, the same bytes, by the next
    burst's producer, as the gateway's spool would. The writer seals such a capture once
    whether or not the failed attempt reached the log (it drops a repeated event_id)."""

    GIVE_UP_S = 30.0

    def __init__(self, bootstrap: str, settings: TopicSettings, streams: list[str],
                 per_burst: int = 10, pause: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.settings = bootstrap, settings
        self.streams, self.per_burst, self.pause = streams, per_burst, pause
        self.event_ids: list[str] = []
        self.resent = 0
        self.delivery_errors: list[str] = []
        self.error: BaseException | None = None
        self._halt = threading.Event()
        self._n = 0

    def run(self) -> None:
        pending: list[dict] = []
        try:
            while pending or not self._halt.is_set():
                events = pending
                if not self._halt.is_set():
                    for _ in range(self.per_burst):
                        events.append(make_capture(self.streams[self._n % len(self.streams)]))
                        self._n += 1
                pending = self._send(events)
                self.resent += len(pending)
                time.sleep(1.0 if pending else self.pause)
        except BaseException as e:  # noqa: BLE001 - re-raised by finish()
            self.error = e

    def _send(self, events: list[dict]) -> list[dict]:
        """Produce ``events`` with a new producer; returns those not acknowledged. A burst
        the broker has not acknowledged in ``GIVE_UP_S`` is purged and its producer dropped,
        so a producer that does not recover from the broker's outage cannot stall the load."""
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                      "acks": "all", "linger.ms": 5, "partitioner": "murmur2_random"})
        acked: set[str] = set()

        def done(event_id: str, err: Any) -> None:
            if err is None:
                acked.add(event_id)
                self.event_ids.append(event_id)
            else:
                self.delivery_errors.append(str(err))

        for e in events:
            while True:
                try:
                    p.produce(self.settings.names.intake, encode_capture(e), e["stream"].encode(),
                              on_delivery=lambda err, _m, i=e["event_id"]: done(i, err))
                    break
                except BufferError:
                    p.poll(0.05)
        deadline = time.monotonic() + self.GIVE_UP_S
        while p.flush(1.0):
            if time.monotonic() > deadline:
                self.delivery_errors.append(f"a burst not acknowledged in {self.GIVE_UP_S} s")
                p.purge()
                p.flush(10)  # serves the purged messages' callbacks
                break
        return [e for e in events if e["event_id"] not in acked]

    def assert_running(self) -> None:
        """Raise what ended the load, if anything did: a wait for records it should have sent
        then fails with the cause instead of a count."""
        if self.error:
            raise AssertionError(f"the load stopped: {self.error!r}") from self.error

    def finish(self, timeout: float = 120) -> list[str]:
        self._halt.set()
        self.join(timeout)
        assert not self.is_alive(), "the load did not finish"
        if self.error:
            raise self.error
        return self.event_ids


def _settings() -> TopicSettings:
    return TopicSettings(names=TopicNames(f"h{uuid.uuid4().hex[:10]}"), partitions=3)


def _writer(cfg: StackConfig, settings: TopicSettings, **opts) -> WriterProcess:
    ids = {"transactional_id": f"tx-{settings.names.prefix}",
           "group_id": f"wg-{settings.names.prefix}"}
    return WriterProcess([sys.executable, "-m", "cli.main", "writer"],
                         writer_env(cfg.bootstrap, settings, **{**ids, **opts}))


def _sealed_once(log_msgs, sent: list[str]) -> None:
    by_stream = verify_log(log_msgs)
    sealed = [r["body"]["event_id"] for recs in by_stream.values() for r in recs]
    assert len(sealed) == len(set(sealed)), "an event was sealed twice"
    assert sorted(sealed) == sorted(sent), "a capture was lost or invented"


def test_the_writer_rides_out_a_broker_kill_and_restart_and_resumes_sealing(private_kafka):
    cfg, settings = private_kafka, _settings()
    ensure_topics(cfg.bootstrap, settings)
    writer = _writer(cfg, settings)
    load = Load(cfg.bootstrap, settings, [f"s{i}" for i in range(6)])
    try:
        writer.wait_ready(60)
        load.start()
        for _round in range(2):
            wait_for_count(cfg.bootstrap, settings.names.log, len(load.event_ids) // 2 + 20,
                           60, writer.assert_alive)
            kill_broker(cfg)
            time.sleep(3)  # the outage itself: the broker stays down a while
            devkafka.start(cfg)
            # Sealing resumes: records committed after the restart, the writer alive.
            before = len(load.event_ids)
            wait_for_count(cfg.bootstrap, settings.names.log, before + 20, 90,
                           writer.assert_alive)
        sent = load.finish()
        log = wait_for_count(cfg.bootstrap, settings.names.log, len(sent), 120,
                             writer.assert_alive)
        _sealed_once(log, sent)
        assert writer.terminate(30) == 0
    finally:
        if load.is_alive():
            load._halt.set()
        if writer.alive():
            writer.kill()


def test_a_broker_stalled_past_the_session_timeout_does_not_end_the_writer(private_kafka):
    """SIGSTOP for 20 s (twice the session timeout), then SIGCONT: was `consume: Fatal error:
    Static consumer fenced by other consumer with same group.instance.id` and exit 1."""
    cfg, settings = private_kafka, _settings()
    ensure_topics(cfg.bootstrap, settings)
    writer = _writer(cfg, settings)
    load = Load(cfg.bootstrap, settings, [f"s{i}" for i in range(6)])
    pid = broker_pid(cfg)
    try:
        writer.wait_ready(60)
        load.start()
        def healthy() -> None:
            writer.assert_alive()
            load.assert_running()

        wait_for_count(cfg.bootstrap, settings.names.log, 50, 60, healthy)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(20)
            writer.assert_alive()
        finally:
            os.kill(pid, signal.SIGCONT)
        before = len(load.event_ids)
        try:
            wait_for_count(cfg.bootstrap, settings.names.log, before + 20, 90, healthy)
        except AssertionError as e:
            raise AssertionError(f"{e}\nwriter:\n{writer.output()[-6000:]}") from e
        sent = load.finish()
        log = wait_for_count(cfg.bootstrap, settings.names.log, len(sent), 120, healthy)
        _sealed_once(log, sent)
        assert not [e for e in writer.events() if e.get("event") == "fenced"]
        assert writer.terminate(30) == 0
    finally:
        os.kill(pid, signal.SIGCONT)
        if load.is_alive():
            load._halt.set()
        if writer.alive():
            writer.kill()


def test_writers_joining_and_leaving_the_group_under_load_never_exit(kafka_bootstrap,
                                                                     make_topics, run_writer):
    """Scale-out by partition: a second writer (its own transactional id) joins and leaves,
    again and again, while the first seals. Each join revokes partitions of the first in the
    middle of its batches (was: exit 1, `message from unowned partition`)."""
    settings = make_topics(partitions=6)
    group = f"wg-{uuid.uuid4().hex[:10]}"
    fast = {"group_id": group, "session_timeout_ms": 6000, "batch_linger_ms": 250}
    first = run_writer(settings, transactional_id=f"tx-a-{group}", **fast)
    load = Load(kafka_bootstrap, settings, [f"s{i}" for i in range(12)], per_burst=25,
                pause=0.0)
    load.start()
    try:
        for i in range(6):
            second = run_writer(settings, wait_ready=False, transactional_id=f"tx-b{i}-{group}",
                                **fast)
            second.wait_event("assigned", 60)
            sent_so_far = len(load.event_ids)  # more load while both are in the group
            wait_for_count(kafka_bootstrap, settings.names.log, sent_so_far + 50, 60,
                           second.assert_alive)
            first.assert_alive()
            second.assert_alive()
            assert second.terminate(30) == 0
            first.wait_event("assigned", 60, count=i + 2)  # the partitions come back
        sent = load.finish()
        log = wait_for_count(kafka_bootstrap, settings.names.log, len(sent), 120,
                             first.assert_alive)
        _sealed_once(log, sent)
        revokes = [e for e in first.events() if e.get("event") == "revoked"]
        assert len(revokes) >= 6
        assert first.terminate(30) == 0
    finally:
        if load.is_alive():
            load._halt.set()
