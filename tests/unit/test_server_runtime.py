import gc

from server.runtime import GC_THRESHOLDS, tune_gc


def test_tune_gc_freezes_start_up_and_sets_the_thresholds():
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
        assert GC_THRESHOLDS[0] > 700, "fewer young collections than CPython's default (700)"
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_a_command_run_with_argv_keeps_the_caller_s_collector(capsys):
    from cli.main import GC_TUNED, main

    assert {"writer", "projector", "projections"} <= GC_TUNED
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    # A tuned command, run in-process with argv: it fails to connect (nothing listens on
    # port 1), and the collector is as it was.
    assert main(["projections", "status", "--database-url",
                 "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2",
                 "--bootstrap", "127.0.0.1:1"]) != 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen
