"""Benchmarks of evidence-store, each figure next to a baseline measured in the same run.

    make bench            # or: .venv/bin/python -m bench
    make bench QUICK=1    # the same code path, smaller and shorter (under 3 minutes)

Modules:
    run        the driver: the five measurements, in order, and the report
    services   the writer, projector and API as subprocesses; their peak RSS
    peer       the ``eventsourcing`` library's PostgreSQL recorder, the sealing peer
    latency    capture-to-queryable latency at fixed offered rates, through the Recorder
    report     results/<date>.json, .md and .png
    seal_rate, rebuild_rate, api_verify, replay_verified   the single-measurement scripts
               the driver reuses (replay_verified: verified vs unverified replay)
"""
