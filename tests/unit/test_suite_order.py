"""The suite's order for its parallel workers (tests/fixtures/order.py): every test kept once,
each long module whole and at the head of one worker's first share, the rest in place."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.fixtures.order import LONG, reorder, share_sizes


@dataclass(frozen=True)
class Item:
    nodeid: str


def _collection() -> list[Item]:
    items = [Item(f"tests/unit/test_u{i:03}.py::test_{j}") for i in range(300) for j in range(3)]
    for module in sorted(LONG):  # collected in file order, as pytest does
        items += [Item(f"{module}::test_{j}") for j in range(4)]
    return items


@pytest.mark.parametrize("workers", [2, 3, 4, 6])
def test_each_share_begins_with_its_long_modules_and_nothing_is_lost(workers):
    items = _collection()
    out = reorder(items, workers)
    assert sorted(i.nodeid for i in out) == sorted(i.nodeid for i in items)
    shares, start = [], 0
    for size in share_sizes(len(out), workers):
        shares.append(out[start:start + size])
        start += size
    seen: set[str] = set()
    for share in shares:
        modules = [i.nodeid.split("::")[0] for i in share]
        long_here = [m for m in dict.fromkeys(modules) if m in LONG]
        assert modules[:4 * len(long_here)] == [m for m in long_here for _ in range(4)]
        seen.update(long_here)
    assert seen == set(LONG)
    loads = sorted(sum(LONG[m] for m in {i.nodeid.split("::")[0] for i in s} if m in LONG)
                   for s in shares)
    assert loads[-1] - loads[0] <= max(LONG.values())
    rest = [i for i in out if i.nodeid.split("::")[0] not in LONG]
    assert rest == [i for i in items if i.nodeid.split("::")[0] not in LONG]


def test_one_worker_keeps_the_collection_order():
    items = _collection()
    assert reorder(items, 1) == items


def test_the_shares_are_the_schedulers():
    assert share_sizes(10, 4) == [2, 2, 3, 3]
    assert sum(share_sizes(3002, 4)) == 3002
