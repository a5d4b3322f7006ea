"""``python -m bench.projector_batch`` against the suite's PostgreSQL, on schemas of its own:
each setting's batches timed, the backend's CPU counted, its schemas dropped after."""

from __future__ import annotations

import json

import psycopg
import pytest

pytestmark = pytest.mark.integration


def test_the_projector_batch_bench_reports_both_settings_and_cleans_up(database_url, capsys):
    from bench.projector_batch import SETTINGS, main

    assert main(["--database-url", database_url, "--batches", "3", "--batch", "4",
                 "--streams", "2", "--rounds", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    for s in SETTINGS:
        assert 0 < result[s]["batch_ms_p50"] <= result[s]["batch_ms_p90"]
        assert result[s]["postgres_cpu_ms_a_batch"] >= 0
    assert result["kept_over_read_back"]["batch_ms_p50"] > 0
    with psycopg.connect(database_url) as conn:
        left = conn.execute("select count(*) from pg_namespace where nspname like %s",
                            (result["prefix"] + "%",))
        assert left.fetchone()[0] == 0


def test_usage_errors_exit_2():
    from bench.projector_batch import main

    for args in (["--batches", "0"], ["--batch", "x"], ["--rounds", "-1"], ["--streams", "0"]):
        with pytest.raises(SystemExit) as e:
            main(args)
        assert e.value.code == 2, args
