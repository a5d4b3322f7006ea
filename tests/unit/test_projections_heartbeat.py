"""projections.heartbeat.EndOffsets after Kafka fails: a client that failed is never asked
again, a fresh one is made, and the answers (the heartbeat's end offsets) resume.

The admin clients are fakes of the one call the thread makes (``list_offsets``: a future per
partition), failing as librdkafka does after a broker stall: a ``KafkaException`` carrying
``FENCED_LEADER_EPOCH``, retriable."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException

from projections.config import ProjectorConfig
from projections.heartbeat import FIRST_RETRY_S, EndOffsets, retry_delay
from tests.fixtures.log import wait_until  # a bounded wait on a condition


FENCED = KafkaError(KafkaError.FENCED_LEADER_EPOCH,
                    "Broker: Leader epoch is older than broker epoch", retriable=True)


class FakeAdmin:
    """An admin client whose ``list_offsets`` answers ``ends`` or, while ``wedged``, fails
    every partition's future with FENCED_LEADER_EPOCH (what the projector's one client did
    for minutes after a broker stall)."""

    def __init__(self, ends: dict[int, int], wedged: bool) -> None:
        self.ends, self.wedged = ends, wedged
        self.calls = 0

    def list_offsets(self, requests, isolation_level=None, request_timeout=None):
        self.calls += 1
        out = {}
        for tp in requests:
            f: Future = Future()
            if self.wedged:
                f.set_exception(KafkaException(FENCED))
            else:
                f.set_result(type("Info", (), {"offset": self.ends[tp.partition]})())
            out[tp] = f
        return out


class Factory:
    """Makes a wedged client for each of the first ``wedged`` calls, healthy ones after."""

    def __init__(self, wedged: int, ends: dict[int, int]) -> None:
        self.wedged, self.ends = wedged, ends
        self.made: list[FakeAdmin] = []
        self.lock = threading.Lock()

    def __call__(self) -> FakeAdmin:
        with self.lock:
            admin = FakeAdmin(self.ends, wedged=len(self.made) < self.wedged)
            self.made.append(admin)
            return admin


def test_a_failed_client_is_replaced_and_the_answers_resume():
    ends = {0: 17, 1: 4}
    make = Factory(wedged=3, ends=ends)
    with EndOffsets(ProjectorConfig(), "t.log", interval_s=0.5, make_admin=make) as probe:
        probe.track([0, 1])
        wait_until("an answer", lambda: probe.latest(max_age_s=60) is not None)
        assert probe.latest(max_age_s=60) == ends
    assert probe.failures == 3
    # One client per failure, each asked once: a client that failed is never asked again.
    assert len(make.made) == 4
    assert [a.calls for a in make.made[:3]] == [1, 1, 1]
    assert make.made[3].calls >= 1 and not make.made[3].wedged


def test_a_client_that_answers_is_kept():
    make = Factory(wedged=0, ends={0: 5})
    with EndOffsets(ProjectorConfig(), "t.log", interval_s=0.01, make_admin=make) as probe:
        probe.track([0])
        wait_until("three answers", lambda: make.made and make.made[0].calls >= 3)
    assert len(make.made) == 1 and probe.failures == 0


def test_a_fresh_answer_follows_a_client_wedged_after_it_had_answered():
    """A healthy client that becomes wedged (the broker stalled): the next answer comes
    from a new client, so the heartbeat resumes instead of waiting for the old one."""
    make = Factory(wedged=0, ends={0: 5})
    with EndOffsets(ProjectorConfig(), "t.log", interval_s=0.05, make_admin=make) as probe:
        probe.track([0])
        wait_until("a first answer", lambda: probe.latest(max_age_s=60) == {0: 5})
        first = make.made[0]
        first.wedged = True
        make.ends[0] = 9
        wait_until("an answer from a new client", lambda: probe.latest(max_age_s=60) == {0: 9})
    assert len(make.made) == 2 and make.made[1] is not first
    assert probe.failures >= 1


@pytest.mark.parametrize("failures, interval, delay", [
    (0, 2.0, 2.0),                 # no failure: the ordinary interval
    (1, 2.0, FIRST_RETRY_S),       # the first retry comes soon, with a fresh client
    (2, 2.0, FIRST_RETRY_S * 2),
    (3, 2.0, FIRST_RETRY_S * 4),
    (4, 2.0, 2.0),                 # bounded by the interval
    (1000, 2.0, 2.0),
    (1, 0.1, 0.1),                 # never longer than the interval
])
def test_the_retry_delay_backs_off_to_the_interval(failures, interval, delay):
    assert retry_delay(failures, interval) == delay
