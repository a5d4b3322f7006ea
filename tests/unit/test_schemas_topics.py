"""Topic names and the keyed partitioner of the wire contract: Kafka's murmur2, pinned to the
vectors of Kafka's own UtilsTest, so every client puts a stream on the same partition."""

import pytest

from evidence_contract import TopicNames
from evidence_contract.topics import murmur2, partition_for


@pytest.mark.parametrize("key, expected", [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
])
def test_murmur2_is_kafkas(key, expected):
    assert murmur2(key) == expected


def test_partition_for_is_positive_murmur2_modulo_the_partition_count():
    assert partition_for("foobar", 6) == (-790332482 & 0x7FFFFFFF) % 6
    assert {partition_for(f"acme:{i}", 6) for i in range(100)} == set(range(6))


def test_topic_names_under_a_prefix():
    assert TopicNames("x").all() == ("x.intake", "x.log", "x.writer-state", "x.rejected",
                                    "x.checkpoints", "x.erasures", "x.tree")
