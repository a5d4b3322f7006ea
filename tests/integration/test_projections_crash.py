"""The projector as a real process: kill -9 mid catch-up, restart, each record exactly once;
SIGTERM exits 0 after the batch in flight."""

import os
import signal

import psycopg
import pytest

from tests.fixtures.log import projected, start_projector, wait_until

pytestmark = pytest.mark.integration

N = 20_000


def test_kill_9_during_catch_up_then_restart_projects_each_record_once(
        make_topics, make_projection_config, produce_chain, tmp_path):
    topics = make_topics(partitions=3)
    cfg = make_projection_config(topics)
    recs = produce_chain(topics, streams={f"s{i}": N // 20 for i in range(20)},
                         response=os.urandom(256))
    assert len(recs) == N
    log_path = tmp_path / "projector.log"
    procs = []
    try:
        # Kill twice at increasing progress, then let a third process finish.
        for threshold in (N // 5, N // 2):
            p = start_projector(cfg, log_path)
            procs.append(p)
            wait_until(f"{threshold} projected", lambda: projected(cfg) >= threshold
                       or p.poll() is not None, timeout=40)
            assert p.poll() is None, log_path.read_text()[-3000:]
            p.send_signal(signal.SIGKILL)
            p.wait(10)
            assert projected(cfg) < N, "caught up before the kill; kill earlier"
        p = start_projector(cfg, log_path)
        procs.append(p)
        wait_until(f"{N} projected", lambda: projected(cfg) == N or p.poll() is not None,
                   timeout=40)
        p.send_signal(signal.SIGTERM)
        assert p.wait(20) == 0, log_path.read_text()[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        v = f'"{cfg.views_schema}"'
        total, distinct = conn.execute(
            f"select count(*), count(distinct (log_partition, log_offset)) from {v}.records"
        ).fetchone()
        assert (total, distinct) == (N, N)
        # contiguous offsets 0..n-1 in each partition, as produced
        per_part = conn.execute(
            f"select log_partition, count(*), min(log_offset), max(log_offset) "
            f"from {v}.records group by 1 order by 1").fetchall()
        for part, n, lo, hi in per_part:
            assert (lo, hi) == (0, n - 1)
        assert {(r.partition, r.offset) for r in recs} == set(conn.execute(
            f"select log_partition, log_offset from {v}.records").fetchall())
        assert conn.execute(f"select count(*) from {v}.findings").fetchone()[0] == 0
        assert conn.execute(f"select sum(record_count) from {v}.heads").fetchone()[0] == N
        positions = dict(conn.execute(
            f"select partition, next_offset from {v}.positions where topic = %s",
            (cfg.log_topic,)).fetchall())
        assert positions == {part: n for part, n, _lo, _hi in per_part}
    assert '"event":"stopping","signal":"SIGTERM"' in log_path.read_text()
