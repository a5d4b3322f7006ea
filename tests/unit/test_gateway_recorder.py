"""The Recorder's failure paths against a fake producer that reports librdkafka's error codes,
and the per-process spool root (orphans, undeliverable). No Kafka here: the real-Kafka paths
are in tests/integration/test_gateway*.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import httpx2
import pytest
from confluent_kafka import KafkaError

import evidence_client
from evidence_client import (
    Chunk,
    ConfigError,
    Recorder,
    RecorderUnavailable,
    Spool,
    call_context,
)
from evidence_client.errors import ProducerError, QueueFull
from evidence_client.producer import PERMANENT, RETRY, TOO_LARGE, classify
from evidence_client.sizing import ERROR_PREFIX_BYTES, apply_size_policy, body_size, truncate
from evidence_client.spool import claim_orphans, new_spool, scan, spool_dirs
from evidence_contract import decode


class FakeProducer:
    """Stands in for IntakeProducer: ``fail(value)`` returns the librdkafka error code a
    delivery report carries (None: delivered); ``refuse(value)`` one that ``produce`` raises."""

    def __init__(self, fail: Callable[[bytes], int | None] = lambda v: None,
                 refuse: Callable[[bytes], int | None] = lambda v: None) -> None:
        self.fail, self.refuse = fail, refuse
        self.pending: list[tuple[bytes, bytes, Any]] = []
        self.delivered: list[tuple[bytes, bytes]] = []
        self.brokers_down = False
        self.fatal = None
        self.linger_s = 0.005

    def start(self) -> "FakeProducer":
        return self

    def _error(self, code: int) -> ProducerError:
        return ProducerError(f"fake {code}", code=code, kind=classify(code))

    def produce(self, topic: str, key: bytes, value: bytes, on_delivery: Any) -> None:
        code = self.refuse(value)
        if code is not None:
            raise self._error(code)
        self.pending.append((key, value, on_delivery))

    def poll(self, timeout: float = 0.0) -> int:
        pending, self.pending = self.pending, []
        for key, value, cb in pending:
            code = self.fail(value)
            if code is None:
                self.delivered.append((key, value))
                cb(None)
            else:
                cb(self._error(code))
        if not pending and timeout:
            time.sleep(min(timeout, 0.01))
        return len(pending)

    def purge(self) -> None:
        pending, self.pending = self.pending, []
        for _, _, cb in pending:
            cb(self._error(KafkaError._PURGE_QUEUE))

    def close(self) -> None:
        pass


def _handler(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, json={"choices": [{"index": 0, "message": {"content": "ok"}}]})


def _recorder(tmp_path: Path, producer: FakeProducer, **kwargs: Any) -> Recorder:
    r = Recorder("127.0.0.1:1", kwargs.pop("stream", "acme:unit"), spool_dir=tmp_path / "spool",
                 close_timeout=kwargs.pop("close_timeout", 2.0), **kwargs)
    r._sender.producer = producer  # the one seam to Kafka
    return r


def _call(client: Any, body: bytes) -> None:
    client.post("https://api.openai.com/v1/chat/completions", content=body).read()


def _wait(pred: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def _events(producer: FakeProducer) -> list[dict[str, Any]]:
    return [decode(v)[1] for _, v in producer.delivered]


# -- error classes ---------------------------------------------------------------------------

@pytest.mark.parametrize("code, kind", [
    (KafkaError.MSG_SIZE_TOO_LARGE, TOO_LARGE), (KafkaError.RECORD_LIST_TOO_LARGE, TOO_LARGE),
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, PERMANENT), (KafkaError.INVALID_RECORD, PERMANENT),
    (KafkaError._MSG_TIMED_OUT, RETRY), (KafkaError._TRANSPORT, RETRY),
    (KafkaError.UNKNOWN_TOPIC_OR_PART, RETRY), (KafkaError._ALL_BROKERS_DOWN, RETRY),
])
def test_every_produce_error_has_a_class(code, kind):
    assert classify(code) == kind


# -- size policy -----------------------------------------------------------------------------

def _event(**bodies: Any) -> dict[str, Any]:
    return {"request_bytes": bodies.get("request"), "response_bytes": bodies.get("response"),
            "error_bytes": bodies.get("error"), "input_bytes": None, "prompt_bytes": None,
            "retrieval": [{"doc_id": "d", "doc_version": None, "chunk_digest": b"\0" * 32,
                           "chunk_bytes": bodies.get("chunk")}],
            "capture": {"truncated": False}}


def test_size_policy_keeps_bodies_up_to_the_limit_and_truncates_above():
    ev = _event(request=b"r" * 10, response=b"s" * 10, chunk=b"c" * 5)
    assert body_size(ev) == 25
    assert apply_size_policy(ev, 25) is ev
    cut = apply_size_policy(ev, 24)
    assert cut["capture"]["truncated"] is True
    assert cut["request_bytes"] is None and cut["response_bytes"] is None
    assert cut["retrieval"][0]["chunk_bytes"] is None
    assert cut["retrieval"][0]["chunk_digest"] == b"\0" * 32
    assert ev["request_bytes"] == b"r" * 10  # the input is not mutated


def test_truncation_keeps_the_head_of_an_error_body():
    cut = truncate(_event(error=b"e" * (ERROR_PREFIX_BYTES + 10)))
    assert cut["error_bytes"] == b"e" * ERROR_PREFIX_BYTES


# -- call context ----------------------------------------------------------------------------

def test_stream_and_call_context_validate_their_arguments():
    with pytest.raises(ConfigError):
        with evidence_client.stream("not a stream!"):
            pass
    with pytest.raises(ConfigError):
        with call_context(input=123):  # type: ignore[arg-type]
            pass
    with pytest.raises(ConfigError):
        Chunk("", None, b"x")
    with call_context(input="héllo", retrieval=[Chunk("doc", "v1", "chunk")]) as ctx:
        assert ctx.input == "héllo".encode() and ctx.retrieval[0].data == b"chunk"
        assert evidence_client.current_call() is ctx
    assert evidence_client.current_call() is None


# -- the Recorder's failure paths ------------------------------------------------------------

def test_a_recorder_that_cannot_start_fails_the_call_loudly(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    r = Recorder("127.0.0.1:1", "acme:unit", spool_dir=blocker / "spool")
    client = r.http_client(transport=httpx2.MockTransport(_handler))
    for _ in range(2):  # every call, not only the first, and never silently
        with pytest.raises(RecorderUnavailable, match="cannot start"):
            _call(client, b'{"model":"m"}')
    r.close()


def test_a_call_with_no_stream_anywhere_is_a_config_error(tmp_path):
    r = _recorder(tmp_path, FakeProducer(), stream=None)
    client = r.http_client(transport=httpx2.MockTransport(_handler))
    with pytest.raises(ConfigError, match="no stream"):
        _call(client, b"{}")
    r.close()


def test_one_recorder_serves_many_streams(tmp_path):
    fake = FakeProducer()
    r = _recorder(tmp_path, fake)
    default = r.http_client(transport=httpx2.MockTransport(_handler))
    tenant = r.http_client(transport=httpx2.MockTransport(_handler), stream="acme:tenant-b")
    _call(default, b'{"n":1}')
    _call(tenant, b'{"n":2}')
    with evidence_client.stream("acme:tenant-c"):
        _call(tenant, b'{"n":3}')
        _call(default, b'{"n":4}')
    _wait(lambda: len(fake.delivered) == 4)
    r.close()
    keys = [k.decode() for k, _ in fake.delivered]
    assert keys == ["acme:unit", "acme:tenant-b", "acme:tenant-c", "acme:tenant-c"]
    assert [e["stream"] for e in _events(fake)] == keys
    assert len({t.name for t in __import__("threading").enumerate()
                if t.name == "evidence-client-sender"}) <= 1


def test_too_large_for_the_cluster_is_resent_truncated_and_nothing_stalls(tmp_path):
    big = b'{"model":"m","messages":"' + b"x" * 5000 + b'"}'
    fake = FakeProducer(fail=lambda v: KafkaError.MSG_SIZE_TOO_LARGE if len(v) > 4000 else None)
    r = _recorder(tmp_path, fake)
    client = r.http_client(transport=httpx2.MockTransport(_handler))
    _call(client, big)
    for i in range(20):
        _call(client, b'{"n":%d}' % i)
    _wait(lambda: len(fake.delivered) == 21)
    r.close()
    events = _events(fake)
    cut = [e for e in events if e["capture"]["truncated"]]
    assert len(cut) == 1 and cut[0]["request_bytes"] is None
    assert r.metrics.snapshot()["truncated"] == 1
    assert r.metrics.snapshot()["failed"] == 0


def test_a_produce_call_that_refuses_the_message_does_not_kill_the_sender(tmp_path):
    fake = FakeProducer(refuse=lambda v: KafkaError.MSG_SIZE_TOO_LARGE if len(v) > 4000 else None)
    r = _recorder(tmp_path, fake)
    client = r.http_client(transport=httpx2.MockTransport(_handler))
    _call(client, b'{"messages":"' + b"y" * 5000 + b'"}')
    _call(client, b'{"n":1}')
    _wait(lambda: len(fake.delivered) == 2)
    assert r._sender.thread is not None and r._sender.thread.is_alive()
    r.close()
    # The truncated copy goes to the end of the spool: after whatever was written meanwhile.
    assert sorted((len(e["request_bytes"] or b""), e["capture"]["truncated"])
                  for e in _events(fake)) == [(0, True), (7, False)]


def test_a_permanent_error_is_kept_aside_never_retried(tmp_path):
    fake = FakeProducer(fail=lambda v: KafkaError.TOPIC_AUTHORIZATION_FAILED if b"deny" in v else None)
    r = _recorder(tmp_path, fake)
    client = r.http_client(transport=httpx2.MockTransport(_handler))
    _call(client, b'{"deny":1}')
    _call(client, b'{"n":1}')
    _wait(lambda: len(fake.delivered) == 1 and r.metrics.snapshot()["undeliverable"] == 1)
    r.close()
    kept = scan(tmp_path / "spool" / "undeliverable" / os.listdir(tmp_path / "spool" / "undeliverable")[0])
    assert len(kept) == 1 and b"deny" in kept[0].value
    assert scan(tmp_path / "spool") == []  # nothing left to retry


def test_a_retriable_failure_spools_and_resends_in_order(tmp_path):
    down = {"on": True}
    fake = FakeProducer(fail=lambda v: KafkaError._MSG_TIMED_OUT if down["on"] else None)
    r = _recorder(tmp_path, fake)
    client = r.http_client(transport=httpx2.MockTransport(_handler))
    for i in range(5):
        _call(client, b'{"n":%d}' % i)
    _wait(lambda: r.metrics.snapshot()["spooled"] == 5)
    down["on"] = False
    _wait(lambda: len(fake.delivered) == 5, timeout=10)
    r.close()
    assert [decode(v)[1]["request_bytes"] for _, v in fake.delivered] == [
        b'{"n":%d}' % i for i in range(5)]


# -- the spool root --------------------------------------------------------------------------

def test_each_recorder_gets_its_own_spool_and_an_empty_one_is_removed(tmp_path):
    a = _recorder(tmp_path, FakeProducer()).start()
    b = _recorder(tmp_path, FakeProducer()).start()
    assert a.own_spool != b.own_spool
    assert set(spool_dirs(tmp_path / "spool")) == {a.own_spool, b.own_spool}
    a.close()
    b.close()
    assert spool_dirs(tmp_path / "spool") == []


_HOLD = """
import sys, time
sys.path.insert(0, {root!r})
from evidence_client.spool import new_spool
s = new_spool(sys.argv[1])
s.append_many([(b"k", b"v%d" % i) for i in range(3)])
print(s.directory, flush=True)
time.sleep(60)
"""


def test_a_live_processs_spool_is_never_taken_a_dead_ones_is_adopted_once(tmp_path):
    root = tmp_path / "spool"
    proc = subprocess.Popen([sys.executable, "-c", _HOLD.format(root=str(Path.cwd())), str(root)],
                            stdout=subprocess.PIPE, text=True)
    try:
        theirs = Path(proc.stdout.readline().strip())
        assert claim_orphans(root) == []          # alive: its flock is held
        proc.kill()
        proc.wait()
        first = claim_orphans(root)
        assert [s.directory for s in first] == [theirs]
        assert claim_orphans(root) == []          # we hold it now: nobody else can
        assert [e.value for e in first[0].peek()] == [b"v0", b"v1", b"v2"]
        first[0].ack(3)
        first[0].remove()
        assert spool_dirs(root) == []
    finally:
        proc.kill()


def test_an_orphan_is_resent_before_new_captures(tmp_path):
    root = tmp_path / "spool"
    old = new_spool(root)
    old.append_many([(b"acme:unit", b"old-1"), (b"acme:unit", b"old-2")])
    old.close()  # its process "ended" with two captures unsent
    fake = FakeProducer()
    r = _recorder(tmp_path, fake)
    client = r.http_client(transport=httpx2.MockTransport(_handler))
    _call(client, b'{"n":"new"}')
    _wait(lambda: len(fake.delivered) == 3)
    r.close()
    assert [v for _, v in fake.delivered][:2] == [b"old-1", b"old-2"]
    assert r.metrics.snapshot()["adopted"] == 2
    assert spool_dirs(root) == []


def test_an_orphan_whose_head_the_disk_refuses_is_resent_once_and_removed(tmp_path,
                                                                          monkeypatch):
    """Kafka has the resent captures: they are given up in memory even when HEAD cannot say
    so, so they are not resent again, and the emptied orphan is removed."""
    root = tmp_path / "spool"
    old = new_spool(root)
    old.append_many([(b"acme:unit", b"old-%d" % i) for i in range(3)])
    old.close()

    def refuse(self: Spool, gen: int, offset: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Spool, "_write_head", refuse)
    fake = FakeProducer()
    r = _recorder(tmp_path, fake)
    r.start()
    _wait(lambda: r.metrics.snapshot()["adopted"] == 3 and len(spool_dirs(root)) == 1)
    r.close()
    assert [v for _, v in fake.delivered] == [b"old-0", b"old-1", b"old-2"]
    assert spool_dirs(root) == []


def test_an_empty_orphan_is_cleaned_up_and_a_spool_is_not_an_orphan_while_created(tmp_path):
    root = tmp_path / "spool"
    s = new_spool(root)
    assert not any(p.name.startswith(".new-") for p in root.iterdir())
    s.close()
    assert claim_orphans(root) == []
    assert spool_dirs(root) == []
    # a Spool object on a directory it must not create
    with pytest.raises(evidence_client.SpoolError):
        Spool(root / "gone").open(create=False)
    assert isinstance(QueueFull("x", retriable=True), ProducerError)


@pytest.mark.parametrize("policy", ["VALUE", "HASH_ONLY"])
def test_call_context_is_digested_and_kept_per_policy(tmp_path, policy):
    import hashlib

    def sha(prefix: int, data: bytes) -> bytes:
        return hashlib.sha256(bytes([prefix]) + data).digest()

    fake = FakeProducer()
    r = _recorder(tmp_path, fake, request_policy=policy)
    client = r.http_client(transport=httpx2.MockTransport(_handler))
    with call_context(input="Où est ma commande ?", prompt=b"SYSTEM: be kind\nUSER: ...",
                      retrieval=[Chunk("kb/orders.md", "v3", "chunk one"),
                                 Chunk("kb/faq.md", None, b"chunk two")]):
        _call(client, b'{"n":1}')
    _call(client, b'{"n":2}')  # outside the block: no context
    _wait(lambda: len(fake.delivered) == 2)
    r.close()
    with_ctx, without = _events(fake)
    keep = policy == "VALUE"
    assert with_ctx["input_digest"] == sha(0x02, "Où est ma commande ?".encode())
    assert with_ctx["prompt_digest"] == sha(0x03, b"SYSTEM: be kind\nUSER: ...")
    assert with_ctx["input_bytes"] == ("Où est ma commande ?".encode() if keep else None)
    assert with_ctx["prompt_bytes"] == (b"SYSTEM: be kind\nUSER: ..." if keep else None)
    assert [(c["doc_id"], c["doc_version"], c["chunk_digest"], c["chunk_bytes"])
            for c in with_ctx["retrieval"]] == [
        ("kb/orders.md", "v3", sha(0x06, b"chunk one"), b"chunk one" if keep else None),
        ("kb/faq.md", None, sha(0x06, b"chunk two"), b"chunk two" if keep else None)]
    assert without["input_digest"] is None and without["retrieval"] == []


class SilentProducer(FakeProducer):
    """A broker that takes messages and never answers."""

    def poll(self, timeout: float = 0.0) -> int:
        time.sleep(min(timeout, 0.01))
        return 0


def test_a_call_returns_only_once_its_capture_is_on_disk(tmp_path):
    r = _recorder(tmp_path, SilentProducer())
    client = r.http_client(transport=httpx2.MockTransport(_handler))
    for i in range(20):
        _call(client, b'{"n":%d}' % i)
        # the call has returned: its capture is fsync'd in the spool, whatever Kafka does
        assert len(scan(tmp_path / "spool")) == i + 1
    assert r.metrics.snapshot()["delivered"] == 0
    r.close(timeout=0.2)
    assert len(scan(tmp_path / "spool")) == 20  # an orphan for the next Recorder


def test_the_async_client_waits_for_the_disk_without_blocking_the_loop(tmp_path):
    import asyncio

    r = _recorder(tmp_path, SilentProducer())

    async def main() -> int:
        client = r.async_http_client(transport=httpx2.MockTransport(_handler))
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.create_task(ticker())
        await asyncio.gather(*(client.post("https://api.openai.com/v1/chat/completions",
                                           content=b'{"n":%d}' % i) for i in range(10)))
        t.cancel()
        return ticks

    assert asyncio.run(main()) > 0
    assert len(scan(tmp_path / "spool")) == 10
    r.close(timeout=0.2)


# -- group commit, and an idle sender woken by a submit -----------------------------------------

def test_group_commit_ms_is_checked(tmp_path):
    for bad in (-1, 1000.5, "2", True, None):
        with pytest.raises(ConfigError, match="group_commit_ms"):
            Recorder("127.0.0.1:1", "acme:unit", spool_dir=tmp_path, group_commit_ms=bad)
    assert Recorder("127.0.0.1:1", "acme:unit", spool_dir=tmp_path).group_commit_ms == 0.0


def test_unwaited_commit_ms_is_checked(tmp_path):
    for bad in (-1, 1001, "5", True, float("nan")):
        with pytest.raises(ConfigError, match="unwaited_commit_ms"):
            Recorder("127.0.0.1:1", "acme:unit", spool_dir=tmp_path, unwaited_commit_ms=bad)
    assert Recorder("127.0.0.1:1", "acme:unit", spool_dir=tmp_path).unwaited_commit_ms == 5.0


def test_durability_is_checked(tmp_path):
    for bad in ("fsync", None, 1):
        with pytest.raises(ConfigError, match="durability"):
            Recorder("127.0.0.1:1", "acme:unit", spool_dir=tmp_path, durability=bad)
    assert Recorder("127.0.0.1:1", "acme:unit", spool_dir=tmp_path).durability == "before_return"


def test_the_settings_are_built_once_from_the_arguments_and_the_environment(tmp_path,
                                                                           monkeypatch):
    import dataclasses

    monkeypatch.setenv("EVIDENCE_KAFKA_BOOTSTRAP", "kafka-a:9092")
    monkeypatch.setenv("EVIDENCE_TOPIC_PREFIX", "acme")
    monkeypatch.setenv("EVIDENCE_SPOOL_DIR", str(tmp_path / "env-spool"))
    r = Recorder(stream="acme:unit", request_policy=type("P", (), {"value": "HASH_ONLY"})())
    s = r.settings
    assert (s.bootstrap_servers, s.topic, s.spool_dir, s.request_policy) == (
        "kafka-a:9092", "acme.intake", tmp_path / "env-spool", "HASH_ONLY")
    assert (r.stream, r.topic, r.spool_dir, r.max_pending) == (
        "acme:unit", "acme.intake", tmp_path / "env-spool", 100_000)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.stream = "acme:other"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="fixed at construction"):
        r.close_timeout = 5.0
    with pytest.raises(AttributeError):
        r.no_such_setting  # noqa: B018
    given = Recorder("kafka-b:9092", topic_prefix="mine", spool_dir=tmp_path / "given")
    assert (given.bootstrap_servers, given.topic, given.spool_dir, given.stream) == (
        "kafka-b:9092", "mine.intake", tmp_path / "given", None)


class _Sender:
    """A Recorder's sender driven by the test (no sender thread), with the spool's appends
    (each one fsync) and the timeouts of the producer's polls recorded."""

    def __init__(self, tmp_path: Path, producer: FakeProducer | None = None,
                 **kwargs: Any) -> None:
        self.recorder = _recorder(tmp_path, producer or FakeProducer(), **kwargs)
        self.sender = s = self.recorder._sender
        s.open()
        self.appends: list[int] = []
        self.polls: list[float] = []
        spool = s.tracker.spool
        append_many, poll = spool.append_many, s.producer.poll
        spool.append_many = lambda items: (self.appends.append(len(items)),
                                           append_many(items))[1]
        s.producer.poll = lambda timeout=0.0: (self.polls.append(timeout), poll(timeout))[1]

    def exchange(self) -> Any:
        from evidence_client.capture import Exchange
        from evidence_contract import content_key, now_micros

        t = now_micros()
        return Exchange(stream="acme:unit", request_policy="VALUE",
                        content_key=content_key(b"{}"), request_bytes=b"{}",
                        url="https://api.openai.com/v1/chat/completions",
                        host="api.openai.com", path="/v1/chat/completions", started_at=t - 1,
                        finished_at=t, duration_us=1, status=200,
                        content_type="application/json", chunks=[b'{"choices":[]}'], eof=True)

    def durable(self, watched: bool = False) -> Any:
        from evidence_client.recorder import Durable

        return Durable(1.0, self.recorder.metrics, watched=watched, on_watch=self.sender.hurry)

    def submit(self, n: int = 1, lead: bool = False, watched: bool = False) -> list[Any]:
        """What ``Recorder.submit`` hands over; ``lead``: as a sync call's thread does;
        ``watched``: a call waits for it (a sync or async call under before_return)."""
        out = []
        for _ in range(n):
            d = self.durable(watched or lead)
            self.sender.submit(self.exchange(), d, lead=lead)
            out.append(d)
        return out

    def submit_later(self, delay: float, watched: bool = False) -> Any:
        import threading

        t = threading.Thread(target=lambda: (time.sleep(delay), self.submit(watched=watched)),
                             daemon=True)
        t.start()
        return t


def test_a_lone_sync_call_writes_its_own_capture_and_the_sender_tracks_it(tmp_path):
    s = _Sender(tmp_path)
    (d,) = s.submit(lead=True)
    assert d.ready and s.appends == [1]  # on disk when submit returned, on this thread
    assert s.sender.take_new() == 1 and s.appends == [1]  # tracked, not written again
    s.sender.step(0.0)
    assert s.sender.tracker.inflight == 1


def test_a_capture_left_to_the_sender_is_written_at_its_next_step(tmp_path):
    s = _Sender(tmp_path)
    ds = s.submit(3)  # async calls, or after_return: the sender writes them
    assert not any(d.ready for d in ds) and s.appends == []
    assert s.sender.take_new() == 3
    assert all(d.ready for d in ds) and s.appends == [3]  # one fsync for the three


def test_a_call_that_finds_a_write_under_way_leaves_its_capture_to_the_leader(tmp_path):
    s = _Sender(tmp_path)
    j = s.sender.journal
    with j.lock:  # another thread's commit is under way
        (d,) = s.submit(lead=True)
        assert not d.ready and s.appends == []
    # That leader's next round (or the sender, woken by the call) writes it.
    assert s.sender.take_new() == 1 and d.ready and s.appends == [1]


def test_a_batch_that_found_company_right_after_an_append_waits_for_more(tmp_path):
    s = _Sender(tmp_path, group_commit_ms=1000)
    s.submit()
    assert s.sender.take_new() == 1  # idle before: taken and fsync'd at once
    s.submit(2)
    later = s.submit_later(0.1)  # arrives well within the 1 s window
    assert s.sender.take_new() == 3  # one fsync for the three
    later.join()
    assert s.appends == [1, 3]


def test_a_lone_capture_never_waits_for_company(tmp_path):
    s = _Sender(tmp_path, group_commit_ms=1000)
    s.submit()
    assert s.sender.take_new() == 1
    s.submit()  # right after that append, and alone: written at once, no window
    later = s.submit_later(0.3)  # well within the 1 s window
    assert s.sender.take_new() == 1
    later.join()
    assert s.sender.take_new() == 1
    assert s.appends == [1, 1, 1]


def test_by_default_a_batch_does_not_wait_for_more(tmp_path):
    s = _Sender(tmp_path)
    s.sender.journal.last_append = time.monotonic()
    s.submit(2)
    later = s.submit_later(0.3)
    assert s.sender.take_new() == 2  # did not wait for the third
    later.join()
    assert s.sender.take_new() == 1
    assert s.appends == [2, 1]


def test_an_idle_sender_waits_to_be_woken_and_a_submit_wakes_it(tmp_path):
    s = _Sender(tmp_path)
    import threading

    later = s.submit_later(0.1, watched=True)  # an async call's: it awaits the write
    # Nothing in flight: the step waits to be woken (here up to 60 s), not in the
    # producer's poll; the submit ends the wait, and the capture is durable and produced.
    step = threading.Thread(target=s.sender.step, args=(60.0,), daemon=True)
    step.start()
    step.join(20)
    later.join()
    assert not step.is_alive() and s.appends == [1]
    assert s.sender.tracker.inflight == 1
    s.sender.step(0.0)  # the delivery report
    assert s.sender.tracker.inflight == 0 and s.recorder.metrics.snapshot()["delivered"] == 1


def _step_until(s: "_Sender", done: Any, wait: float = 10.0) -> None:
    """The sender thread's loop, on this thread, until ``done()`` (at most 200 steps, each
    waiting up to ``wait`` s to be woken)."""
    for _ in range(200):
        if done():
            return
        s.sender.step(wait)
    raise AssertionError("the sender never got there")


def test_unwaited_captures_share_an_fsync_until_their_window_ends(tmp_path):
    s = _Sender(tmp_path, unwaited_commit_ms=200)
    ds = s.submit(3)  # after_return calls, or submit() with nobody waiting
    assert s.sender.take_new(0.001) == 0 and s.appends == []  # inside the window: kept
    # Each step waits at most until the window ends (not the 10 s it is offered), then
    # writes all three with one fsync.
    _step_until(s, lambda: s.appends)
    assert s.appends == [3] and all(d.ready for d in ds)


def test_a_call_that_starts_to_wait_on_an_unwaited_capture_has_it_written_now(tmp_path):
    import threading

    s = _Sender(tmp_path, unwaited_commit_ms=1000)
    d1, d2 = s.submit(2)
    assert s.sender.take_new(0.001) == 0 and s.appends == []
    # Durable.wait() hurries the journal and wakes the sender: written well before the
    # window's end, both captures with one fsync.
    waiter = threading.Thread(target=d2.wait, daemon=True)
    waiter.start()
    _step_until(s, lambda: s.appends, wait=60.0)
    waiter.join(20)
    assert s.appends == [2] and d1.ready and d2.ready and not waiter.is_alive()


def test_a_waited_capture_takes_the_unwaited_ones_with_it(tmp_path):
    s = _Sender(tmp_path, unwaited_commit_ms=1000)
    unwaited = s.submit(2)
    (awaited,) = s.submit(watched=True)  # an async call's capture under before_return
    assert s.sender.take_new(60.0) == 3 and s.appends == [3]
    assert awaited.ready and all(d.ready for d in unwaited)


def test_unwaited_commit_ms_0_writes_every_capture_at_once(tmp_path):
    s = _Sender(tmp_path, unwaited_commit_ms=0)
    s.submit(2)
    assert s.sender.take_new(0.001) == 2 and s.appends == [2]


def test_an_async_call_under_before_return_is_not_kept_for_company(tmp_path):
    s = _recorder(tmp_path, FakeProducer(), unwaited_commit_ms=1000)
    calls = []
    s._sender.submit = lambda ex, d, lead: calls.append((d.watched, lead))  # type: ignore
    s._sender.thread = object()  # type: ignore[assignment]  # started, as far as _submit knows
    s._submit_awaited(object())  # type: ignore[arg-type]
    s._submit_and_lead(object())  # type: ignore[arg-type]
    s._submit_after_return(object())  # type: ignore[arg-type]
    s.submit(object())  # type: ignore[arg-type]
    assert calls == [(True, False), (True, True), (False, False), (False, False)]


def test_a_full_journal_refuses_after_max_block_ms(tmp_path):
    import queue

    s = _Sender(tmp_path, max_pending=2, max_block_ms=50)
    s.submit(2)
    with pytest.raises(queue.Full):
        s.submit()
    assert s.sender.take_new() == 2
    s.submit()  # room again
    assert s.sender.take_new() == 1


def test_after_return_a_call_does_not_wait_and_its_capture_is_written_after(tmp_path):
    r = _recorder(tmp_path, SilentProducer(), durability="after_return")
    client = r.http_client(transport=httpx2.MockTransport(_handler))
    for i in range(5):
        _call(client, b'{"n":%d}' % i)
    _wait(lambda: len(scan(tmp_path / "spool")) == 5)
    assert r.metrics.snapshot()["slow_durable"] == 0
    r.close(timeout=0.2)
    assert [decode(e.value)[1]["request_bytes"] for e in scan(tmp_path / "spool")] == [
        b'{"n":%d}' % i for i in range(5)]


def test_with_a_delivery_outstanding_the_sender_never_waits_in_the_producers_poll(tmp_path):
    s = _Sender(tmp_path, SilentProducer())
    s.submit()
    s.sender.step(60.0)
    assert s.appends == [1] and s.sender.tracker.inflight == 1  # no report will come
    for _ in range(3):
        s.submit()
        s.sender.step(60.0)  # woken at once: the capture waits for it
    # Each written at once and tracked (produced too unless its round has closed: no report
    # ends the first one).
    assert s.appends == [1, 1, 1, 1] and len(s.sender.tracker.entries) == 4
    assert s.sender.tracker.inflight >= 1
    assert s.polls and set(s.polls) == {0}, s.polls


def test_the_sender_does_not_wait_forever_for_a_write_that_holds_the_spool(tmp_path):
    s = _Sender(tmp_path)
    j = s.sender.journal
    (d,) = s.submit()
    with j.lock:  # e.g. a call's thread stopped in a signal handler that closes the Recorder
        assert s.sender.take_new() == 0 and not d.ready  # gave up after its bounded wait
        s.sender.tracker.ack(force=True)  # nor does an acknowledgement
    assert s.sender.take_new() == 1 and d.ready and s.appends == [1]


def test_a_call_appending_does_not_wait_for_the_acknowledgements_fsyncs(tmp_path):
    """HEAD's update (two fsyncs and a rename) is written outside the journal's lock: a lone
    sync call that came during one used to wait for it, every 100 ms (its added p99)."""
    import threading

    s = _Sender(tmp_path)
    tracker, j = s.sender.tracker, s.sender.journal
    (d,) = s.submit(lead=True)
    assert s.sender.take_new() == 1
    s.sender._send_own()
    _wait(lambda: (s.sender.producer.poll(0), tracker.entries[0].state == "done")[1])
    inside, go_on, held = threading.Event(), threading.Event(), []
    write_head = tracker.spool._write_head

    def slow_head(gen: int, offset: int) -> None:
        held.append(j.lock.locked())
        inside.set()
        assert go_on.wait(10)
        write_head(gen, offset)

    tracker.spool._write_head = slow_head
    acker = threading.Thread(target=tracker.ack, args=(True,))
    acker.start()
    try:
        assert inside.wait(10)
        (d2,) = s.submit(lead=True)  # during HEAD's write: on disk when this returns
        assert d2.ready and s.appends == [1, 1]
    finally:
        go_on.set()
        acker.join(10)
    assert held == [False] and not tracker.spool.head_behind and not tracker.entries
    assert s.sender.take_new() == 1  # the second capture, tracked after the first


# -- the syncer ----------------------------------------------------------------------------

class _Fsync:
    """The syncer's fsyncs (``evidence_client.journal.datasync``), each held until ``go`` is
    set, then failing with ``fail`` if given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import threading

        import evidence_client.journal

        self.go, self.started = threading.Event(), threading.Event()
        self.calls = 0
        self.fail: OSError | None = None
        monkeypatch.setattr(evidence_client.journal, "datasync", self)

    def __call__(self, fd: int) -> None:
        os.fstat(fd)  # a real descriptor of the spool's log
        self.calls += 1
        self.started.set()
        assert self.go.wait(10)
        if self.fail is not None:
            raise self.fail


@pytest.fixture
def syncing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A test-driven sender whose journal's syncer runs, its fsyncs held (``_Fsync``)."""
    fsync = _Fsync(monkeypatch)
    s = _Sender(tmp_path)
    s.sender.journal.start_syncer()  # as Sender.start() does
    s.sender.tracker.record_head = s.sender.journal.record_head
    yield s, fsync
    fsync.go.set()
    s.sender.journal.stop_syncer(10)


def test_a_batch_no_call_waits_for_goes_to_kafka_while_its_fsync_runs(syncing):
    s, fsync = syncing
    ds = s.submit(3)  # after_return calls, or submit() with nobody waiting
    s.sender.step(0.0)
    # Written and produced without an fsync on the sender's thread: a disk that stalls
    # holds up only what waits for it.
    assert s.appends == [] and s.sender.tracker.inflight == 3
    assert fsync.started.wait(10) and not any(d.ready for d in ds)
    s.sender.step(0.0)
    assert s.recorder.metrics.snapshot()["delivered"] == 3
    assert not any(d.ready for d in ds)  # Kafka's acknowledgement is not the disk's
    fsync.go.set()
    _wait(lambda: all(d.ready for d in ds))
    assert fsync.calls == 1 and s.sender.journal.unsynced() == 0


def test_a_batch_a_call_waits_for_is_fsyncd_by_the_sender_before_it_is_produced(syncing):
    s, fsync = syncing
    (d,) = s.submit(watched=True)  # an async call's capture under before_return
    assert s.sender.take_new() == 1
    assert s.appends == [1] and d.ready and fsync.calls == 0
    assert s.sender.tracker.inflight == 0  # produced only after


def test_a_failed_background_fsync_leaves_its_calls_to_kafka_and_later_batches_sync(syncing):
    s, fsync = syncing
    first = s.submit(2)
    s.sender.step(0.0)  # written and produced
    assert fsync.started.wait(10)
    s.sender.step(0.0)  # delivered: Kafka has both, the disk maybe not
    fsync.fail = OSError(5, "Input/output error (test)")
    fsync.go.set()
    _wait(lambda: fsync.calls == 1 and s.sender.journal.unsynced() == 0)
    (second,) = s.submit()
    s.sender.step(0.0)
    # The failed fsync's calls go on, as Kafka already has their captures; from then on
    # every batch waits for its own fsync on the sender's thread, and is released by it.
    assert all(d.ready for d in first) and second.ready
    assert s.appends == [1] and fsync.calls == 1


def test_a_failed_background_fsync_releases_an_undelivered_capture_once_kafka_has_it(syncing):
    s, fsync = syncing
    (d,) = s.submit()
    s.sender.take_new()  # written, tracked; not produced yet
    fsync.fail = OSError(5, "Input/output error (test)")
    fsync.go.set()
    _wait(lambda: fsync.calls == 1 and s.sender.journal.unsynced() == 0)
    s.sender.step(0.0)  # the failure settled: the capture waits for Kafka; produced
    assert not d.ready and s.sender.tracker.inflight == 1
    s.sender.step(0.0)  # delivered
    assert d.ready


def test_with_the_syncer_head_is_recorded_off_the_senders_thread(syncing, monkeypatch):
    import threading

    s, fsync = syncing
    fsync.go.set()
    writers: list[str] = []
    write_head = Spool._write_head

    def noted(self: Spool, gen: int, offset: int) -> None:
        writers.append(threading.current_thread().name)
        write_head(self, gen, offset)

    monkeypatch.setattr(Spool, "_write_head", noted)
    s.submit(3)
    s.sender.step(0.0)  # written and produced
    s.sender.step(0.0)  # delivered
    s.sender.tracker.ack(force=True)  # released; HEAD's two fsyncs are the syncer's
    spool = s.sender.tracker.spool
    _wait(lambda: not spool.head_behind)
    assert writers and set(writers) == {"evidence-client-syncer"}
    assert spool.pending_bytes == 0


def test_at_close_the_syncer_makes_what_it_holds_durable(syncing):
    import threading

    s, fsync = syncing
    ds = s.submit(2)
    s.sender.take_new()
    assert fsync.started.wait(10)
    j = s.sender.journal
    stopper = threading.Thread(target=j.stop_syncer, args=(10,))
    stopper.start()
    fsync.go.set()
    stopper.join(10)
    assert not stopper.is_alive() and all(d.ready for d in ds) and j.unsynced() == 0
    (d,) = s.submit()  # stopped: a batch written now syncs itself
    s.sender.take_new()
    assert d.ready and s.appends == [1]


# -- a full disk ---------------------------------------------------------------------------

@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """Every spool's writes fail while ``disk["full"]``, as on a full disk: those fsync'd at
    once and those the syncer fsyncs later."""
    state = {"full": False}

    def refusing(write: Any) -> Any:
        def refuse(self: Spool, items: list[tuple[bytes, bytes]]) -> None:
            if state["full"]:
                raise evidence_client.SpoolError("No space left on device (test)")
            write(self, items)
        return refuse

    monkeypatch.setattr(Spool, "append_many", refusing(Spool.append_many))
    monkeypatch.setattr(Spool, "write_many", refusing(Spool.write_many))
    return state


def test_on_a_full_disk_a_call_returns_once_kafka_has_its_capture(tmp_path, disk):
    fake = FakeProducer()
    r = _recorder(tmp_path, fake)
    client = r.http_client(transport=httpx2.MockTransport(_handler))
    disk["full"] = True
    for i in range(5):
        _call(client, b'{"n":%d}' % i)
        # not on disk: the call waited for Kafka instead, so a kill now loses nothing
        assert len(fake.delivered) == i + 1
    m = r.metrics.snapshot()
    assert (m["unspooled"], m["delivered"], m["slow_durable"]) == (5, 5, 0)
    r.close()


def _calls_on_a_full_disk(tmp_path: Path, disk: dict[str, bool], producer: FakeProducer,
                          n: int) -> Recorder:
    """A Recorder whose calls wait at most 50 ms, and ``n`` calls made while its disk is full."""
    r = _recorder(tmp_path, producer, durable_timeout_ms=50)
    client = r.http_client(transport=httpx2.MockTransport(_handler))
    disk["full"] = True
    for i in range(n):
        _call(client, b'{"n":%d}' % i)
    return r


def test_on_a_full_disk_a_call_kafka_does_not_answer_goes_on_after_durable_timeout(tmp_path,
                                                                                     disk):
    r = _calls_on_a_full_disk(tmp_path, disk, SilentProducer(), 1)
    assert r.metrics.snapshot()["slow_durable"] == 1  # counted, and the call went on
    r.close(timeout=0.2)


def test_a_capture_neither_disk_nor_kafka_took_is_kept_until_one_does(tmp_path, disk):
    down, tries = {"on": True}, []

    def fail(value: bytes) -> int | None:
        tries.append(value)
        return KafkaError._MSG_TIMED_OUT if down["on"] else None

    fake = FakeProducer(fail=fail)
    r = _calls_on_a_full_disk(tmp_path, disk, fake, 3)
    # Kafka failed each again and again: each time it was offered to the disk and sent from
    # memory once more; none was given up.
    _wait(lambda: len(tries) >= 9)
    assert r.metrics.snapshot()["failed"] == 0 and scan(tmp_path / "spool") == []
    disk["full"] = False  # the disk takes writes again: they wait there now, safe from a kill
    _wait(lambda: len(scan(tmp_path / "spool")) == 3)
    down["on"] = False
    _wait(lambda: len(fake.delivered) == 3, timeout=10)
    r.close()
    m = r.metrics.snapshot()
    assert (m["unspooled"], m["failed"]) == (3, 0)
    assert sorted(decode(v)[1]["request_bytes"] for _, v in fake.delivered) == [
        b'{"n":%d}' % i for i in range(3)]


def test_at_close_a_capture_only_in_memory_goes_to_the_spool_if_the_disk_takes_it(tmp_path,
                                                                                   disk):
    r = _calls_on_a_full_disk(tmp_path, disk, SilentProducer(), 1)
    disk["full"] = False
    r.close(timeout=0.2)  # Kafka never answered: purged at close, written to the spool
    assert [decode(e.value)[1]["request_bytes"] for e in scan(tmp_path / "spool")] == [
        b'{"n":0}']
    assert r.metrics.snapshot()["failed"] == 0


class HeldProducer(FakeProducer):
    """A broker whose answers come only when the test lets them (``answer()``)."""

    def __init__(self) -> None:
        super().__init__()
        self.produced: list[bytes] = []
        self._answer = False

    def produce(self, topic: str, key: bytes, value: bytes, on_delivery: Any) -> None:
        self.produced.append(value)
        super().produce(topic, key, value, on_delivery)

    def answer(self) -> None:
        self._answer = True

    def poll(self, timeout: float = 0.0) -> int:
        if not self._answer:
            return 0
        self._answer = False
        return super().poll(0.0)


def test_captures_are_produced_in_rounds_while_the_broker_has_not_answered(tmp_path):
    """librdkafka's idempotent producer spins its broker thread while a request is
    unanswered past linger.ms with messages queued behind it: the sender keeps captures
    past the round's window in the tracker (on disk already) until the round is delivered."""
    held = HeldProducer()
    s = _Sender(tmp_path, held)
    t = s.sender.tracker
    s.submit(6)
    s.sender.step(0.0)
    assert len(held.produced) == 6 and t.inflight == 6  # the round's first captures
    s.submit()
    s.sender.step(0.0)  # inside the window (4 ms of a 5 ms linger): joins the round
    assert len(held.produced) == 7
    t._round_at -= 1.0  # the round's window is over; its batch was sent and not answered
    s.submit(4)
    for _ in range(3):
        s.sender.step(0.0)
    assert len(held.produced) == 7 and len(t.entries) == 11  # written, tracked, held back
    assert s.appends and sum(s.appends) == 11
    in_spool = [e.event_id for e in t.entries]
    held.answer()
    s.sender.step(0.0)  # the round is delivered: the next one takes the four at once
    assert len(held.produced) == 11 and t.inflight == 4
    assert [decode(v)[1]["event_id"] for v in held.produced] == in_spool  # spool order


def test_a_round_stays_open_for_its_window_and_reopens_once_delivered(tmp_path):
    from evidence_client.metrics import Metrics
    from evidence_client.tracking import IDEMPOTENT_INFLIGHT, Backoff, Tracked, Tracker

    t = Tracker(new_spool(tmp_path / "spool"), Metrics(), Backoff())
    assert t.round_open(0.0)  # nothing outstanding
    first = [Tracked(str(i), b"k", b"v") for i in range(IDEMPOTENT_INFLIGHT - 1)]
    for e in first:
        t.sent(e)
    assert t.round_open(0.0)  # too few in flight to hold the producer's next request back
    a, b = Tracked("a", b"k", b"v"), Tracked("b", b"k", b"v")
    t.sent(a)
    assert t.round_open(10.0) and not t.round_open(0.0)
    t._round_at -= 1.0
    t.sent(b)  # produced past the window (an unspooled capture): the round keeps its start
    assert not t.round_open(0.5)
    for e in [a, *first]:
        t.delivered(e, None)
    assert t.inflight == 1 and t.round_open(0.0)  # b alone is outstanding: below 5 again
    t.delivered(b, None)
    assert t.round_open(0.0)


def test_a_round_takes_a_backlog_larger_than_one_take_at_once(tmp_path):
    from evidence_client.tracking import TAKE_BATCH

    held = HeldProducer()
    s = _Sender(tmp_path, held)
    s.submit(TAKE_BATCH + 200)
    s.sender.take_new()  # all written and tracked, none produced yet
    assert held.produced == []
    s.sender.step(0.0)  # one round: the whole backlog, not one take of it
    assert len(held.produced) == TAKE_BATCH + 200
