"""The takeover's log reader (``bench.scale_out._LogWatch``) counts only the load's records:
a record of the run before, under the same transactional id and readable late, must not say
that a writer sealed before the load, nor stand in for its sealing of the load."""

from __future__ import annotations

from bench.scale_out import _LogWatch


def _watch(load: set[str]) -> _LogWatch:
    w = _LogWatch.__new__(_LogWatch)  # no Kafka: only the bookkeeping is under test
    w.load, w.seen, w.sealed, w.unique = load, {}, [], set()
    return w


def test_a_record_of_the_run_before_is_not_the_loads():
    w = _watch({"a", "b"})
    w.note(0, "old", "g-1", at=5.0)  # the run before's last transaction, read late
    assert w.first_since(0, "g-1", 0.0) is None
    assert w.sealed == []


def test_first_since_is_the_first_sighting_at_or_after_the_time():
    w = _watch({"a", "b", "c"})
    w.note(3, "a", "g-2", at=10.0)  # the survivor had partition 3 before the kill, too
    w.note(3, "b", "g-2", at=20.0)
    w.note(3, "c", "g-2", at=30.0)
    assert w.first_since(3, "g-2", 0.0) == 10.0
    assert w.first_since(3, "g-2", 15.0) == 20.0
    assert w.first_since(3, "g-2", 20.0) == 20.0
    assert w.first_since(3, "g-2", 31.0) is None
    assert w.first_since(3, "g-1", 0.0) is None and w.first_since(2, "g-2", 0.0) is None
    assert w.sealed == ["a", "b", "c"]


def test_a_load_record_sealed_twice_is_counted_twice():
    w = _watch({"a"})
    w.note(1, "a", "g-1", at=1.0)
    w.note(1, "a", "g-2", at=2.0)
    assert len(w.sealed) - len(set(w.sealed)) == 1
