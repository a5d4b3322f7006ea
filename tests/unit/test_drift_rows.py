"""ChangeWatch.see_rows, the projector's per-batch call: the same changes and the same state
as see_all over each row's observation, on random batches that repeat, alternate, leave
values out and overflow the watch's bound."""

from __future__ import annotations

import random

import pytest

from projections.drift import ChangeWatch, observation_of_row
from projections.rows import RECORD_COLUMNS


def row(seq: int, provider: str | None, model: str | None, served: str | None,
        fp: str | None) -> tuple:
    values = dict.fromkeys(RECORD_COLUMNS)
    values.update(stream=f"s{seq % 3}", seq=seq, occurred_at_us=1_000 + seq,
                  provider_name=provider, model_id=model, response_model=served, fingerprint=fp)
    return tuple(values[c] for c in RECORD_COLUMNS)


def batches(rng: random.Random, n: int) -> list[list[tuple]]:
    rows = [row(i, rng.choice(["openai", "anthropic", None]), rng.choice(["m1", "m2", None]),
                rng.choice(["m1-a", "m1-b", "", None]),
                rng.choice(["fp1", "fp2", None]) if rng.random() < 0.3 else "fp1")
            for i in range(n)]
    cuts = sorted(rng.sample(range(1, n), 5))
    return [rows[a:b] for a, b in zip([0] + cuts, cuts + [n])]


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("max_keys", [None, 2])
def test_see_rows_finds_what_see_all_finds_and_keeps_the_same_state(seed, max_keys):
    rng = random.Random(seed)
    by_rows, by_obs = ChangeWatch(max_keys), ChangeWatch(max_keys)
    for batch in batches(rng, 300):
        assert by_rows.see_rows(batch) == by_obs.see_all(observation_of_row(r) for r in batch)
        assert by_rows.last == by_obs.last and by_rows.dropped == by_obs.dropped


def test_a_run_of_equal_rows_is_last_seen_at_its_last_row():
    watch = ChangeWatch()
    assert watch.see_rows([row(i, "openai", "m1", "m1-a", "fp1") for i in range(1, 5)]) == []
    [change] = watch.see_rows([row(5, "openai", "m1", "m1-a", "fp2")])
    assert (change.kind, change.old, change.new) == ("fingerprint", "fp1", "fp2")
    assert change.before == ("s1", 4, 1_004) and change.after == ("s2", 5, 1_005)
