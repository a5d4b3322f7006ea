"""projections.heartbeat.EndOffsets against real Kafka: the heartbeat's end offsets, asked
from a thread of its own so that the projector's loop never waits for them."""

import os

import pytest

from projections.heartbeat import EndOffsets
from tests.fixtures.log import heads_of, wait_until

pytestmark = pytest.mark.integration


def test_end_offsets_follow_the_log_and_the_tracked_partitions(projection_config, topics,
                                                                produce_chain):
    cfg = projection_config
    recs = produce_chain(topics, streams={"a": 5, "b": 7, "c": 3}, response=os.urandom(64))
    ends = {}
    for r in recs:
        ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
    parts = list(range(topics.partitions))
    with EndOffsets(cfg, cfg.log_topic, interval_s=0.2) as probe:
        assert probe.latest(max_age_s=60) is None, "nothing tracked, nothing asked"
        probe.track(parts)
        wait_until("an answer", lambda: probe.latest(max_age_s=5) is not None)
        got = probe.latest(max_age_s=5)
        # read_committed: each transaction's commit marker takes an offset past its records
        assert set(got) == set(parts)
        assert all(got[p] >= ends.get(p, 0) for p in parts)
        assert sum(got.values()) >= len(recs)
        probe.track(parts[:1])
        # an answer for other partitions than the tracked ones is no answer
        assert probe.latest(max_age_s=5) is None or set(probe.latest(max_age_s=5)) == {parts[0]}
        wait_until("the new set", lambda: (probe.latest(max_age_s=5) or {}).keys() == {parts[0]})
        more = produce_chain(topics, streams={"a": 4}, start=heads_of(recs))
        p = more[0].partition
        probe.track([p])
        wait_until("the log's growth", lambda: (probe.latest(max_age_s=5) or {}).get(p, 0)
                   >= more[-1].offset + 1)
        # Every answer was asked for before this line reads the clock: older than 0 s.
        assert probe.latest(max_age_s=0.0) is None, "an answer older than max_age is stale"
    assert probe._thread is None
