"""Waiting for a head to move, without a database: the notice format
(``projections.notify``), ``api.watch.wait_past`` over a fake head, and the projector's notice
being best effort."""

from __future__ import annotations

import asyncio

import pytest

import api.watch
from api.watch import HeadWatch, wait_past
from projections.errors import StoreError
from projections.notify import ALL, PAYLOAD_MAX, heads_channel, payload, streams_of


def test_the_channel_is_the_views_schemas_and_fits_a_name():
    assert heads_channel("evidence") == "evidence_heads:evidence"
    assert heads_channel("tv_a") != heads_channel("tv_b")
    long_a, long_b = "v" * 63, "v" * 62 + "w"
    for views in (long_a, long_b):
        assert len(heads_channel(views).encode()) <= 63
    assert heads_channel(long_a) != heads_channel(long_b)


def test_a_notice_names_the_streams_or_all_of_them():
    assert payload(["b", "a:x", "a"]) == "a a:x b"
    assert streams_of(payload(["b", "a"])) == {"a", "b"}
    many = [f"stream-{i:06d}" for i in range(PAYLOAD_MAX // 10)]
    assert payload(many) == ALL and streams_of(payload(many)) is None
    assert payload([]) == ALL
    assert streams_of("") is None and streams_of("a * b") is None


class FakeHeads:
    """A head that moves when told; counts reads."""

    def __init__(self, seq: int | None) -> None:
        self.seq, self.reads = seq, 0

    async def __call__(self, stream: str) -> int | None:
        self.reads += 1
        return self.seq


class FakeAnswers:
    """The whole answer read, as the stream route reads it: (head seq, the answer); counts
    reads."""

    def __init__(self, heads: FakeHeads) -> None:
        self.heads, self.reads = heads, 0

    async def __call__(self, stream: str) -> tuple[int | None, str]:
        self.reads += 1
        return self.heads.seq, f"answer at {self.heads.seq}"


def run(coro):
    return asyncio.run(coro)


def test_no_wait_when_the_head_is_past_or_absent():
    async def go():
        watch = HeadWatch("postgresql://unused", "evidence")
        for seq in (5, None):
            heads = FakeHeads(seq)
            await asyncio.wait_for(wait_past(watch, "s", 4, 3600, heads), 5)
            assert heads.reads == 1
            # With the answer's read: the first look ends it, so the caller reads the answer.
            answers = FakeAnswers(heads)
            assert await asyncio.wait_for(
                wait_past(watch, "s", 4, 3600, heads, answers), 5) is None
            assert (heads.reads, answers.reads) == (2, 0)
        assert watch._count == 0 and not watch._waiters
    run(go())


def test_a_notice_for_the_stream_ends_the_wait(monkeypatch):
    monkeypatch.setattr(api.watch, "RECHECK_S", 3600.0)

    async def go():
        watch = HeadWatch("postgresql://unused", "evidence")
        heads = FakeHeads(4)
        task = asyncio.create_task(wait_past(watch, "s", 4, 3600, heads))
        await asyncio.sleep(0.01)
        assert not task.done() and heads.reads == 1
        watch.wake(frozenset({"other"}))  # not ours: stays asleep
        await asyncio.sleep(0.01)
        assert not task.done() and heads.reads == 1
        watch.wake(frozenset({"s"}))  # ours, but the head has not moved: reads, waits on
        await asyncio.sleep(0.01)
        assert not task.done() and heads.reads == 2
        heads.seq = 5
        watch.wake(None)  # every stream
        await asyncio.wait_for(task, 5)
        assert heads.reads == 3 and watch._count == 0 and not watch._waiters
    run(go())


def test_the_wait_ends_at_its_deadline_and_rereads_without_notices(monkeypatch):
    monkeypatch.setattr(api.watch, "RECHECK_S", 0.01)

    async def go():
        watch = HeadWatch("postgresql://unused", "evidence")
        heads = FakeHeads(4)
        await asyncio.wait_for(wait_past(watch, "s", 4, 0.2, heads), 5)
        assert heads.reads > 2  # re-read on its own, then gave up at the deadline
    run(go())


def test_past_max_waiters_a_request_is_answered_at_once(monkeypatch):
    monkeypatch.setattr(api.watch, "RECHECK_S", 3600.0)

    async def go():
        watch = HeadWatch("postgresql://unused", "evidence", max_waiters=1)
        first = asyncio.create_task(wait_past(watch, "s", 4, 3600, FakeHeads(4)))
        await asyncio.sleep(0.01)
        heads = FakeHeads(4)
        await asyncio.wait_for(wait_past(watch, "s", 4, 3600, heads), 5)
        assert heads.reads == 1 and not first.done()
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert watch._count == 0 and not watch._waiters
    run(go())


def test_the_listener_keeps_trying_while_postgresql_is_away(monkeypatch):
    async def go():
        # Nothing listens on port 1: each attempt fails, is logged, and is tried again.
        watch = HeadWatch("postgresql://x@127.0.0.1:1/x", "evidence")
        await watch.open()
        await asyncio.sleep(0.2)
        assert not watch.listening and not watch._task.done()
        await watch.close()
        assert watch._task is None
    run(go())


class _FailingStore:
    def __init__(self) -> None:
        self.calls = 0

    def notify_heads(self, streams) -> None:
        self.calls += 1
        raise StoreError("PostgreSQL: notify heads: too many notifications in the NOTIFY queue")


def test_a_failed_notice_does_not_fail_the_batch(monkeypatch):
    from projections import service

    logged = []
    monkeypatch.setattr(service, "log", lambda level, event, **kw: logged.append(event))
    writer = service.GenerationWriter.__new__(service.GenerationWriter)
    writer.store, writer.generation, writer._notify_warned = _FailingStore(), "g1", None
    writer._notify({"a": None})
    writer._notify({"a": None})
    assert writer.store.calls == 2
    assert logged == ["notify_failed"]  # once a minute at most


def test_after_a_wait_the_read_that_ends_it_is_the_answer(monkeypatch):
    monkeypatch.setattr(api.watch, "RECHECK_S", 3600.0)

    async def go():
        watch = HeadWatch("postgresql://unused", "evidence")
        heads = FakeHeads(4)
        answers = FakeAnswers(heads)
        task = asyncio.create_task(wait_past(watch, "s", 4, 3600, heads, answers))
        await asyncio.sleep(0.01)
        assert (heads.reads, answers.reads) == (1, 0)  # the first look is the cheap one
        watch.wake(frozenset({"s"}))  # the head has not moved: looks again, waits on
        await asyncio.sleep(0.01)
        assert not task.done() and (heads.reads, answers.reads) == (1, 1)
        heads.seq = 5
        watch.wake(frozenset({"s"}))
        assert await asyncio.wait_for(task, 5) == "answer at 5"
        assert (heads.reads, answers.reads) == (1, 2)
    run(go())


def test_at_the_deadline_the_answer_is_the_last_read(monkeypatch):
    monkeypatch.setattr(api.watch, "RECHECK_S", 0.01)

    async def go():
        watch = HeadWatch("postgresql://unused", "evidence")
        heads = FakeHeads(4)
        answers = FakeAnswers(heads)
        got = await asyncio.wait_for(wait_past(watch, "s", 4, 0.2, heads, answers), 5)
        assert got == "answer at 4" and answers.reads >= 1 and heads.reads == 1
    run(go())
