"""projections.kept.Kept: a kept value is used only where its partition stands as this
process left it; a batch's values count only once it committed."""

from __future__ import annotations

from evidence_contract.merkle import CompactRange
from projections.kept import Kept


def grown(n: int) -> CompactRange:
    cr = CompactRange()
    for i in range(n):
        cr.append(bytes([i]) * 32)
    return cr


def committed(cache: Kept, gen: str, ranges: dict, expected: dict, moved: dict) -> None:
    cache.stage(gen, ranges)
    cache.commit(gen, expected, moved)


def test_a_range_is_kept_only_once_its_batch_committed():
    cache = Kept()
    cache.stage("g1", {"a": (0, grown(3))})
    assert cache.get("g1", {"a": 0}, {0: 0}) == {}
    cache.commit("g1", {0: 0}, {0: 3})
    assert cache.get("g1", {"a": 0}, {0: 3})["a"].size == 3


def test_a_range_is_used_only_where_its_partition_stands_as_left():
    cache = Kept()
    committed(cache, "g1", {"a": (0, grown(3)), "b": (1, grown(2))}, {0: 0, 1: 0}, {0: 3, 1: 2})
    assert set(cache.get("g1", {"a": 0, "b": 1}, {0: 3, 1: 2})) == {"a", "b"}
    assert set(cache.get("g1", {"a": 0, "b": 1}, {0: 5, 1: 2})) == {"b"}, "0 moved elsewhere"
    assert cache.get("g1", {"a": 1}, {0: 3, 1: 2}) == {}, "a stream on another partition"
    assert cache.get("g2", {"a": 0}, {0: 3}) == {}, "another generation"
    assert cache.get("g1", {"a": 0}, {1: 2}) == {}, "a partition not the batch's"


def test_a_partition_found_elsewhere_loses_its_ranges_at_the_next_commit():
    cache = Kept()
    committed(cache, "g1", {"a": (0, grown(3)), "b": (0, grown(1)), "c": (1, grown(1))},
              {0: 0, 1: 0}, {0: 4, 1: 1})
    # partition 0 was at 9 (another projector wrote it): only what this batch read is kept
    committed(cache, "g1", {"a": (0, grown(6))}, {0: 9, 1: 1}, {0: 12, 1: 1})
    assert {s: cr.size for s, cr in cache.get("g1", {"a": 0, "b": 0, "c": 1},
                                              {0: 12, 1: 1}).items()} == {"a": 6, "c": 1}


def test_a_batch_without_trees_moves_its_partitions_kept_ranges_along():
    cache = Kept()
    committed(cache, "g1", {"a": (0, grown(3))}, {0: 0}, {0: 3})
    cache.commit("g1", {0: 3}, {0: 5})  # nothing staged: positions moved past other records
    assert cache.get("g1", {"a": 0}, {0: 5})["a"].size == 3


def test_clear_forgets_the_staged_batch_and_every_range():
    cache = Kept()
    committed(cache, "g1", {"a": (0, grown(3))}, {0: 0}, {0: 3})
    cache.stage("g1", {"a": (0, grown(4))})
    cache.clear()
    cache.commit("g1", {0: 3}, {0: 4})
    assert len(cache) == 0 and cache.get("g1", {"a": 0}, {0: 4}) == {}


def test_past_its_limit_the_least_recently_grown_go_first():
    cache = Kept(limit=2)
    committed(cache, "g1", {"a": (0, grown(1))}, {0: 0}, {0: 1})
    committed(cache, "g1", {"b": (0, grown(1))}, {0: 1}, {0: 2})
    committed(cache, "g1", {"a": (0, grown(2))}, {0: 2}, {0: 3})
    committed(cache, "g1", {"c": (0, grown(1))}, {0: 3}, {0: 4})
    assert set(cache.get("g1", {"a": 0, "b": 0, "c": 0}, {0: 4})) == {"a", "c"}
