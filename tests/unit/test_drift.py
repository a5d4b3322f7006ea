"""The drift watch's pure parts: change points (projections.drift), the shifts and the
report of `evidence drift` (cli.drift) on synthetic records, and the projector's metrics."""

from __future__ import annotations

import base64
import json
import math

import pytest

from cli.drift import changes, measures, report, shifts, text
from projections.drift import ChangeWatch, Observation, observation_of_row
from projections.metrics import ProjectorMetrics
from projections.rows import RECORD_COLUMNS


def obs(seq, fp="fp_a", served="gpt-4o-2026", model="gpt-4o", provider="openai", stream="s",
        at=None):
    return Observation(stream, seq, at if at is not None else seq * 1_000_000, provider, model,
                       fp, served)


def test_a_fingerprint_change_names_the_records_on_both_sides():
    found = ChangeWatch().see_all([obs(1), obs(2), obs(3, fp="fp_b"), obs(4, fp="fp_b")])
    assert len(found) == 1
    c = found[0]
    assert (c.kind, c.old, c.new) == ("fingerprint", "fp_a", "fp_b")
    assert c.before == ("s", 2, 2_000_000) and c.after == ("s", 3, 3_000_000)
    assert c.at_us == 3_000_000 and (c.provider, c.model) == ("openai", "gpt-4o")


def test_a_served_model_change_and_a_fingerprint_change_in_one_record_are_two():
    found = ChangeWatch().see_all([obs(1), obs(2, fp="fp_b", served="gpt-4o-2027")])
    assert [(c.kind, c.old, c.new) for c in found] == [
        ("fingerprint", "fp_a", "fp_b"), ("served_model", "gpt-4o-2026", "gpt-4o-2027")]


def test_a_record_without_a_value_changes_nothing_and_is_not_the_last_before():
    found = ChangeWatch().see_all([obs(1), obs(2, fp=None, served=None), obs(3, fp="fp_b")])
    assert len(found) == 1 and found[0].before[1] == 1 and found[0].after[1] == 3


def test_each_provider_and_model_is_watched_apart():
    found = ChangeWatch().see_all([obs(1, model="a"), obs(2, model="b", fp="fp_b"),
                                   obs(3, model="a"), obs(4, provider="anthropic", fp="x")])
    assert found == []


def test_alternating_backends_change_at_each_switch():
    found = ChangeWatch().see_all([obs(1), obs(2, fp="fp_b"), obs(3), obs(4)])
    assert [(c.old, c.new, c.after[1]) for c in found] == [("fp_a", "fp_b", 2), ("fp_b", "fp_a", 3)]


def test_the_watch_is_bounded_and_counts_what_it_leaves_out():
    w = ChangeWatch(max_keys=2)
    w.see_all([obs(1, model="a"), obs(2, model="b"), obs(3, model="c"),
               obs(4, model="c", fp="fp_b")])
    assert set(w.last) == {("openai", "a"), ("openai", "b")} and w.dropped == 2
    assert w.see(obs(5, model="a", fp="fp_b"))  # the watched pairs still change


def test_changes_are_found_in_sealed_time_order_not_given_order():
    given = [obs(3, fp="fp_b", at=30), obs(1, at=10), obs(2, at=20)]
    found = changes(given)
    assert len(found) == 1 and (found[0].before[1], found[0].after[1]) == (2, 3)


def test_observation_of_a_projected_row():
    row = [None] * len(RECORD_COLUMNS)
    for name, value in (("stream", "s"), ("seq", 7), ("occurred_at_us", 5), ("provider_name",
                        "openai"), ("model_id", None), ("response_model", "m-1"),
                        ("fingerprint", "")):
        row[RECORD_COLUMNS.index(name)] = value
    o = observation_of_row(tuple(row))
    assert o == Observation("s", 7, 5, "openai", "m-1", None, "m-1")


def test_a_shift_is_flagged_past_the_threshold_with_enough_values():
    before = [{"latency_ms": 100.0, "output_tokens": 10} for _ in range(6)]
    after = [{"latency_ms": 200.0, "output_tokens": 11} for _ in range(6)]
    got = {s.measure: s for s in shifts(before, after, 0.25, 5)}
    assert got["latency_ms"].flagged and got["latency_ms"].change == {"p50": 1.0, "p90": 1.0}
    assert not got["output_tokens"].flagged
    assert got["output_tokens"].change["p50"] == pytest.approx(0.1)
    assert set(got) == {"latency_ms", "output_tokens"}  # measures nobody counted are left out


def test_too_few_values_are_reported_never_flagged():
    got = shifts([{"latency_ms": 1.0}] * 4, [{"latency_ms": 9.0}] * 4, 0.25, 5)
    assert len(got) == 1 and not got[0].flagged and got[0].change["p50"] == 8.0


def test_from_zero_is_an_infinite_shift_and_zero_to_zero_none():
    got = {s.measure: s for s in shifts([{"output_tokens": 0, "input_tokens": 0}] * 5,
                                        [{"output_tokens": 3, "input_tokens": 0}] * 5, 0.25, 5)}
    assert math.isinf(got["output_tokens"].change["p50"]) and got["output_tokens"].flagged
    assert got["input_tokens"].change["p50"] == 0.0 and not got["input_tokens"].flagged


def api_record(seq, fp="fp_a", served="gpt-4o-2026", outcome="COMMITTED", tokens=7,
               length=300, stream="s"):
    """A record as GET /records serves it with include=bytes (no log message: no latency)."""
    body = {"id": "x", "model": served, "system_fingerprint": fp, "choices": [],
            "usage": {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens}}
    return {"stream": stream, "seq": seq, "occurred_at_us": seq * 1_000_000,
            "occurred_at": f"t{seq}", "outcome": outcome, "model_id": "gpt-4o",
            "response_model": served, "fingerprint": fp, "content": "plain", "streamed": False,
            "provider": {"name": "openai", "endpoint": "https://api.openai.com/v1/chat/completions"},
            "response_b64": base64.b64encode(json.dumps(body).encode()).decode(),
            "response_length": length}


def test_measures_of_a_committed_record_and_none_of_a_failed_one():
    assert measures(api_record(1)) == {"input_tokens": 5, "output_tokens": 7,
                                       "response_length": 300}
    assert measures(api_record(1, outcome="FAILED")) == {}


def test_report_halves_a_window_and_finds_the_change_and_the_shift():
    window = ([api_record(i) for i in range(1, 7)]
              + [api_record(i, fp="fp_b", tokens=30, length=900) for i in range(7, 13)])
    rep = report(window, None, 0.25, 5)
    assert rep["found"] and rep["compared"] == "halves"
    (m,) = rep["models"]
    assert (m["provider"], m["model"], m["records"]) == ("openai", "gpt-4o", 12)
    assert m["fingerprints"] == ["fp_a", "fp_b"]
    (c,) = m["changes"]
    assert c["before"]["seq"] == 6 and c["after"]["seq"] == 7 and c["new"] == "fp_b"
    flagged = {s["measure"] for s in m["shifts"] if s["flagged"]}
    assert flagged == {"output_tokens", "response_length"}
    assert rep["changes"] == 1 and rep["shifts_flagged"] == 2
    shown = text(rep)
    assert "fp_a -> fp_b" in shown and "s@6" in shown and "s@7" in shown and "SHIFT" in shown


def test_report_of_a_steady_window_finds_nothing():
    rep = report([api_record(i) for i in range(1, 13)], None, 0.25, 5)
    assert not rep["found"] and rep["changes"] == 0 and rep["shifts_flagged"] == 0
    assert "(none)" in text(rep)


def test_against_a_baseline_a_window_of_only_the_new_value_still_shows_the_change():
    baseline = [api_record(i) for i in range(1, 6)]
    window = [api_record(i, fp="fp_b") for i in range(10, 16)]
    rep = report(window, baseline, 0.25, 5)
    (m,) = rep["models"]
    assert rep["compared"] == "baseline" and m["baseline_records"] == 5 and m["records"] == 6
    (c,) = m["changes"]
    assert (c["before"]["seq"], c["after"]["seq"]) == (5, 10)
    assert rep["shifts_flagged"] == 0  # same tokens and length: only the fingerprint moved


def test_a_change_inside_the_baseline_is_not_the_windows():
    baseline = [api_record(1), api_record(2, fp="fp_b")]
    rep = report([api_record(i, fp="fp_b") for i in range(3, 5)], baseline, 0.25, 5)
    assert rep["models"][0]["changes"] == [] and not rep["found"]


def test_the_projector_counts_a_change_and_sets_its_time():
    m = ProjectorMetrics()
    (c,) = ChangeWatch().see_all([obs(1), obs(2, fp="fp_b", at=1_767_225_600_000_000)])
    m.model_changed(c)
    labels = {"provider": "openai", "model": "gpt-4o"}
    assert m.registry.get_sample_value("evidence_model_fingerprint_changes_total", labels) == 1
    assert m.registry.get_sample_value(
        "evidence_model_last_fingerprint_change_timestamp_seconds", labels) == 1_767_225_600.0
    assert m.registry.get_sample_value("evidence_model_served_model_changes_total", labels) is None
