"""``evidence projections rebuild``: a fresh generation from offset 0, checked, then swapped.

Blue/green, in numbered steps (``rebuild``):

1. Take the rebuild lock (one rebuild per meta schema), drop generations left ``building``
   or ``retired`` by earlier runs, create a new generation (state ``building``).
2. Bulk load: project the log from offset 0 to its end offsets as of now, into tables
   without their secondary indexes; build those (one sort each beats row-by-row upkeep), then
   catch up to where the log has got to meanwhile. The API keeps reading the live
   generation; nothing here takes the live row.
3. Under the live row ``FOR UPDATE`` (the projector's batch in flight finishes first, its
   next one waits): read the live generation's positions, catch the new generation up to
   (at least) them, and compare both over exactly that range of the log: per stream the
   record count, ``sha256`` of the ``record_digest``s in seq order and ``sha256`` of the
   messages' hashes, and the findings. Equal: ``make_live`` swaps the views, in the same
   transaction, so readers see the old generation or the new one, never a mix. Unequal: no
   swap; the new generation is kept for inspection and ``RebuildMismatch`` lists the
   differences.
4. Drop the old generation (waits for readers still in a query on it, with a lock timeout
   and retries: if readers never let go it stays ``retired`` and the next rebuild drops it).

``in_place=True`` swaps an empty generation in first and drops the old one, then fills the
new one as the live generation (the running projector may help; positions keep them from
storing anything twice). No comparison: there is nothing left to compare with.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol

from server.logs import event_logger

from .config import ProjectorConfig
from .errors import (
    GenerationChanged,
    ProjectionError,
    RebuildBusy,
    RebuildMismatch,
    StoreError,
)
from .service import GenerationWriter, LogReader
from .store import Store

__all__ = ["Progress", "ProgressFactory", "RebuildResult", "compare_generations", "rebuild"]

log = event_logger("evidence.projector")


class Progress(Protocol):
    """What the rebuild reports its progress to (``cli.progress.Progress`` is one)."""

    def update(self, done: int, records: int) -> None: ...

    def close(self) -> None: ...


ProgressFactory = Callable[[str, int], Progress]
"""``factory(label, total)`` → a :class:`Progress`; the CLI passes its progress bar."""

MAX_DIFFERENCES = 50


@dataclass
class RebuildResult:
    generation: str
    previous: str | None
    records: int
    seconds: float
    dropped: bool
    checked_streams: int = 0
    warnings: list[str] = field(default_factory=list)


def compare_generations(store: Store, live: str, rebuilt: str,
                        bounds: Mapping[int, int]) -> tuple[int, list[str]]:
    """Compare two generations over the log below ``bounds``; (streams, differences)."""
    a = store.stream_summaries(live, bounds)
    b = store.stream_summaries(rebuilt, bounds)
    diffs: list[str] = []
    for stream in sorted(a.keys() | b.keys()):
        x, y = a.get(stream), b.get(stream)
        if x == y:
            continue
        diffs.append(f"stream {stream}: {live} {_summary(x)} != {rebuilt} {_summary(y)}")
    fa, fb = Counter(store.finding_keys(live, bounds)), Counter(store.finding_keys(rebuilt, bounds))
    for key in sorted((fa - fb).keys(), key=repr):
        diffs.append(f"finding {_finding(key)} only in {live}")
    for key in sorted((fb - fa).keys(), key=repr):
        diffs.append(f"finding {_finding(key)} only in {rebuilt}")
    ta = sum(s[0] for s in a.values())
    tb = sum(s[0] for s in b.values())
    if ta != tb:
        diffs.insert(0, f"record count: {live} {ta} != {rebuilt} {tb}")
    return len(a.keys() | b.keys()), diffs


def _summary(s: tuple[int, bytes, bytes] | None) -> str:
    if s is None:
        return "(absent)"
    return f"count={s[0]} chain={s[1].hex()[:16]} bytes={s[2].hex()[:16]}"


def _finding(key: tuple) -> str:
    p, o, kind, stream, seq = key
    return f"{kind} at {p}/{o} (stream {stream}, seq {seq})"


STALL_TIMEOUT_S = 120.0


def _fill(writer: GenerationWriter, targets: Mapping[int, int], cfg: ProjectorConfig,
          progress: Progress | None, start: int) -> None:
    """Step ``writer`` until every partition's position reaches ``targets``; a rebuild that
    makes no progress for ``STALL_TIMEOUT_S`` (Kafka gone, say) fails rather than hangs."""
    import time

    seen, moved_at = dict(writer.expected), time.monotonic()
    while not writer.caught_up(targets):
        writer.step(cfg.batch_max_messages, cfg.poll_timeout_s, cfg.idle_update_s)
        if progress is not None:
            progress.update(sum(writer.expected.values()) - start, writer.records)
        if writer.expected != seen:
            seen, moved_at = dict(writer.expected), time.monotonic()
        elif time.monotonic() - moved_at > STALL_TIMEOUT_S:
            raise ProjectionError(f"no progress towards {dict(targets)} for "
                                  f"{STALL_TIMEOUT_S:.0f} s (at {writer.expected})")


def rebuild(cfg: ProjectorConfig, *, in_place: bool = False,
            progress_factory: ProgressFactory | None = None) -> RebuildResult:
    """Rebuild the projections; see the module docstring. Raises ``RebuildMismatch``."""
    import time

    t0 = time.monotonic()
    show_progress = progress_factory is not None
    make_progress: ProgressFactory = progress_factory or (lambda label, total: _Silent())
    with Store(cfg) as store, LogReader(cfg, purpose="rebuild") as reader:
        # 1. lock, tidy, new generation
        if not store.try_rebuild_lock():
            raise RebuildBusy(f"another rebuild of {cfg.meta_schema} is running")
        live = store.live_generation(create=False)
        for name, state, _c, _s in store.generations():
            if name != live and state in ("building", "retired"):
                log("info", "drop_leftover", generation=name, state=state)
                store.drop_generation(name)
        if in_place or live is None:
            return _rebuild_in_place(cfg, store, reader, live, make_progress, show_progress, t0)
        gen = store.create_generation(indexes=False)
        log("info", "rebuild_started", generation=gen, live=live, topic=reader.topic)
        writer = GenerationWriter(store, reader, gen, follow_live=False)
        writer.seek_to_stored()

        # 2. bulk load, then catch up with what arrived meanwhile
        targets = reader.end_offsets()
        progress = make_progress(f"rebuild {gen}", sum(targets.values())) if show_progress else None
        _fill(writer, targets, cfg, progress, 0)
        if progress is not None:
            progress.close()
        store.create_indexes(gen)
        _fill(writer, reader.end_offsets(), cfg, None, 0)

        # 3. under the live lock: reach the live generation's positions, compare, swap
        with store.transaction():
            if store.lock_live() != live:
                raise ProjectionError(f"the live generation changed during the rebuild; "
                                      f"{gen} is kept, not swapped")
            stored = store.positions(live, reader.topic)
            bounds = {p: stored.get(p, 0) for p in reader.partitions}
            _fill(writer, bounds, cfg, None, 0)
            streams, diffs = compare_generations(store, live, gen, bounds)
            if not diffs:
                store.make_live(gen)
        if diffs:
            log("error", "rebuild_mismatch", generation=gen, live=live,
                differences=len(diffs))
            raise RebuildMismatch(gen, live, diffs[:MAX_DIFFERENCES]
                                  + ([f"... and {len(diffs) - MAX_DIFFERENCES} more"]
                                     if len(diffs) > MAX_DIFFERENCES else []))
        log("info", "swapped", generation=gen, previous=live, checked_streams=streams)

        # 4. drop the old generation
        result = RebuildResult(gen, live, writer.records, 0.0, False, streams)
        result.dropped = _drop(store, live, result)
        result.seconds = time.monotonic() - t0
        return result


def _drop(store: Store, gen: str, result: RebuildResult) -> bool:
    try:
        store.drop_generation(gen)
        return True
    except StoreError as e:
        # The swap stands; the old generation stays 'retired' and the next rebuild drops it.
        result.warnings.append(f"could not drop {gen} yet: {e}")
        log("warning", "drop_failed", generation=gen, error=str(e), sqlstate=e.sqlstate)
        return False


def _rebuild_in_place(cfg: ProjectorConfig, store: Store, reader: LogReader, live: str | None,
                      make_progress: ProgressFactory, show_progress: bool,
                      t0: float) -> RebuildResult:
    import time

    with store.transaction():
        store.lock_live()
        gen = store.create_generation()
        store.make_live(gen)
    log("info", "rebuild_in_place", generation=gen, previous=live)
    result = RebuildResult(gen, live, 0, 0.0, False)
    if live is not None:
        result.dropped = _drop(store, live, result)
    writer = GenerationWriter(store, reader, gen, follow_live=True)
    writer.seek_to_stored()
    targets = reader.end_offsets()
    progress = make_progress(f"rebuild {gen}", sum(targets.values())) if show_progress else None
    try:
        _fill(writer, targets, cfg, progress, 0)
        _fill(writer, reader.end_offsets(), cfg, progress, 0)
    except GenerationChanged as e:
        raise ProjectionError(f"another generation ({e.generation}) was made live during "
                              f"the in-place rebuild of {gen}") from e
    if progress is not None:
        progress.close()
    result.records = writer.records
    result.seconds = time.monotonic() - t0
    return result


class _Silent:
    def update(self, done: int, records: int) -> None:
        pass

    def close(self) -> None:
        pass
