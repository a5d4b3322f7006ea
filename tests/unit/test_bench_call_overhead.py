"""bench.call_overhead: how many calls each row makes."""

from __future__ import annotations

from bench.call_overhead import LONE_CALLS, _levels


def test_a_lone_caller_makes_more_calls_so_its_p99_is_deeper():
    rows = _levels(400, 10, (1, 16, 64))
    assert [(stream, c) for stream, c, _, _ in rows] == [
        (stream, c) for stream in (False, True) for c in (1, 16, 64)]
    for stream, c, block, rounds in rows:
        made = c * block * rounds  # calls a side
        want = 400 * LONE_CALLS if c == 1 else 400
        assert rounds >= 2 and want * 0.75 <= made <= want * 1.25, (c, made)


def test_few_calls_still_give_each_side_two_rounds():
    assert all(rounds >= 2 and block >= 1 for _, _, block, rounds in _levels(4, 10, (1, 2)))
