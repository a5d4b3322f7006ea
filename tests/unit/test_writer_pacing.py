"""The writer's transaction pacing (``WriterConfig.transaction_interval_ms``): under load a
batch lingers until the interval since the last transaction began has passed, so fewer,
larger transactions; a batch after a quiet spell, or a full one, does not wait for it."""

from __future__ import annotations

from typing import Any

import pytest

from server.settings import SettingsError
from tests.unit.test_writer_shell import Fakes, assert_gapless_chain
from writer.config import WriterConfig
from writer.kafka_io import consumer_config
from writer.loop import IDLE_WAIT_S

pytestmark = pytest.mark.timeout(30)


def recording(f: Fakes) -> list[float]:
    """The timeout of every consume call of ``f``'s intake consumer from now on."""
    consumer = f.intake_consumer
    timeouts: list[float] = []
    real = consumer.consume

    def consume(num_messages: int = 1, timeout: float = -1) -> list[Any]:
        timeouts.append(timeout)
        return real(num_messages, timeout)

    consumer.consume = consume  # type: ignore[method-assign]
    return timeouts


def test_a_batch_right_after_a_transaction_lingers_until_the_interval_has_passed():
    f = Fakes(transaction_interval_ms=5_000).start()
    ids = f.captures(3)
    timeouts = recording(f)
    assert f.service._loop.step() == 3
    assert timeouts == [0], "the first batch after a quiet spell took only what was there"
    more = f.captures(2)
    timeouts.clear()
    assert f.service._loop.step() == 2
    first, linger = timeouts
    assert first == 0 and 0 < linger <= 5.0, timeouts
    assert linger > 1.0, "the wait is the rest of the interval, not the linger (0 here)"
    assert_gapless_chain(f.sealed(), ids + more)


def test_without_an_interval_a_batch_waits_only_its_linger():
    f = Fakes(transaction_interval_ms=0).start()
    ids = f.captures(3)
    f.service._loop.step()
    timeouts = recording(f)
    more = f.captures(2)
    assert f.service._loop.step() == 2
    assert timeouts == [0], "linger 0 and no pacing: one consume call"
    assert_gapless_chain(f.sealed(), ids + more)


def test_a_full_batch_does_not_wait_for_the_interval():
    f = Fakes(transaction_interval_ms=5_000, batch_max_messages=2).start()
    ids = f.captures(2)
    f.service._loop.step()
    timeouts = recording(f)
    more = f.captures(2)
    assert f.service._loop.step() == 2
    assert timeouts == [0]
    assert_gapless_chain(f.sealed(), ids + more)


def test_an_idle_step_does_not_wait_for_the_interval():
    f = Fakes(transaction_interval_ms=5_000).start()
    f.captures(1)
    f.service._loop.step()
    timeouts = recording(f)
    assert f.service._loop.step() == 0
    # The fake's poll is a consume of one: what was there (nothing), the idle poll, no linger.
    assert timeouts == [0, IDLE_WAIT_S]


@pytest.mark.parametrize("value", ["-1", "10001", "x"])
def test_an_interval_that_cannot_work_is_refused_naming_its_variable(value):
    with pytest.raises(SettingsError, match="EVIDENCE_WRITER_TRANSACTION_INTERVAL_MS"):
        WriterConfig.from_env({"EVIDENCE_WRITER_TRANSACTION_INTERVAL_MS": value})


def test_the_interval_is_read_from_its_variable():
    cfg = WriterConfig.from_env({"EVIDENCE_WRITER_TRANSACTION_INTERVAL_MS": "0"})
    assert cfg.transaction_interval_ms == 0
    assert WriterConfig.from_env({}).transaction_interval_ms == 0  # off unless asked


@pytest.mark.parametrize("value", ["0", "1001", "x"])
def test_a_fetch_wait_that_cannot_work_is_refused_naming_its_variable(value):
    with pytest.raises(SettingsError, match="EVIDENCE_WRITER_FETCH_WAIT_MS"):
        WriterConfig.from_env({"EVIDENCE_WRITER_FETCH_WAIT_MS": value})


def test_the_intake_consumer_waits_as_long_as_its_variable_says():
    assert consumer_config(WriterConfig.from_env({}), print)["fetch.wait.max.ms"] == 20
    cfg = WriterConfig.from_env({"EVIDENCE_WRITER_FETCH_WAIT_MS": "250"})
    conf = consumer_config(cfg, print)
    assert (conf["fetch.wait.max.ms"], conf["fetch.min.bytes"]) == (250, 512 * 1024)
