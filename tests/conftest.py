# Fixtures that reach real Kafka and PostgreSQL live in tests/fixtures and are shared as
# plugins; unit tests use none of them and run without services.
import os
import random
import re

import pytest

pytest_plugins = [
    "tests.fixtures.stack",
    "tests.fixtures.kafka",
    "tests.fixtures.postgres",
    "tests.fixtures.provider",
    "tests.fixtures.writer",
    "tests.fixtures.log",
    "tests.fixtures.readmodel",
    "tests.fixtures.api_server",
    "tests.fixtures.pipeline",
    "tests.fixtures.audit",
    "tests.fixtures.litewitness",
    "tests.fixtures.erased",
]


class _WorkerShare(random.Random):
    """``random`` for devstack.ports in one of n parallel workers: a range of candidate ports
    is drawn from this worker's share only (every n-th port), so two workers never pick the
    same free port and race to bind it (a pick is checked free, but bound seconds later)."""

    def __init__(self, index: int, count: int) -> None:
        super().__init__()
        self.index, self.count = index, count

    def choice(self, seq):
        if isinstance(seq, range):
            seq = seq[self.index::self.count]
        return super().choice(seq)


def _patient_httpx() -> None:
    """The tests' own HTTP calls (``httpx.get(url)``, ``httpx.Client(base_url=...)``) wait up to
    60 s for an answer, not httpx's default 5 s. The suite keeps two cores busy from its first
    test to its last, so an answer the API gives in milliseconds can wait seconds for a core: a
    fresh-clone run failed on ``/readyz`` taking over 5 s. The tests check what is answered,
    not how fast (the benchmarks do). httpx binds one ``Timeout`` object as the default of
    every call and client, so changing it here reaches them all; the product's clients set
    their own timeouts and are not touched."""
    from httpx import _config

    default = _config.DEFAULT_TIMEOUT_CONFIG
    default.connect, default.read, default.write, default.pool = 10.0, 60.0, 60.0, 60.0


def pytest_configure(config):
    # The brokers tests start live a minute or two: a C1-only JIT starts them on 40% less CPU
    # (devstack/kafka.py), and the suite is bound by CPU on two cores.
    os.environ.setdefault("EVIDENCE_KAFKA_JVM_OPTS", "-XX:TieredStopAtLevel=1")
    _patient_httpx()
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get(
        "PYTEST_XDIST_WORKER_COUNT")
    if worker and count:  # "gw0", "gw1", ... under pytest-xdist
        from devstack import ports

        ports.random = _WorkerShare(int(worker.removeprefix("gw")), int(count))


# Parameters made at import time with fresh randomness (an event id, a generated key) would
# name a test differently in each worker, and pytest-xdist refuses workers whose collections
# differ: their random parts are left out of the test's id (pytest numbers any ids that then
# repeat).
_RANDOM_IN_IDS = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "UUID"),
    (re.compile(r"\+[0-9a-f]{8}\+[A-Za-z0-9+/]{20,}={0,2}"), "+KEY"),  # a note verifier key
]


def pytest_make_parametrize_id(config, val, argname):
    if not isinstance(val, str):
        return None
    stable = val
    for pattern, placeholder in _RANDOM_IN_IDS:
        stable = pattern.sub(placeholder, stable)
    return stable if stable != val else None


@pytest.hookimpl(trylast=True)  # after -k / -m have deselected: the scheduler cuts what is left
def pytest_collection_modifyitems(config, items):
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # a pytest-xdist worker: tests/fixtures/order.py says why
        from tests.fixtures.order import reorder

        items[:] = reorder(items, int(workerinput["workercount"]))
