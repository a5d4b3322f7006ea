"""`make bench QUICK=1`'s code path on a tiny N, so the harness does not rot.

Every measurement runs (sealing with both baselines, latency through the Recorder, rebuild
vs COPY, verify vs bare, verified vs unverified replay, RSS, scale-out and its takeover) and the
three results files are written; three brokers beside one (section 9, which starts a cluster
of its own) is ``test_bench_cluster``. No timing is
asserted: this machine is shared, and the numbers mean nothing at this size.
"""

import json

import pytest

pytestmark = pytest.mark.integration


def test_quick_bench_runs_end_to_end_and_cleans_up(kafka_bootstrap, database_url, tmp_path):
    import psycopg

    from bench.call_overhead import MODES
    from bench.run import main

    rc = main(["--quick", "--captures", "320", "--rates", "50", "--latency-seconds", "1",
               "--concurrency", "1,2", "--verify-seconds", "0.3", "--es-batch", "100",
               "--replay-calls", "20", "--replay-rounds", "2", "--no-cluster",
               "--overhead-calls", "4", "--overhead-concurrency", "1,2",
               "--bootstrap", kafka_bootstrap, "--database-url", database_url,
               "--out", str(tmp_path), "--stem", "t"])
    assert rc == 0
    result = json.loads((tmp_path / "t.json").read_text())
    assert (tmp_path / "t.md").read_text().startswith("# evidence-store bench")
    assert (tmp_path / "t.png").stat().st_size > 0

    assert result["sealing"]["writer"]["records_per_s"] > 0
    from bench.seal_rate import PLAIN_RUNS

    plain = result["sealing"]["plain_producer"]
    assert len(plain) == sum(PLAIN_RUNS) and all(p["records_per_s"] > 0 for p in plain)
    assert result["sealing"]["plain_producer_median"] in range(
        min(p["records_per_s"] for p in plain), max(p["records_per_s"] for p in plain) + 1)
    assert result["sealing"]["eventsourcing"]["records"] == 320
    assert result["latency"][0]["captures"] == 50
    assert result["latency"][0]["visible"] == 50
    # send → sealed, split again where the gateway's Recorder handed each capture to Kafka:
    # every one of the 50 matched to its intake record.
    lat = result["latency"][0]
    for split in ("send_to_produced_ms", "produced_to_sealed_ms"):
        assert lat[split]["p50"] is not None and lat[split]["p99"] >= lat[split]["p50"]
    assert "send → produced p50 / p99 ms" in (tmp_path / "t.md").read_text()
    # What each process's CPU was, per capture, beside the cores all of it kept busy.
    cpu = result["latency"][0]["cpu_us_per_capture"]
    assert {"gateways", "app_loop", "writer", "projector", "api", "poller"} <= set(cpu)
    # The gateways' synthetic application's own loop, measured alone, is not capture's CPU.
    assert cpu["app_loop"] > 0
    # The kernel counts CPU in 10 ms ticks: one second of 50 captures can leave an idle
    # writer at 0 (a fresh-clone run did), so only the whole is asked to have moved.
    assert all(v >= 0 for v in cpu.values()) and sum(cpu.values()) > 0
    assert result["latency"][0]["cores_busy"] > 0
    # Beside the broker's CPU, its JIT's share of it; beside PostgreSQL's, autovacuum's runs.
    if "kafka" in cpu:
        # and what the broker did while the lone calls were timed (section 8, first)
        broker = result["call_overhead"]["broker"]
        assert 0 <= broker["jit_cores"] <= broker["cores"] + 0.01 and broker["seconds"] > 0
        assert "of it compiling" in (tmp_path / "t.md").read_text()
        assert 0 <= result["latency"][0]["jit_us_per_capture"]["kafka"] <= cpu["kafka"] + 0.1
    assert result["latency"][0]["autovacuum_runs"] >= 0
    assert "kafka JIT" in (tmp_path / "t.md").read_text()
    # What the stack held before the run: read from the broker and the database themselves.
    before = result["stack_before"]
    assert before["topics"] >= 0 and before["partitions"] >= before["topics"]
    assert before["schemas"] >= 0 and before["database_mib"] > 0
    assert "The stack before the run:" in (tmp_path / "t.md").read_text()
    # The catch-up's bulk load was vacuumed before the windows, not by autovacuum in them.
    assert result["projector_catch_up"]["vacuumed"]["tables"] >= 5
    assert "were vacuumed and analysed" in (tmp_path / "t.md").read_text()
    assert "cores busy" in (tmp_path / "t.md").read_text()
    assert result["rebuild"]["records"] == result["rebuild"]["copy_rows"] == 320 + 50
    # Every timed part of latency and rebuild started from a settled disk, and says so.
    for settled in [result["latency"][0]["settled"], *result["rebuild"]["settled"].values()]:
        assert settled["checkpoint"] is True and settled["dirty_mib_after"] is not None
    assert set(result["rebuild"]["settled"]) == {"rebuild", "copy", "copy_again"}
    # The COPY baseline runs twice and the faster counts, as the producer baseline's does.
    assert result["rebuild"]["copy_seconds"] == min(result["rebuild"]["copy_runs_seconds"])
    assert len(result["rebuild"]["copy_runs_seconds"]) == 2
    assert "disk was settled" in (tmp_path / "t.md").read_text()
    assert [v["concurrency"] for v in result["verify"]] == [1, 2]
    assert all(v["verify"]["errors"] == 0 and v["bare"]["errors"] == 0
               for v in result["verify"]), result["verify"]  # each route's failures by kind
    # Verified and unverified replay read every recorded call in each round, none failed,
    # and a verified read is one request of the API in the steady state (stream= is set).
    replay = result["replay_verified"]
    assert (replay["calls"], replay["rounds"], replay["concurrency"]) == (20, 2, 1)
    assert replay["covered"]["checkpoint_size"] >= 20
    for name in ("verified", "unverified"):
        r = replay[name]
        assert r["reads"] == 40 and r["errors"] == 0 and "first_error" not in r
        assert r["api_requests_per_read"] == 1.0 and "api_ms_p50" in r
        assert r["rps"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"] and len(r["rounds_rps"]) == 2
    # The bundle carries the record, the checkpoint and the proofs beside the response.
    assert replay["verified"]["api_bytes_per_read"] > replay["unverified"]["api_bytes_per_read"]
    assert replay["verified"]["client_check_us_p50"] > 0
    assert "client_check_us_p50" not in replay["unverified"]
    assert replay["ratio"] > 0 and replay["p50_ratio"] > 0
    assert "Verified vs unverified replay" in (tmp_path / "t.md").read_text()
    assert all(result["peak_rss_mib"][p] for p in ("writer", "projector", "api"))
    # Each timed part says how much of the cores' time the hypervisor gave away over it.
    steals = [result["steal_pct"], result["sealing"]["writer"]["steal_pct"],
              *(p["steal_pct"] for p in result["sealing"]["plain_producer"]),
              result["latency"][0]["steal_pct"], *result["rebuild"]["steal_pct"].values()]
    # (None only for a part shorter than a clock tick, which the run and the rebuild are not)
    # the run, the writer, each plain producer run, the first rate, the rebuild and 2 COPYs
    assert len(steals) == 6 + len(result["sealing"]["plain_producer"]) and all(x is None or 0.0 <= x <= 100.0 for x in steals)
    assert result["steal_pct"] is not None and result["rebuild"]["steal_pct"]["rebuild"] is not None
    assert set(result["rebuild"]["steal_pct"]) == {"rebuild", "copy", "copy_again"}
    assert "CPU steal over the run" in (tmp_path / "t.md").read_text()
    # The takeover after a writer's kill -9 lost and duplicated nothing.
    took = result["scale_out"]["takeover"]
    assert took["lost"] == took["duplicated"] == 0 and took["takeover_s"] > 0, took
    assert took["dead_partitions"] and took["restore_s"] is not None
    assert "takeover after kill -9" in (tmp_path / "t.md").read_text().lower()
    assert "cluster" not in result, "--no-cluster: section 9 has a test of its own"
    # And how fast the machine was at the start and at the end.
    assert set(result["speed"]) == {"start", "end"}
    assert all(v["python_loop_ms"] > 0 for v in result["speed"].values())
    assert "Machine speed, one core" in (tmp_path / "t.md").read_text()
    names = {t["name"] for t in result["targets"]}
    assert {"sealing / plain producer", "sealing / eventsourcing", "rebuild / binary COPY",
            "verify / bare route (peak req/s)"} <= names

    # Section 8: each durability mode, sync and async, plain and streamed, at each level,
    # captured beside bare; every call captured and delivered.
    overhead = result["call_overhead"]
    assert [m["name"] for m in overhead["modes"]] == [m for m, _ in MODES]
    for mode in overhead["modes"]:
        assert [(r["sync"], r["stream"], r["concurrency"]) for r in mode["rows"]] == [
            (api, stream, c) for api in ("sync", "async") for stream in (False, True)
            for c in (1, 2)]
        assert all(r["last"]["captured"]["n"] == r["last"]["bare"]["n"] > 0
                   and ("first" in r) == r["stream"] for r in mode["rows"])
        counts = mode["recorder"]
        assert counts["captured"] == counts["delivered"] > 0 and counts["failed"] == 0
    assert "What capture adds to a call" in (tmp_path / "t.md").read_text()
    # ...timed from a settled disk, as every other section is.
    assert overhead["settled"]["dirty_mib_after"] is not None
    assert "the disk settled first" in (tmp_path / "t.md").read_text()
    prefix = result["config"]["prefix"]
    with psycopg.connect(database_url, autocommit=True) as conn:
        left = conn.execute("select nspname from pg_namespace where nspname like %s",
                            (f"{prefix}%",)).fetchall()
    assert left == []
