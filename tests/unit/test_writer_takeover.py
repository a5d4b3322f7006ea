"""A rebalance restores only the partitions that move: a writer keeps the state of a revoked
partition and uses it again when the partition comes back with the committed offset it had
at the revoke; when another writer sealed on it meanwhile, or the partition was lost, it is
restored. And the stable committed offsets are asked again until a dead writer's
transaction is gone, not given up after one timeout. On the fake cluster of
``test_writer_shell``."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from tests.unit.test_writer_shell import NAMES, Fakes, assert_gapless_chain, events
from writer import kafka_io
from writer.errors import WriterKafkaError
from writer.metrics import WriterMetrics
from writer.service import WriterService

pytestmark = pytest.mark.timeout(30)


def _assign(f: Fakes, partitions: list[int]) -> None:
    """The assign callback alone, as librdkafka runs it after a revoke's rejoin."""
    consumer = f.service._consumer  # the first writer's, whoever joined since
    _topics, on_assign, _on_revoke = consumer._subscription
    on_assign(consumer, [TopicPartition(NAMES.intake, p) for p in partitions])


def test_a_partition_given_back_unchanged_is_kept_not_restored(caplog):
    f = Fakes().start()
    ids = f.captures(3)
    f.step()
    caplog.set_level(logging.INFO, logger="evidence.writer")
    caplog.clear()  # what start() logged, when an earlier test left the logger at INFO
    f.intake_consumer.rebalance(revoke=[0, 1], assign=[0, 1])
    [revoked] = events(caplog, "revoked")
    assert revoked["kept"] == [0], "partition 1 has no committed offset: nothing to keep"
    [assigned] = events(caplog, "assigned")
    assert assigned["kept"] == [0] and assigned["partitions"] == [0, 1]
    assert [e["partition"] for e in events(caplog, "partition_assigned")] == [1]
    more = f.captures(2)
    f.step()
    assert_gapless_chain(f.sealed(), ids + more)
    assert f.intake_offset() == 5


def test_a_kept_partition_has_no_trees_until_it_is_assigned_again():
    """Between the revoke and the assign an idle writer signs what is due of the trees it
    holds; a partition it may have lost must not be among them."""
    f = Fakes().start()
    f.captures(3)
    f.step()
    trees = f.service.sealer.trees
    before = trees.of(0)
    assert before and trees.tree(0, next(iter(before))).range.size == 3
    f.intake_consumer.rebalance(revoke=[0, 1])
    assert f.service.sealer.owned() == [0] and trees.of(0) == {}
    _assign(f, [0, 1])
    assert trees.of(0) == before


def test_a_partition_another_writer_sealed_on_meanwhile_is_restored(caplog):
    f = Fakes().start()
    ids = f.captures(3)
    f.step()
    f.intake_consumer.rebalance(revoke=[0, 1])
    assert f.service.sealer.owned() == [0], "kept, with offset 3"
    other = WriterService(replace(f.config, transactional_id="tx-2"), WriterMetrics(),
                          clock=f.clock, clients=f.clients())
    other.start()
    more = f.captures(2)
    other._loop.step()
    assert other._loop.step() == 0 and f.intake_offset() == 5
    other.close()
    caplog.set_level(logging.INFO, logger="evidence.writer")
    caplog.clear()  # what start() logged, when an earlier test left the logger at INFO
    _assign(f, [0, 1])
    [assigned] = events(caplog, "assigned")
    assert assigned["kept"] == [] and assigned["partitions"] == [0, 1]
    last = f.captures(2)
    f.step()
    # Kept, the first writer would have sealed seq 4 again after its own seq 3.
    assert_gapless_chain(f.sealed(), ids + more + last)


def test_a_kept_partition_assigned_elsewhere_is_let_go(caplog):
    f = Fakes().start()
    f.captures(3)
    f.step()
    f.intake_consumer.rebalance(revoke=[0, 1], assign=[1])
    assert f.service.sealer.owned() == [1]


def test_lost_partitions_are_never_kept(caplog):
    f = Fakes().start()
    f.captures(3)
    f.step()
    caplog.set_level(logging.INFO, logger="evidence.writer")
    caplog.clear()  # what start() logged, when an earlier test left the logger at INFO
    f.service._on_lost(f.intake_consumer, [TopicPartition(NAMES.intake, p) for p in (0, 1)])
    assert f.service.sealer.owned() == []
    [revoked] = events(caplog, "revoked")
    assert revoked["lost"] is True
    _assign(f, [0, 1])
    [assigned] = events(caplog, "assigned")
    assert assigned["kept"] == []


class _Unstable:
    """A consumer whose committed() times out ``times`` times, as librdkafka's does while a
    dead writer's transaction holds the offsets, then answers."""

    def __init__(self, times: int, code: int = KafkaError._TIMED_OUT) -> None:
        self.times, self.code, self.asked = times, code, []

    def committed(self, partitions, timeout=None):
        self.asked.append(timeout)
        if len(self.asked) <= self.times:
            raise KafkaException(KafkaError(self.code, "Failed to get committed offsets"))
        return [TopicPartition(tp.topic, tp.partition, 7) for tp in partitions]


def test_stable_offsets_are_asked_again_until_they_come(caplog):
    c = _Unstable(times=3)
    caplog.set_level(logging.INFO, logger="evidence.writer")
    caplog.clear()  # what start() logged, when an earlier test left the logger at INFO
    got = kafka_io.stable_committed(c, [TopicPartition("t", 0)], wait_s=30.0)
    assert [tp.offset for tp in got] == [7]
    assert len(c.asked) == 4 and all(t <= kafka_io.STABLE_ASK_S for t in c.asked)
    assert len([r for r in caplog.records if r.getMessage() == "waiting_for_stable_offsets"]) == 1


def test_stable_offsets_give_up_past_the_wait_and_on_other_errors():
    with pytest.raises(WriterKafkaError) as e:
        kafka_io.stable_committed(_Unstable(times=10**6), [TopicPartition("t", 0)], wait_s=0.0)
    assert e.value.code == KafkaError._TIMED_OUT
    c = _Unstable(times=1, code=KafkaError.GROUP_AUTHORIZATION_FAILED)
    with pytest.raises(WriterKafkaError):
        kafka_io.stable_committed(c, [TopicPartition("t", 0)], wait_s=30.0)
    assert len(c.asked) == 1
    c = _Unstable(times=10**6)
    with pytest.raises(WriterKafkaError):
        kafka_io.stable_committed(c, [TopicPartition("t", 0)], wait_s=30.0, stopping=lambda: True)
    assert len(c.asked) == 1


def test_a_stop_keeps_nothing_and_never_asks_for_committed_offsets(caplog):
    """The revoke that ``close()`` runs comes while the session lets go of its consumer:
    asking for committed offsets then never gets an answer (a real stop waited 5 s for it)."""
    f = Fakes().start()
    f.captures(3)
    f.step()
    consumer = f.intake_consumer
    asked: list = []
    real = consumer.committed
    consumer.committed = lambda parts, timeout=None: asked.append(parts) or real(parts, timeout)
    caplog.set_level(logging.INFO, logger="evidence.writer")
    caplog.clear()
    f.service.close()
    [revoked] = events(caplog, "revoked")
    assert (revoked["kept"], asked) == ([], [])
    assert f.service.sealer.owned() == []
