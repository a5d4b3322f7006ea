import subprocess
import sys
import time

import pytest

from devstack import StackConfig, StackError, read_env
from devstack.config import pid_alive
from devstack.kafka import server_properties
from devstack.procs import start_detached, wait_until


def test_wait_gives_up_with_the_log_to_read(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("line one\nthe broker said why\n")
    with pytest.raises(StackError) as e:
        wait_until("Kafka broker", lambda: False, 0.3, log)
    assert "did not become ready in 0 s" in str(e.value)
    assert str(log) in str(e.value) and "the broker said why" in str(e.value)


def test_wait_notices_a_process_that_died(tmp_path):
    log = tmp_path / "svc.log"
    pid = start_detached([sys.executable, "-c", "print('bad config'); raise SystemExit(3)"],
                         log, tmp_path / "svc.pid")
    with pytest.raises(StackError, match="exited during start-up") as e:
        wait_until("service x", lambda: False, 30, log, pid)
    assert "bad config" in str(e.value)


def test_env_file_round_trip(tmp_path):
    cfg = StackConfig(root=tmp_path)
    cfg.stack.mkdir()
    cfg.env_file.write_text("# comment\nexport EVIDENCE_API_KEY=dev-1\nEVIDENCE_X='y'\n")
    assert read_env(cfg) == {"EVIDENCE_API_KEY": "dev-1", "EVIDENCE_X": "y"}


def test_broker_listens_on_loopback_only_and_never_auto_creates(tmp_path):
    props = server_properties(StackConfig(root=tmp_path, kafka_port=1234, controller_port=1235))
    assert "listeners=PLAINTEXT://127.0.0.1:1234,CONTROLLER://127.0.0.1:1235" in props
    assert "auto.create.topics.enable=false" in props
    assert "unclean.leader.election.enable=false" in props
    assert "transaction.state.log.replication.factor=1" in props


def test_pom_pins_the_kafka_version_devstack_uses():
    from pathlib import Path

    from devstack.config import KAFKA_VERSION

    pom = (Path(__file__).parents[2] / "devstack" / "pom.xml").read_text()
    assert f"<kafka.version>{KAFKA_VERSION}</kafka.version>" in pom
    assert "log4j-slf4j2-impl" in pom


def test_cli_usage_error_exits_2():
    r = subprocess.run([sys.executable, "-m", "cli.main", "no-such-command"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_a_process_whose_leader_exited_runs_while_another_thread_does():
    """A killed JVM shows its leader as a zombie while its other threads still exit and hold
    its listening socket: it is alive until the last thread is gone."""
    code = ("import ctypes, threading, time\n"
            "threading.Thread(target=lambda: time.sleep(2)).start()\n"
            "ctypes.CDLL(None).pthread_exit(None)\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(f"/proc/{proc.pid}/stat") as f:
                if f.read().split(") ", 1)[1][:1] == "Z":
                    break
            time.sleep(0.05)
        else:
            raise AssertionError("the leader never exited")
        assert pid_alive(proc.pid), "a thread still runs"
        deadline = time.monotonic() + 10
        while pid_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(proc.pid), "every thread gone: a zombie is not running"
    finally:
        proc.wait(10)
