"""``evidence projections`` pieces that need no services."""

from cli.projections import position_lags


def test_each_position_is_measured_against_its_own_topics_end():
    positions = [("t.checkpoints", 0, 3, 3, None), ("t.erasures", 0, 0, 0, None),
                 ("t.log", 0, 339, 339, None), ("t.log", 1, 10, 10, None)]
    # The heartbeat beats the log's partitions only; the side topics keep their own ends.
    ends = {("t.log", 0): 340, ("t.log", 1): 10}
    assert [(t, p, end, lag) for t, p, _n, end, lag, _u in position_lags(positions, ends)] == [
        ("t.checkpoints", 0, 3, 0), ("t.erasures", 0, 0, 0), ("t.log", 0, 340, 1),
        ("t.log", 1, 10, 0)]


def test_a_position_past_the_end_the_heartbeat_saw_is_no_negative_lag():
    assert position_lags([("t.log", 0, 12, 12, None)], {("t.log", 0): 10})[0][4] == 0
