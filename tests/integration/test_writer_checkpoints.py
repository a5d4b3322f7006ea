"""Signed checkpoints from a real writer on real Kafka: each note opens with the log key, its
root is the Merkle root of the log's records up to its size, sizes strictly grow and stay
consistent across a kill -9, the idle timer and the on-demand control message work."""

from __future__ import annotations

import time

from evidence_contract.merkle import MerkleTree, record_leaf_hash, verify_consistency
from evidence_contract.note import open_checkpoint, stream_origin
from evidence_contract.topics import partition_for
from tests.fixtures.writer import (
    log_signing_key,
    make_capture,
    produce_captures,
    produce_intake,
    read_all,
    verify_log,
    wait_for_count,
)


def _checkpoints(bootstrap, settings):
    """(stream, Checkpoint, message) of every checkpoint, verified with the log key."""
    key = log_signing_key()[0].verifier
    out = []
    for m in read_all(bootstrap, settings.names.checkpoints):
        headers = dict(m.headers() or [])
        assert headers["evidence-kind"] == b"checkpoint"
        stream = headers["evidence-stream"].decode()
        cp, _note = open_checkpoint(m.value(), key, origin=stream_origin(key.name, stream))
        assert headers["evidence-tree-size"] == str(cp.size).encode()
        assert m.key() == stream.encode()
        assert m.partition() == partition_for(stream, settings.partitions)
        out.append((stream, cp, m))
    return out


def _trees(bootstrap, settings):
    by_stream: dict[str, list[bytes]] = {}
    for m in read_all(bootstrap, settings.names.log):
        by_stream.setdefault(m.key().decode(), []).append(m.value())
    return {s: MerkleTree(map(record_leaf_hash, v)) for s, v in by_stream.items()}


def _check_all(bootstrap, settings):
    """Every checkpoint's root is the log's tree at its size; per stream the sizes strictly
    grow and each is consistent with the one before. Returns the last size per stream."""
    trees = _trees(bootstrap, settings)
    last: dict[str, tuple[int, bytes]] = {}
    for stream, cp, _m in _checkpoints(bootstrap, settings):
        tree = trees[stream]
        assert 0 < cp.size <= tree.size and cp.root_hash == tree.root(cp.size), \
            f"{stream}: checkpoint at {cp.size} does not match the log"
        if stream in last:
            size, root = last[stream]
            assert cp.size > size, f"{stream}: checkpoint sizes {size} then {cp.size}"
            verify_consistency(size, cp.size, tree.consistency_proof(size, cp.size), root,
                               cp.root_hash)
        last[stream] = (cp.size, cp.root_hash)
    return {s: v[0] for s, v in last.items()}


def _wait_sizes(bootstrap, settings, want: dict[str, int], timeout=30.0):
    deadline = time.monotonic() + timeout
    got: dict[str, int] = {}
    while time.monotonic() < deadline:
        got = {s: cp.size for s, cp, _m in _checkpoints(bootstrap, settings)}
        if all(got.get(s) == n for s, n in want.items()):
            return got
        time.sleep(0.3)
    raise AssertionError(f"checkpoints {got}, wanted {want}")


def test_checkpoints_match_the_log_and_stay_consistent_across_a_kill(kafka_bootstrap, make_topics,
                                                                     run_writer):
    settings = make_topics(partitions=3)
    streams = [f"cp-{i}" for i in range(5)]
    writer = run_writer(settings, env={"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.5"})
    writer.wait_event("checkpoints_on")
    produce_captures(kafka_bootstrap, settings, (make_capture(streams[i % 5]) for i in range(200)))
    wait_for_count(kafka_bootstrap, settings.names.log, 200)
    # The idle timer: with no more intake, each stream's last records get a checkpoint.
    _wait_sizes(kafka_bootstrap, settings, {s: 40 for s in streams})
    # More while the writer is killed mid-stream; a new one resumes from writer-state.
    produce_captures(kafka_bootstrap, settings, (make_capture(streams[i % 5]) for i in range(300)))
    wait_for_count(kafka_bootstrap, settings.names.log, 201, alive=writer.assert_alive)
    writer.kill()
    writer = run_writer(settings, env={"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.5"})
    produce_captures(kafka_bootstrap, settings, (make_capture(streams[i % 5]) for i in range(100)))
    wait_for_count(kafka_bootstrap, settings.names.log, 600, alive=writer.assert_alive)
    verify_log(read_all(kafka_bootstrap, settings.names.log))
    _wait_sizes(kafka_bootstrap, settings, {s: 120 for s in streams})
    sizes = _check_all(kafka_bootstrap, settings)
    assert sizes == {s: 120 for s in streams}
    assert not [e for e in writer.events() if e.get("event") == "checkpoint_refused"]
    assert writer.terminate() == 0


def test_an_on_demand_checkpoint_is_issued_in_the_batch_that_reads_the_request(
        kafka_bootstrap, make_topics, run_writer):
    settings = make_topics(partitions=2)
    writer = run_writer(settings, env={"EVIDENCE_CHECKPOINT_INTERVAL_S": "3600"})
    produce_captures(kafka_bootstrap, settings, (make_capture("od") for _ in range(3)))
    _wait_sizes(kafka_bootstrap, settings, {"od": 3})  # first one: never checkpointed, due now
    produce_captures(kafka_bootstrap, settings, (make_capture("od") for _ in range(2)))
    wait_for_count(kafka_bootstrap, settings.names.log, 5)
    # A checkpoint commits with the records it covers: any for these would be there now.
    assert [cp.size for _s, cp, _m in _checkpoints(kafka_bootstrap, settings)] == [3], \
        "the interval is an hour: nothing more without a request"
    control = [("evidence-control", b"checkpoint")]
    produce_intake(kafka_bootstrap, settings, [(b"od", b"", control)])
    _wait_sizes(kafka_bootstrap, settings, {"od": 5})
    # A request for a stream that has not grown (and one for an unknown stream) does nothing;
    # neither is sealed nor rejected, and their offsets are committed.
    produce_intake(kafka_bootstrap, settings, [(b"od", b"", control), (b"nobody", b"", control)])
    writer.wait_event("checkpoint_requested", count=2)
    writer.wait_consumed(settings.names.intake)  # what they would issue has committed
    assert [cp.size for _s, cp, _m in _checkpoints(kafka_bootstrap, settings)] == [3, 5]
    assert len(read_all(kafka_bootstrap, settings.names.log)) == 5
    assert read_all(kafka_bootstrap, settings.names.rejected) == []
    _check_all(kafka_bootstrap, settings)
    assert writer.terminate() == 0


def test_without_a_key_no_checkpoints_and_turning_it_on_later_checkpoints_everything(
        kafka_bootstrap, make_topics, run_writer):
    settings = make_topics(partitions=2)
    writer = run_writer(settings, signing=False)
    writer.wait_event("checkpoints_off")
    produce_captures(kafka_bootstrap, settings, (make_capture(f"off-{i % 2}") for i in range(20)))
    wait_for_count(kafka_bootstrap, settings.names.log, 20)
    writer.wait_consumed(settings.names.intake)
    assert writer.terminate() == 0
    assert read_all(kafka_bootstrap, settings.names.checkpoints) == []
    writer = run_writer(settings)
    _wait_sizes(kafka_bootstrap, settings, {"off-0": 10, "off-1": 10})
    _check_all(kafka_bootstrap, settings)
    assert writer.terminate() == 0


def test_a_group_readable_key_file_is_refused_at_start(kafka_bootstrap, make_topics, run_writer,
                                                       tmp_path):
    import os
    import shutil

    settings = make_topics(partitions=1)
    loose = tmp_path / "loose.skey"
    shutil.copy(log_signing_key()[1], loose)
    os.chmod(loose, 0o644)
    w = run_writer(settings, wait_ready=False, env={"EVIDENCE_LOG_SIGNING_KEY_FILE": str(loose)})
    assert w.wait(30) == 1
    assert "chmod 600" in w.output()
    w = run_writer(settings, wait_ready=False, env={"EVIDENCE_LOG_NAME": "another.example/log"})
    assert w.wait(30) == 1
    assert "EVIDENCE_LOG_NAME" in w.output()
