"""Process settings the long-running services share.

:func:`tune_gc`: the writer and the projector allocate a few tuples and objects per record
at tens of thousands of records a second, almost none of them in reference cycles (plain
reference counting frees them). With CPython's default thresholds (700 allocations a young
collection) the cycle collector ran hundreds of times a second and, measured on the
projector's decode and fold of 200,000 records, took ~40% of that work
(``bench/gc_cost``: 17.6 -> 10.5 us a record). A young collection every 100,000 allocations
keeps what cyclic garbage there is bounded (a batch's worth) at a fraction of the cost; and
what was loaded at start-up (modules, schemas, config) is frozen out of every collection.
``evidence writer``, ``projector`` and ``projections`` call it when they run as a process of
their own (``cli.main.GC_TUNED``); a caller that passes argv (a test) keeps its collector.
"""

from __future__ import annotations

import gc

__all__ = ["GC_THRESHOLDS", "tune_gc"]

GC_THRESHOLDS = (100_000, 20, 20)
"""``gc.set_threshold`` of a service: young collections every 100k allocations; the older
generations as often, relative to them, as CPython's defaults (10, 10) make them, halved."""


def tune_gc() -> None:
    """Freeze what start-up allocated and set :data:`GC_THRESHOLDS`; call once, at start."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
