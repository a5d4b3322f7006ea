"""The single writer against a real broker: gapless chains, crashes, fencing, shutdown."""

from __future__ import annotations

import random
import threading
import time

import pytest

from devstack.ports import free_port
from tests.fixtures.writer import (
    make_capture,
    produce_captures,
    read_all,
    verify_log,
    wait_for_count,
)

pytestmark = pytest.mark.integration


class Feeder(threading.Thread):
    """Produces captures to intake in small bursts until ``total`` is reached."""

    def __init__(self, bootstrap, settings, streams, total, burst=25, pause=0.02, seed=0):
        super().__init__(daemon=True)
        self.args = (bootstrap, settings)
        self.streams, self.total, self.burst, self.pause = streams, total, burst, pause
        self.rng = random.Random(seed)
        self.event_ids: list[str] = []
        self.error: BaseException | None = None

    def run(self):
        try:
            while len(self.event_ids) < self.total:
                n = min(self.burst, self.total - len(self.event_ids))
                events = [make_capture(self.rng.choice(self.streams)) for _ in range(n)]
                produce_captures(*self.args, events)
                self.event_ids += [e["event_id"] for e in events]
                time.sleep(self.pause)
        except BaseException as e:  # noqa: BLE001 - re-raised by finish()
            self.error = e

    def finish(self, timeout=60):
        self.join(timeout)
        assert not self.is_alive(), "feeder did not finish"
        if self.error:
            raise self.error
        return self.event_ids


def _event_ids(by_stream):
    return [r["body"]["event_id"] for recs in by_stream.values() for r in recs]


def test_concurrent_producers_give_gapless_verified_chains(kafka_bootstrap, make_topics, run_writer):
    settings = make_topics(partitions=3)
    streams = [f"tenant-{i}:chat" for i in range(8)]
    writer = run_writer(settings)
    feeders = [Feeder(kafka_bootstrap, settings, streams, 500, burst=50, pause=0, seed=i) for i in range(4)]
    for f in feeders:
        f.start()
    sent = [eid for f in feeders for eid in f.finish()]
    log = wait_for_count(kafka_bootstrap, settings.names.log, len(sent), 60, writer.assert_alive)
    by_stream = verify_log(log)
    assert sorted(_event_ids(by_stream)) == sorted(sent)
    assert set(by_stream) == set(streams)
    assert writer.terminate() == 0


def test_kill_9_repeatedly_loses_and_duplicates_nothing(kafka_bootstrap, make_topics, run_writer):
    settings = make_topics(partitions=3)
    streams = [f"s{i}" for i in range(8)]
    feeder = Feeder(kafka_bootstrap, settings, streams, 1500, burst=20, pause=0.01, seed=7)
    rng = random.Random(42)
    writer = run_writer(settings)
    feeder.start()
    for _ in range(5):
        time.sleep(rng.uniform(0.3, 1.2))
        writer.assert_alive()
        assert writer.kill() == -9
        writer = run_writer(settings)
    sent = feeder.finish()
    log = wait_for_count(kafka_bootstrap, settings.names.log, len(sent), 60, writer.assert_alive)
    by_stream = verify_log(log)
    sealed = _event_ids(by_stream)
    assert len(sealed) == len(set(sealed)), "an event was sealed twice"
    assert sorted(sealed) == sorted(sent), "a capture was lost or invented"
    assert read_all(kafka_bootstrap, settings.names.rejected) == []
    assert writer.terminate() == 0


def test_second_writer_with_the_same_identity_fences_the_first(kafka_bootstrap, make_topics, run_writer):
    settings = make_topics(partitions=3)
    streams = [f"s{i}" for i in range(4)]
    feeder = Feeder(kafka_bootstrap, settings, streams, 600, burst=10, pause=0.02, seed=3)
    first = run_writer(settings)
    feeder.start()
    wait_for_count(kafka_bootstrap, settings.names.log, 50, 30, first.assert_alive)
    second = run_writer(settings, wait_ready=False)
    # The first writer exits only once it sees a live rival hold its group.instance.id (a
    # generic fencing error alone makes it heal instead), which takes up to a session
    # timeout or so after the second joins: ~35 s on an idle machine.
    assert first.wait(120) == 3, "the fenced writer must exit 3: do not restart me"
    fenced = [e for e in first.events() if e.get("event") == "fenced"]
    assert fenced and fenced[0]["level"] == "error", first.output()[-3000:]
    assert "took over" in fenced[0]["message"]
    second.wait_ready()
    sent = feeder.finish()
    log = wait_for_count(kafka_bootstrap, settings.names.log, len(sent), 60, second.assert_alive)
    by_stream = verify_log(log)
    assert sorted(_event_ids(by_stream)) == sorted(sent)
    writers = {r["seal"]["writer"]["writer_id"] for recs in by_stream.values() for r in recs}
    assert len(writers) == 2
    assert second.terminate() == 0


def test_sigterm_exits_zero_and_leaves_no_gap(kafka_bootstrap, make_topics, run_writer):
    settings = make_topics(partitions=3)
    streams = [f"s{i}" for i in range(4)]
    feeder = Feeder(kafka_bootstrap, settings, streams, 800, burst=20, pause=0.01, seed=5)
    writer = run_writer(settings)
    feeder.start()
    wait_for_count(kafka_bootstrap, settings.names.log, 100, 30, writer.assert_alive)
    assert writer.terminate(30) == 0
    assert writer.events()[-1]["event"] in ("stopped", "revoked")
    assert any(e["event"] == "stopped" for e in writer.events())
    middle = verify_log(read_all(kafka_bootstrap, settings.names.log))
    assert sum(map(len, middle.values())) >= 100
    writer = run_writer(settings)
    sent = feeder.finish()
    log = wait_for_count(kafka_bootstrap, settings.names.log, len(sent), 60, writer.assert_alive)
    assert sorted(_event_ids(verify_log(log))) == sorted(sent)
    assert writer.terminate() == 0


def test_the_same_event_id_is_sealed_once_also_across_a_restart(kafka_bootstrap, make_topics, run_writer):
    settings = make_topics(partitions=3)
    x = make_capture("dup-stream")
    y = make_capture("dup-stream")
    writer = run_writer(settings)
    produce_captures(kafka_bootstrap, settings, [x, x, y])           # twice in one batch or two
    produce_captures(kafka_bootstrap, settings, [x])                 # a later resend
    wait_for_count(kafka_bootstrap, settings.names.log, 2, 30, writer.assert_alive)
    writer.wait_event("duplicate", 30, count=2)
    assert writer.terminate() == 0

    writer = run_writer(settings)                                    # window rebuilt from the log
    z = make_capture("dup-stream")
    produce_captures(kafka_bootstrap, settings, [x, y, z])
    log = wait_for_count(kafka_bootstrap, settings.names.log, 3, 30, writer.assert_alive)
    writer.wait_event("duplicate", 30, count=2)
    by_stream = verify_log(read_all(kafka_bootstrap, settings.names.log))
    assert _event_ids(by_stream) == [x["event_id"], y["event_id"], z["event_id"]]
    assert len(log) == 3
    assert writer.terminate() == 0


def test_wrong_topics_stop_start_up_with_a_clear_message(kafka_bootstrap, make_topics, run_writer):
    from dataclasses import replace

    from topics import TopicNames

    settings = replace(make_topics(partitions=3), names=TopicNames("no-such-prefix-x1"))
    writer = run_writer(settings, wait_ready=False)
    assert writer.wait(30) == 1
    line = [e for e in writer.events() if e.get("event") == "cannot_start"]
    assert line and "topic does not exist" in line[0]["error"], writer.output()


def test_metrics_count_sealed_rejected_and_duplicates(kafka_bootstrap, make_topics, run_writer):
    import urllib.request

    port = free_port()
    settings = make_topics(partitions=2)
    writer = run_writer(settings, metrics_port=port)
    x = make_capture("m-stream")
    produce_captures(kafka_bootstrap, settings, [x, x, make_capture("m-stream")])
    from tests.fixtures.writer import produce_intake

    produce_intake(kafka_bootstrap, settings, [(b"m-stream", b"junk")])
    wait_for_count(kafka_bootstrap, settings.names.rejected, 1, 30, writer.assert_alive)
    deadline = time.monotonic() + 15
    while True:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        if 'evidence_writer_rejected_total{reason="NOT_AVRO"} 1.0' in text:
            break
        assert time.monotonic() < deadline, text
        time.sleep(0.2)
    assert "evidence_writer_sealed_total 2.0" in text
    assert "evidence_writer_duplicates_total 1.0" in text
    assert "evidence_writer_transaction_commit_seconds_count" in text
    assert "evidence_writer_batch_size_bucket" in text
    assert writer.terminate() == 0
