"""The latency bench's split of send → sealed at each capture's hand-off to Kafka
(``bench.latency._hand_off``) and its cells in the report (``bench.report._split``)."""

from __future__ import annotations

from bench.latency import _hand_off, _p50_p99
from bench.report import _split


def test_the_ith_intake_record_of_a_stream_is_its_seq_i_plus_1():
    sent_us = [1_000_000, 1_001_000, 1_002_000]
    produced_ms = [1_003, 1_003, 1_010]
    occurred_us = {1: 1_020_000, 2: 1_021_000, 3: 1_050_000}
    to_kafka, to_sealed = _hand_off(sent_us, produced_ms, occurred_us)
    assert to_kafka == [3.0, 2.0, 8.0]
    assert to_sealed == [17.0, 18.0, 40.0]


def test_a_seq_not_yet_sealed_has_no_second_part():
    to_kafka, to_sealed = _hand_off([1_000_000, 1_001_000], [1_002, 1_003], {1: 1_004_000})
    assert to_kafka == [2.0, 2.0] and to_sealed == [2.0]


def test_a_stream_whose_intake_count_differs_from_its_sends_is_left_out():
    # A capture produced twice (a retry) would shift every later match: none is made.
    assert _hand_off([1_000_000, 1_001_000], [1_002, 1_002, 1_003], {1: 1_004_000}) == ([], [])
    assert _hand_off([1_000_000], [], {}) == ([], [])


def test_an_unmeasured_split_is_a_dash_in_the_report():
    assert _p50_p99([]) == {"p50": None, "p99": None}
    assert _split(_p50_p99([])) == "–" and _split(None) == "–"
    assert _split(_p50_p99([float(i) for i in range(100)])) == "50.0 / 99.0"
