"""projections.rebuild.Verdict: which of two disagreeing generations the log supports, and
how it is said (printed, and recorded with an accepted swap)."""

import pytest

from projections.rebuild import MAX_VERDICT_LINES, Verdict

ALTERED = "projection_altered stream b seq 7 at 1/12: row columns differ from the record: " \
          "response_bytes"


def test_the_log_supports_the_rebuilt_generation_where_the_live_ones_records_differ():
    v = Verdict("g1", "g2", {"g1": (ALTERED,), "g2": ()})
    assert v.supports == "g2"
    head, *rows = v.lines()
    assert head.startswith("the log supports g2 (rebuilt from it now)")
    assert "g1's differ from it in 1 row" in head
    assert rows == [f"g1: {ALTERED}"]


def test_records_that_match_in_both_leave_the_rebuilt_generation_supported():
    v = Verdict("g1", "g2", {"g1": (), "g2": ()})
    assert v.supports == "g2"
    assert v.lines() == ["the log supports g2 (rebuilt from it now); the records of both match "
                         "the log, so they differ in what is derived from the records (heads, "
                         "findings, trees, checkpoints, erasures)"]


def test_a_rebuilt_generation_that_differs_from_the_log_is_not_supported():
    v = Verdict("g1", "g2", {"g1": (), "g2": (ALTERED,)})
    assert v.supports == "g1"
    assert v.lines()[0].startswith("the log supports the live g1")
    assert v.lines()[1:] == [f"g2: {ALTERED}"]


def test_the_log_can_support_neither():
    v = Verdict("g1", "g2", {"g1": (ALTERED,), "g2": (ALTERED, ALTERED)})
    assert v.supports is None
    head, *rows = v.lines()
    assert head.startswith("the log supports neither") and "in 1 row," in head \
        and "in 2 rows" in head
    assert rows == [f"g1: {ALTERED}", f"g2: {ALTERED}", f"g2: {ALTERED}"]


def test_a_log_that_could_not_be_read_supports_nothing():
    v = Verdict("g1", "g2", error="topic t.log does not exist")
    assert v.supports is None
    assert v.lines() == ["the log could not be read to judge between g1 and g2: "
                         "topic t.log does not exist"]


@pytest.mark.parametrize("n", [MAX_VERDICT_LINES, MAX_VERDICT_LINES + 7])
def test_the_rows_named_are_capped(n):
    lines = Verdict("g1", "g2", {"g1": (ALTERED,) * n, "g2": ()}).lines()
    more = n - MAX_VERDICT_LINES
    assert len(lines) == 1 + MAX_VERDICT_LINES + (1 if more else 0)
    assert (lines[-1] == f"... and {more} more") is bool(more)
