"""``evidence_client.journal.Durable``: the answer to "is my capture on disk yet?", whether a
call waits in a thread or on an event loop, before or after the release."""

from __future__ import annotations

import asyncio
import threading

from evidence_client.journal import Durable
from evidence_client.metrics import Metrics

DEADLINE_S = 10.0
"""Bound on every wait here that should end at once: a failure, not a slow machine, hits it."""


def _durable(timeout: float = DEADLINE_S, **kw) -> tuple[Durable, Metrics]:
    metrics = Metrics()
    return Durable(timeout, metrics, **kw), metrics


def test_a_capture_set_before_anyone_waits_answers_at_once_and_is_ready():
    d, metrics = _durable()
    assert not d.ready
    d.set()
    assert d.ready
    assert d.wait() is True
    assert asyncio.run(d.wait_async()) is True
    d.set()  # a second release is harmless
    assert metrics.snapshot().get("slow_durable", 0) == 0


def test_a_waiting_thread_is_released_by_a_set_from_another_thread():
    d, _ = _durable()
    started, got = threading.Event(), []

    def call() -> None:
        started.set()
        got.append(d.wait())

    t = threading.Thread(target=call)
    t.start()
    assert started.wait(DEADLINE_S)
    d.set()
    t.join(DEADLINE_S)
    assert not t.is_alive() and got == [True]


def test_many_threads_waiting_on_one_capture_are_all_released():
    d, _ = _durable()
    got: list[bool] = []
    threads = [threading.Thread(target=lambda: got.append(d.wait())) for _ in range(8)]
    for t in threads:
        t.start()
    d.set()
    for t in threads:
        t.join(DEADLINE_S)
    assert got == [True] * 8


def test_an_async_wait_is_released_by_a_set_from_another_thread():
    d, _ = _durable()

    async def main() -> bool:
        waiting = asyncio.ensure_future(d.wait_async())
        await asyncio.sleep(0)  # the waiter is registered
        threading.Thread(target=d.set).start()
        return await asyncio.wait_for(waiting, DEADLINE_S)

    assert asyncio.run(main()) is True


def test_a_wait_that_times_out_is_counted_and_a_later_set_still_releases():
    d, metrics = _durable(timeout=0.01)
    assert d.wait() is False
    assert asyncio.run(d.wait_async()) is False
    assert metrics.snapshot()["slow_durable"] == 2
    d.set()
    assert d.wait() is True


def test_waiting_hurries_an_unwaited_capture_once():
    hurried: list[int] = []
    d, _ = _durable(timeout=0.01, on_watch=lambda: hurried.append(1))
    assert not d.watched
    d.wait()
    d.wait()
    assert d.watched and hurried == [1]
    d2, _ = _durable(on_watch=lambda: hurried.append(2))
    d2.set()
    d2.wait()  # already on disk: nothing to hurry
    assert hurried == [1] and not d2.watched
