"""What the bench says beside its CPU figures about the stack they were measured on: what it
held before the run (``bench.services.stack_state``, ``bench.report.stack_line``), how much of
the broker's CPU went to its JIT (``jit_seconds``), and autovacuum's runs in a window."""

import os
import subprocess
import sys

from bench.report import STACK_HEAVY_MIB, stack_line
from bench.services import JIT_THREADS, jit_seconds


def test_a_process_without_jit_threads_has_spent_nothing_on_them():
    assert jit_seconds(os.getpid()) == 0.0


def test_a_process_that_is_gone_has_no_figure():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert jit_seconds(p.pid) is None


def test_the_jit_threads_are_named_as_proc_shows_them():
    # /proc cuts a thread's name to 15 characters: "C2 CompilerThread0" is "C2 CompilerThre".
    assert all(len(n) == 15 for n in JIT_THREADS)
    assert "C2 CompilerThread0"[:15] in JIT_THREADS and "C1 CompilerThread0"[:15] in JIT_THREADS


def test_the_report_says_what_the_stack_held_and_calls_out_a_heavy_one():
    light = {"topics": 3, "partitions": 18, "topic_mib": 12.5, "schemas": 4, "database_mib": 40.0}
    line = stack_line(light)[1]
    assert "3 topics (18 partitions, 12 MiB)" in line and "4 PostgreSQL schemas" in line
    assert "other runs' data" not in line
    for heavy in ({**light, "topic_mib": STACK_HEAVY_MIB + 1.0},
                  {**light, "database_mib": STACK_HEAVY_MIB + 1.0}):
        assert "**It carried other runs' data**" in stack_line(heavy)[1]


def test_what_could_not_be_read_is_shown_as_unknown_and_an_older_run_has_no_line():
    line = stack_line({"topics": None, "partitions": None, "topic_mib": None, "schemas": 2,
                       "database_mib": None})[1]
    assert "– topics (– partitions)" in line and "database of – MiB" in line
    assert stack_line(None) == [] and stack_line({}) == []


def test_the_pipeline_target_is_judged_on_the_whole_figure_with_the_jit_shown_beside_it():
    from bench.run import PIPELINE, _cost_targets

    cpu = {k: 10.0 for k in PIPELINE} | {"gateways": 60.0}
    row = {"rate_offered": 5000, "cpu_us_per_capture": cpu}
    whole = 10.0 * len(PIPELINE)
    got = _cost_targets({"latency": [{**row, "jit_us_per_capture": {"kafka": 4.0}}]})[0]
    assert got["value"] == f"{whole:.0f} µs ({whole - 4:.0f} less the broker's JIT, 4)"
    assert got["ratio_value"] == 90 / whole  # the JIT is not taken off
    plain = _cost_targets({"latency": [row]})[0]  # a run from before the column
    assert plain["value"] == f"{whole:.0f} µs"
