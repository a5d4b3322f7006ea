"""The latency bench's open loop (``bench.latency._pace``), which its gateways run alone first
to measure what the loop itself costs, and then with a capture each turn."""

from __future__ import annotations

from bench.latency import _pace


def test_each_turn_notes_its_send_times_then_does_its_work_in_order():
    done: list[int] = []
    sent, sent_wall_us, took = _pace(2000.0, 6, done.append)
    assert done == list(range(6))
    assert len(sent) == len(sent_wall_us) == 6
    assert sent == sorted(sent) and sent_wall_us == sorted(sent_wall_us)
    assert all(t > 0 for t in sent) and all(us > 0 for us in sent_wall_us)
    assert took > 0


def test_the_loop_alone_does_no_work():
    sent, _, _ = _pace(5000.0, 3)
    assert len(sent) == 3 and all(t > 0 for t in sent)
