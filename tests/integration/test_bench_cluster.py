"""Section 9 of `make bench` (``bench.cluster``) on a tiny N, so it does not rot: a cluster of
three brokers is started beside the shared stack, the same captures are sealed on one broker
and on three, the takeover after a writer's kill -9 runs on the three, the cluster is stopped
and its files removed, and the report's section is written. No timing is asserted."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest

from tests.fixtures.kafka import one_cluster_at_a_time

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def test_three_brokers_beside_one_runs_end_to_end_and_cleans_up(kafka_bootstrap):
    from confluent_kafka.admin import AdminClient

    from bench import cluster
    from bench.run import make_messages

    tag = f"bench{uuid.uuid4().hex[:8]}"
    before = set(Path(tempfile.gettempdir()).glob("bench-cluster-*"))
    with one_cluster_at_a_time():
        result = cluster.measure(kafka_bootstrap, make_messages(240, 8, 256), 6, tag)

    assert [x["when"] for x in result["one"]] == ["before", "after"]
    for run in (*result["one"], result["three"]):
        assert run["captures"] == 240 and run["records_per_s"] > 0, run
        assert run["producer_records_per_s"] > 0
    assert [x["replication_factor"] for x in result["one"]] == [1, 1]
    assert result["three"]["replication_factor"] == 3
    assert result["ratio"] > 0 and result["producer_ratio"] > 0
    took = result["takeover"]
    assert took["lost"] == took["duplicated"] == 0 and took["sent"] > 0, took
    assert took["dead_partitions"] and set(took["restored"]) >= set(took["dead_partitions"])
    assert took["takeover_s"] > 0 and took["assigned_s"] > 0

    section = "\n".join(cluster.markdown(result))
    assert "## 9. Sealing on 3 brokers beside 1" in section
    assert "On 3 brokers, takeover after kill -9" in section
    # The cluster's root is gone, and the one-broker runs' topics were deleted.
    assert set(Path(tempfile.gettempdir()).glob("bench-cluster-*")) <= before
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert not [t for t in topics if t.startswith(tag)]
