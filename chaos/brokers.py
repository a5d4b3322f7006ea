"""Broker faults on a Kafka cluster of three (``python -m chaos --brokers 3``).

One broker at a time is killed -9 and restarted, stalled (SIGSTOP, then SIGCONT) past the
controller's session timeout, and restarted cleanly (SIGTERM, start). Before each fault the
run asks the cluster which broker coordinates the writer's transactions, the leader of the
``__transaction_state`` partition of its transactional id, with the request the writer's own
producer sends for it (FindCoordinator, key type 1: transaction); the kill and the stall go
to that broker, the restart to the broker not hit yet, so every broker is hit once and the
coordinator twice (the short run keeps the kill and the stall). After each fault the run waits until every partition is fully in sync
again, so that two brokers are never down or behind at once.

The FindCoordinator request is encoded here (version 1, the oldest Kafka 4 still answers:
header v1, ``key`` STRING, ``key_type`` INT8; the answer ``throttle_time_ms`` INT32,
``error_code`` INT16, ``error_message`` NULLABLE_STRING, ``node_id`` INT32, ``host``
STRING, ``port`` INT32) because confluent-kafka's AdminClient does not expose it.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import time
from typing import Any, Callable

FIND_COORDINATOR = 10
VERSION = 1
TRANSACTION = 1
COORDINATOR_NOT_AVAILABLE = 15
RESTART_TIMEOUT_S = 300.0
"""How long a broker brought back may take to rejoin: a JVM starting and recovering its logs
on a machine that the load, two other brokers and the pipeline share."""
STALL_S = 12.0
"""Longer than the brokers' session with the controller (broker.session.timeout.ms, 9 s):
a stalled broker is fenced and its leaderships move, as when a machine freezes."""


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def encode_find_coordinator(transactional_id: str, correlation_id: int,
                            client_id: str = "chaos") -> bytes:
    """A size-prefixed FindCoordinator v1 request for ``transactional_id``'s coordinator."""
    body = (struct.pack(">hhi", FIND_COORDINATOR, VERSION, correlation_id) + _string(client_id)
            + _string(transactional_id) + struct.pack(">b", TRANSACTION))
    return struct.pack(">i", len(body)) + body


def decode_find_coordinator(payload: bytes, correlation_id: int) -> tuple[int, int]:
    """(error code, coordinator node id) of a FindCoordinator v1 answer (without its size)."""
    got, _throttle, error = struct.unpack_from(">iih", payload, 0)
    if got != correlation_id:
        raise ValueError(f"answer {got} to request {correlation_id}")
    at = 10
    (n,) = struct.unpack_from(">h", payload, at)
    at += 2 + max(n, 0)
    (node_id,) = struct.unpack_from(">i", payload, at)
    return error, node_id


def _ask(port: int, request: bytes, timeout: float) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        head = _read(s, 4)
        return _read(s, struct.unpack(">i", head)[0])


def _read(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return out


def coordinator(ports: list[int], transactional_id: str, timeout: float = 60.0) -> int:
    """The node id of the broker coordinating ``transactional_id``'s transactions, asked of
    each broker in turn until one answers (a broker just restarted may not know yet)."""
    deadline = time.monotonic() + timeout
    correlation = 0
    last: Any = None
    while time.monotonic() < deadline:
        for port in ports:
            correlation += 1
            try:
                answer = _ask(port, encode_find_coordinator(transactional_id, correlation), 5)
                error, node_id = decode_find_coordinator(answer, correlation)
            except (OSError, ValueError, struct.error) as e:
                last = e
                continue
            if error == 0:
                return node_id
            last = f"error code {error}"
        time.sleep(0.5)
    raise RuntimeError(f"no broker named the coordinator of {transactional_id!r} in "
                       f"{timeout:.0f} s: {last}")


def out_of_sync(bootstrap: str) -> list[str]:
    """The partitions (``topic[p]``) whose in-sync replicas are fewer than their replicas."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return [f"{name}[{p}]" for name, t in md.topics.items()
            for p, part in t.partitions.items() if len(part.isrs) < len(part.replicas)]


def await_in_sync(bootstrap: str, timeout: float = 180.0) -> float:
    """Wait until every partition has all its replicas in sync; the seconds it took."""
    t0 = time.monotonic()
    behind: list[str] = ["(not asked yet)"]
    while time.monotonic() - t0 < timeout:
        try:
            behind = out_of_sync(bootstrap)
        except Exception as e:  # noqa: BLE001 - a broker just back may not answer yet
            behind = [repr(e)]
        if not behind:
            return time.monotonic() - t0
        time.sleep(1)
    raise RuntimeError(f"partitions still out of sync after {timeout:.0f} s: {behind[:10]}")


class BrokerFaults:
    """The three broker faults of a cluster run, each on one node, recorded as they happen."""

    def __init__(self, cfg: Any, transactional_id: str, say: Callable[[str], None],
                 count: Callable[[str], None]):
        self.cfg = cfg
        self.transactional_id = transactional_id
        self.say = say
        self.count = count
        self.hit: list[dict[str, Any]] = []

    def _node(self, node_id: int) -> Any:
        return next(n for n in self.cfg.kafka_nodes if n.node_id == node_id)

    def _coordinator(self) -> int:
        return coordinator([n.port for n in self.cfg.kafka_nodes], self.transactional_id)

    def _pid(self, node: Any) -> int:
        from devstack.kafka import node_pid

        pid = node_pid(node)
        if pid is None:
            raise RuntimeError(f"broker {node.node_id} is not running")
        return pid

    def _record(self, fault: str, node_id: int, coord: int, t0: float) -> None:
        t1 = time.monotonic()
        synced = await_in_sync(self.cfg.bootstrap)
        self.hit.append({"fault": fault, "node": node_id, "coordinator": node_id == coord,
                         "back_s": round(t1 - t0, 1), "in_sync_s": round(synced, 1)})
        self.count(fault)
        self.say(f"broker {node_id} back after {t1 - t0:.1f} s, all partitions in sync "
                 f"{synced:.1f} s later")

    def kill(self) -> None:
        """kill -9 the coordinator's broker; start it again 3 s later."""
        from devstack import kafka

        coord = self._coordinator()
        node = self._node(coord)
        self.say(f"kill -9 broker {coord}, the transaction coordinator (pid "
                 f"{self._pid(node)}); restart in 3 s")
        t0 = time.monotonic()
        os.kill(self._pid(node), signal.SIGKILL)
        time.sleep(3)
        kafka.start(self.cfg, timeout=RESTART_TIMEOUT_S)
        self._record("broker_kill", coord, coord, t0)

    def stall(self, seconds: float = STALL_S) -> None:
        """SIGSTOP the coordinator's broker (it moved after the kill) for ``seconds``."""
        coord = self._coordinator()
        pid = self._pid(self._node(coord))
        self.say(f"stall broker {coord}, the transaction coordinator (pid {pid}), "
                 f"for {seconds:.0f} s")
        t0 = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
        self._record("broker_stall", coord, coord, t0)

    def restart(self) -> None:
        """Stop cleanly (SIGTERM) the broker no fault has hit yet, and start it again."""
        from devstack import kafka
        from devstack.procs import stop_pid_files

        coord = self._coordinator()
        done = {h["node"] for h in self.hit}
        node = next((n for n in self.cfg.kafka_nodes if n.node_id not in done),
                    self._node(coord))
        self.say(f"restart broker {node.node_id} (SIGTERM, then start; the coordinator is "
                 f"{coord})")
        t0 = time.monotonic()
        stop_pid_files(f"broker {node.node_id}", [node.pid_file], timeout=60)
        kafka.start(self.cfg, timeout=RESTART_TIMEOUT_S)
        self._record("broker_restart", node.node_id, coord, t0)
