"""The FindCoordinator request the chaos run asks a cluster which broker coordinates the
writer's transactions with (chaos.brokers), byte for byte."""

import struct

import pytest

from chaos.brokers import decode_find_coordinator, encode_find_coordinator


def test_the_request_is_find_coordinator_v1_for_a_transactional_id():
    raw = encode_find_coordinator("evidence-writer", 7, client_id="chaos")
    (size,) = struct.unpack_from(">i", raw)
    assert size == len(raw) - 4
    api_key, version, correlation = struct.unpack_from(">hhi", raw, 4)
    assert (api_key, version, correlation) == (10, 1, 7)
    assert raw[12:14] == struct.pack(">h", 5) and raw[14:19] == b"chaos"
    assert raw[19:21] == struct.pack(">h", 15) and raw[21:36] == b"evidence-writer"
    assert raw[36:] == b"\x01", "key type 1: a transaction's coordinator"


def _answer(correlation: int, error: int, message: str | None, node: int) -> bytes:
    msg = struct.pack(">h", -1) if message is None else (
        struct.pack(">h", len(message)) + message.encode())
    host = b"127.0.0.1"
    return (struct.pack(">iih", correlation, 0, error) + msg + struct.pack(">i", node)
            + struct.pack(">h", len(host)) + host + struct.pack(">i", 9092))


def test_the_answer_names_the_coordinator_node():
    assert decode_find_coordinator(_answer(7, 0, None, 3), 7) == (0, 3)
    assert decode_find_coordinator(_answer(8, 15, "not available", -1), 8) == (15, -1)


def test_an_answer_to_another_request_is_refused():
    with pytest.raises(ValueError, match="answer 9 to request 7"):
        decode_find_coordinator(_answer(9, 0, None, 1), 7)


def test_a_cluster_run_hits_one_broker_at_a_time_kill_and_stall_in_the_short_form():
    from types import SimpleNamespace

    from chaos.run import _schedule

    brokers = SimpleNamespace(kill=object(), stall=object(), restart=object())
    run = SimpleNamespace(cluster=brokers, kill_service=None)
    names = {id(brokers.kill): "kill", id(brokers.stall): "stall",
             id(brokers.restart): "restart"}
    for short, expected in ((True, ["kill", "stall"]), (False, ["kill", "stall", "restart"])):
        plan = _schedule(run, 100.0, short)
        assert [at for at, _ in plan] == sorted(at for at, _ in plan)
        assert [names[id(f)] for _, f in plan if id(f) in names] == expected


def test_the_calls_files_are_read_and_a_line_cut_short_is_named(tmp_path):
    from types import SimpleNamespace

    from chaos.run import Run

    (tmp_path / "load-0.calls").write_text("aa s1\nbb s2\n")
    (tmp_path / "load-0.calls.metrics").write_text('{"sent": 2}')
    submitted, metrics = Run.calls(SimpleNamespace(work=tmp_path))
    assert (submitted, metrics) == ({"aa": "s1", "bb": "s2"}, {"load-0": {"sent": 2}})
    (tmp_path / "load-1.calls").write_text("cc s1\ndd\n")
    with pytest.raises(ValueError, match=r"load-1.calls:2: not a call"):
        Run.calls(SimpleNamespace(work=tmp_path))
