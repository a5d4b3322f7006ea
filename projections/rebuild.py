"""``evidence projections rebuild``: a fresh generation from offset 0, checked, then swapped.

Blue/green, in numbered steps (``rebuild``), each of which goes over the feeds the projector
folds (:data:`projections.service.FEEDS`: the log, then ``<prefix>.checkpoints``,
``<prefix>.erasures`` and ``<prefix>.tree``), one reader and one writer each; the names in
parentheses are the steps of :class:`_Rebuild` and the keys of ``RebuildResult.phases``:

1. Take the rebuild lock (one rebuild per meta schema), drop generations left ``building``
   or ``retired`` by earlier runs, create a new generation (state ``building``).
2. Bulk load (``load``, ``indexes``, ``catch_up``): project the log from offset 0 to its end
   offsets as of now, into tables without their secondary indexes; build those (one sort
   each beats row-by-row upkeep), then catch up, feed by feed, to where the topics have got
   to meanwhile. The API keeps reading the live generation; nothing here takes the live row.
3. (``summarise``, ``check``) Under the live row ``FOR UPDATE`` (the projector's batch in
   flight finishes first, its next one waits): read the live generation's positions on every
   feed, catch the new generation up to (at least) them, and compare both over exactly that
   range of the log: per stream the record count, ``sha256`` of the ``record_digest``s in
   seq order and ``sha256`` of the messages' hashes (and of the served bodies, under the
   same redaction policy), and the findings. Those per-stream summaries cover every row, but
   most are taken before the lock: records rows are only ever inserted, so once the new
   generation has caught up, the rows below the live positions then (``early``) are final in
   both; they are summarised before the lock, and under it only the rows from ``early`` on
   are, each part's digests joined (``joined``) into the summary compared. So the live
   projector waits for the tail, not for a scan of both whole generations. The rebuilt
   generation's rows below where its load stopped are summarised as the load writes them
   (:mod:`projections.summary`: no second pass over them), the live generation's from the
   end of the load on, beside the index builds. Also
   compared: per stream the Merkle tree root at the live generation's tree size, computed
   from each generation's own stored nodes; the checkpoints folded from
   ``evidence.checkpoints`` below the live generation's positions there (size, root, and
   whether the root matched where both have checked it); the erasures folded from
   ``evidence.erasures`` likewise (request, key id, when); and the deployment log folded
   from ``<prefix>.tree`` (:func:`compare_logtree`: its entries, its tree's root, its
   checkpoints and their cosignatures). Equal: ``make_live`` swaps the views, in the same
   transaction, so readers see the old generation or the new one, never a mix. Unequal: no
   swap yet (the lock is let go); see "Disagreement" below.
4. (``drop``) Drop the old generation (waits for readers still in a query on it, with a lock
   timeout and retries: if readers never let go it stays ``retired`` and the next rebuild
   drops it).

Disagreement. The caller's ``judge`` (the CLI passes an audit of both generations' records
against the log, :func:`audit.run.audit_projections`; this layer does not read the log a
second time itself) says which one the log supports (:class:`Verdict`), outside the live
lock (``judge``): it reads the whole log, and the live projector goes on meanwhile. Without
``accept``: ``RebuildMismatch`` with the differences and the verdict; the new generation is
kept for inspection. With ``accept`` (the operator's word: ``--accept-differences``
with ``--reason``) and a verdict that supports the rebuilt generation (its records match the log):
under the live lock again, the new generation catches up with what the live projector added
during the audit and those rows are compared as in step 3 (a difference there was not
judged: no swap); then (``accept``) the swap and a row in ``<meta>.accepted_swaps`` (who,
when, why, the differences, the verdict), in one transaction. The replaced generation is not
dropped but kept ``retired`` for inspection (the next rebuild drops it). A verdict that does
not support the rebuilt generation never swaps, whatever the operator says.

``in_place=True`` swaps an empty generation in first and drops the old one, then fills the
new one as the live generation (the running projector may help; positions keep them from
storing anything twice). No comparison: there is nothing left to compare with.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol

from server.logs import event_logger

from .bulk import BulkLoad
from .compare import (  # noqa: F401 - re-exported: a rebuild's comparisons
    MAX_VERDICT_LINES,
    SUMMARY_PARTS,
    Judge,
    OnThread,
    Summaries,
    Verdict,
    compare_checkpoints,
    compare_erasures,
    compare_generations,
    compare_logtree,
    compare_redaction,
    compare_trees,
    joined,
    policy_digest,
    summarise_apart,
    summarise_both,
    summary_line,
)
from .config import ProjectorConfig
from .errors import (
    GenerationChanged,
    ProjectionError,
    RebuildBusy,
    RebuildMismatch,
    StoreError,
)
from .reader import LogReader
from .service import FEEDS, Feed, GenerationWriter, open_feeds
from .store import AcceptedSwap, Store
from .summary import RunningSummaries

__all__ = ["Acceptance", "Judge", "Progress", "ProgressFactory", "RebuildResult", "Summaries",
           "Verdict", "compare_checkpoints", "compare_erasures", "compare_generations",
           "compare_logtree", "compare_redaction", "compare_trees", "joined", "rebuild",
           "summarise_apart", "summarise_both"]

log = event_logger("evidence.projector")


class Progress(Protocol):
    """What the rebuild reports its progress to (``cli.progress.Progress`` is one)."""

    def update(self, done: int, records: int) -> None: ...

    def close(self) -> None: ...


ProgressFactory = Callable[[str, int], Progress]
"""``factory(label, total)`` → a :class:`Progress`; the CLI passes its progress bar."""

MAX_DIFFERENCES = 50


@dataclass(frozen=True)
class Acceptance:
    """The operator's word to swap in a rebuilt generation that disagrees with the live one
    if the log supports it: ``reason`` (why) and ``by`` (who), recorded with the swap."""

    reason: str
    by: str


@dataclass
class RebuildResult:
    generation: str
    previous: str | None
    records: int
    seconds: float
    dropped: bool
    checked_streams: int = 0
    warnings: list[str] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds each step took, in order: ``load`` (bulk load to the end offsets as of the
    start), ``indexes``, ``catch_up`` (what arrived meanwhile, checkpoints, erasures),
    ``summarise`` (the rest of both generations' rows below the live positions after the
    catch-up, before the live lock: the load summarised its own rows, and the live
    generation's below the load's end were summarised beside ``indexes``),
    ``check`` (under the live lock: the last catch-up, both generations' rows past those
    positions summarised, everything compared, the swap) and ``drop`` (the old
    generation); after a disagreement, ``judge`` (the log read to say which generation it
    supports) and ``accept`` (the catch-up, the comparison of its rows and the swap)."""
    accepted: AcceptedSwap | None = None
    """The differences accepted at the swap, as recorded (``--accept-differences``); the
    previous generation is then kept ``retired``, not dropped."""


class _Phases:
    """Times the rebuild's steps into ``RebuildResult.phases`` and logs each one."""

    def __init__(self, generation: str) -> None:
        self._clock = time.monotonic
        self.generation = generation
        self.seconds: dict[str, float] = {}
        self._at = self._clock()

    def done(self, phase: str) -> None:
        now = self._clock()
        self.seconds[phase] = round(now - self._at, 3)
        self._at = now
        log("info", "rebuild_phase", generation=self.generation, phase=phase,
            seconds=self.seconds[phase])


STALL_TIMEOUT_S = 120.0


@dataclass
class _Fed:
    """One feed of a rebuild: its reader and the writer into the new generation."""

    feed: Feed
    reader: LogReader
    writer: GenerationWriter

    def fill(self, targets: Mapping[int, int], cfg: ProjectorConfig,
             progress: Progress | None = None) -> None:
        """Step the writer until every partition's position reaches ``targets``; a rebuild
        that makes no progress for ``STALL_TIMEOUT_S`` (Kafka gone, say) fails rather than
        hangs."""
        writer = self.writer
        seen, moved_at = dict(writer.expected), time.monotonic()
        while not writer.caught_up(targets):
            writer.step(cfg.batch_max_messages, cfg.poll_timeout_s, cfg.idle_update_s)
            if progress is not None:
                progress.update(sum(writer.expected.values()), writer.records)
            if writer.expected != seen:
                seen, moved_at = dict(writer.expected), time.monotonic()
            elif time.monotonic() - moved_at > STALL_TIMEOUT_S:
                raise ProjectionError(f"no progress towards {dict(targets)} for "
                                      f"{STALL_TIMEOUT_S:.0f} s (at {writer.expected})")

    def catch_up(self, cfg: ProjectorConfig, progress: Progress | None = None) -> None:
        """:meth:`fill` up to the topic's end as Kafka gives it now."""
        self.fill(self.reader.end_offsets(), cfg, progress)

    def reach_live(self, store: Store, live: str, cfg: ProjectorConfig) -> dict[int, int]:
        """:meth:`fill` up to the live generation's positions on this topic (0 for a
        partition it has none of); returns those positions. Under the live lock they are
        the bounds of the comparison on that topic; before it, the end of its early part."""
        stored = store.positions(live, self.reader.topic)
        bounds = {p: stored.get(p, 0) for p in self.reader.partitions}
        self.fill(bounds, cfg)
        return bounds


def _feeds(store: Store, readers: list[LogReader], gen: str, *, follow_live: bool
           ) -> list[_Fed]:
    """A writer into ``gen`` for each feed's reader, at ``gen``'s stored positions."""
    fed = [_Fed(feed, reader, feed.writer(store, reader, gen, follow_live=follow_live))
           for feed, reader in zip(FEEDS, readers)]
    for f in fed:
        f.writer.seek_to_stored()
    return fed


def rebuild(cfg: ProjectorConfig, *, in_place: bool = False,
            progress_factory: ProgressFactory | None = None, judge: Judge | None = None,
            accept: Acceptance | None = None) -> RebuildResult:
    """Rebuild the projections; see the module docstring. Raises ``RebuildMismatch`` (with
    ``judge``'s verdict, if given). ``accept`` needs a ``judge``: differences are accepted
    only for a rebuilt generation the log supports."""
    if accept is not None and (judge is None or in_place):
        raise ProjectionError("accepting differences needs a judge (an audit against the "
                              "log) and a blue/green rebuild")
    t0 = time.monotonic()
    with ExitStack() as stack:
        store = stack.enter_context(Store(cfg))
        readers = open_feeds(stack, cfg, purpose="rebuild")
        # 1. lock, tidy, new generation
        if not store.try_rebuild_lock():
            raise RebuildBusy(f"another rebuild of {cfg.meta_schema} is running")
        live = store.live_generation(create=False)
        for name, state, _c, _s in store.generations():
            if name != live and state in ("building", "retired"):
                log("info", "drop_leftover", generation=name, state=state)
                store.drop_generation(name)
        if in_place or live is None:
            result = _rebuild_in_place(cfg, store, readers, live, progress_factory)
        else:
            result = _Rebuild(cfg, store, readers, live, progress_factory).run(judge, accept)
        result.seconds = time.monotonic() - t0
        return result


class _Rebuild:
    """A blue/green rebuild from step 2 on: its steps, in order, are its methods named in
    :meth:`run` (the module docstring's steps 2 to 4)."""

    def __init__(self, cfg: ProjectorConfig, store: Store, readers: list[LogReader], live: str,
                 progress_factory: ProgressFactory | None) -> None:
        self.cfg, self.store, self.live = cfg, store, live
        self.gen = gen = store.create_generation(indexes=False)
        log("info", "rebuild_started", generation=gen, live=live, topic=readers[0].topic)
        self.phases = _Phases(gen)
        self.feeds = _feeds(store, readers, gen, follow_live=False)
        self.progress_factory = progress_factory
        self.same_policy = policy_digest(store, live) == policy_digest(store, gen)
        self.running = RunningSummaries(self.same_policy)
        self.loaded: dict[int, int] = {}
        self.live_loaded: OnThread | None = None
        self.early: dict[int, int] = {}
        self.early_sums: tuple[Summaries, Summaries] | None = None
        self.bounds: dict[str, dict[int, int]] = {}
        self.diffs: list[str] = []
        self.warnings: list[str] = []
        self.streams = 0

    def run(self, judge: Judge | None, accept: Acceptance | None) -> RebuildResult:
        for name, step in (("load", self.load), ("indexes", self.indexes),
                           ("catch_up", self.catch_up), ("summarise", self.summarise),
                           ("check", self.check)):
            step()
            self.phases.done(name)
        accepted = self.judge_and_accept(judge, accept) if self.diffs else None
        log("info", "swapped", generation=self.gen, previous=self.live,
            checked_streams=self.streams, accepted=accepted.id if accepted else None)
        result = RebuildResult(self.gen, self.live, self.feeds[0].writer.records, 0.0, False,
                               self.streams, phases=self.phases.seconds, accepted=accepted)
        for w in self.warnings:
            log("warning", "redaction_changed", generation=self.gen, previous=self.live,
                detail=w)
            result.warnings.append(w)
        # 4. drop the old generation (one replaced on the operator's word is kept, retired,
        #    for inspection: it is what was served, and the next rebuild drops it)
        if accepted is None:
            result.dropped = _drop(self.store, self.live, result)
            self.phases.done("drop")
        return result

    def load(self) -> None:
        """2. The log from offset 0 to its end offsets as of now, its writes overlapped with
        the folding of the next batch (projections.bulk): the generation is this rebuild's
        alone until it swaps. Its records rows are summarised as they are written
        (projections.summary), for step 3."""
        records = self.feeds[0]
        targets = records.reader.end_offsets()
        progress = (self.progress_factory(f"rebuild {self.gen}", sum(targets.values()))
                    if self.progress_factory is not None else None)
        bulk = BulkLoad(self.store, self.gen, records.reader.topic, self.running)
        records.writer.bulk = bulk
        try:
            records.fill(targets, self.cfg, progress)
            bulk.close()
        finally:
            records.writer.bulk = None
            bulk.stop()
        self.loaded = loaded = dict(records.writer.expected)
        if progress is not None:
            progress.close()
        # The live generation's rows below where the load stopped are final once the live
        # projector is past there: they are summarised from now on, beside the index builds
        # and the catch-up, on every core (the rebuilt side's are summarised already).
        live_now = self.store.positions(self.live, records.reader.topic)
        if self.running.usable and all(live_now.get(p, 0) >= n for p, n in loaded.items()):
            cfg, live, bodies = self.cfg, self.live, self.same_policy
            self.live_loaded = OnThread(
                lambda: summarise_apart(cfg, live, loaded, bodies, 2 * SUMMARY_PARTS),
                f"summarise-{live}")

    def indexes(self) -> None:
        self.store.create_indexes(self.gen)

    def catch_up(self) -> None:
        """What arrived meanwhile, feed by feed (records before the checkpoints that cover
        them: most checkpoints are then checked as they come)."""
        for fed in self.feeds:
            fed.catch_up(self.cfg)

    def summarise(self) -> None:
        """Most of the pre-swap check, before the lock: records rows are only ever inserted,
        so the rows below the live generation's positions now (``early``; the new one is
        filled up to them) are final, and both generations' are summarised here. Under the
        live lock only the rows past them are: the live projector then waits for that tail,
        not for a scan of both whole generations. Below where the load stopped
        (``loaded``) the rebuilt generation's rows were summarised as they were written,
        and the live generation's since the load ended (``live_loaded``); here only both
        from ``loaded`` to ``early``, through the key. (Summarised during the load instead,
        the live generation's scan slowed the load by as much: 600k records, load
        24.6-25.7 s against 18.9 s.)"""
        cfg, live, gen, bodies = self.cfg, self.live, self.gen, self.same_policy
        self.early = early = self.feeds[0].reach_live(self.store, live, cfg)
        loaded, live_loaded = self.loaded, self.live_loaded
        if live_loaded is None or not all(early.get(p, 0) >= n for p, n in loaded.items()):
            if live_loaded is not None:
                live_loaded.result()  # its connection let go before the scans
            self.early_sums = _scan_both(cfg, live, gen, early, bodies)
            return
        rebuilt = joined(self.running.result(),
                         summarise_apart(cfg, gen, early, bodies, since=loaded))
        live_early = joined(live_loaded.result(),
                            summarise_apart(cfg, live, early, bodies, since=loaded))
        self.early_sums = (live_early, rebuilt)

    def check(self) -> None:
        """3. Under the live lock: every feed reaches the live generation's positions, the
        rows from ``early`` on are summarised and joined to the early summaries, everything
        is compared; equal, the swap."""
        store, live, gen = self.store, self.live, self.gen
        assert self.early_sums is not None
        with store.transaction():
            self._lock(live, gen)
            self.bounds = {f.feed.name: f.reach_live(store, live, self.cfg) for f in self.feeds}
            b = self.bounds
            tails = summarise_both(store, live, gen, b["records"], self.same_policy,
                                   since=self.early)
            (a, a_body), (r, r_body) = (joined(e, t) for e, t in zip(self.early_sums, tails))
            self.streams, self.diffs = compare_generations(
                store, live, gen, b["records"], b["checkpoints"], b["erasures"],
                summaries=(a, r), tree_bounds=b["tree"])
            red_diffs, self.warnings = compare_redaction(
                store, live, gen, b["records"], (a_body, r_body) if self.same_policy else None)
            self.diffs += red_diffs
            if not self.diffs:
                store.make_live(gen)

    def _lock(self, live: str, gen: str) -> None:
        if self.store.lock_live() != live:
            raise ProjectionError(f"the live generation changed during the rebuild; "
                                  f"{gen} is kept, not swapped")

    def judge_and_accept(self, judge: Judge | None, accept: Acceptance | None) -> AcceptedSwap:
        """After a disagreement: the ``judge`` reads the whole log, outside the live lock;
        without ``accept``, or a verdict for the live generation, ``RebuildMismatch``."""
        live, gen, diffs = self.live, self.gen, self.diffs
        log("error", "rebuild_mismatch", generation=gen, live=live, differences=len(diffs))
        diffs = diffs[:MAX_DIFFERENCES] + ([f"... and {len(diffs) - MAX_DIFFERENCES} more"]
                                           if len(diffs) > MAX_DIFFERENCES else [])
        verdict = judge(live, gen) if judge is not None else None
        if verdict is not None:
            self.phases.done("judge")
            log("info", "rebuild_verdict", generation=gen, live=live, supports=verdict.supports)
        if accept is None or verdict is None or verdict.supports != gen:
            raise RebuildMismatch(gen, live, diffs, verdict=verdict)
        accepted = self.swap_accepted(diffs, verdict, accept)
        self.phases.done("accept")
        return accepted

    def swap_accepted(self, diffs: list[str], verdict: Verdict,
                      accept: Acceptance) -> AcceptedSwap:
        """The swap on the operator's word, once the log supports the rebuilt generation:
        under the live lock, every feed catches up with the live generation's positions; the
        records the live projector added while the log was judged (from the positions the
        differences were found below) are compared as at any swap: what differs there was
        not judged, and stops the swap. Then swap and record, in one transaction."""
        store, live, gen = self.store, self.live, self.gen
        with store.transaction():
            self._lock(live, gen)
            bounds = [f.reach_live(store, live, self.cfg) for f in self.feeds]
            (a, a_body), (b, b_body) = summarise_both(store, live, gen, bounds[0],
                                                      self.same_policy,
                                                      since=self.bounds["records"])
            late = [f"stream {s}: {live} {summary_line(a.get(s))} != {gen} "
                    f"{summary_line(b.get(s))}"
                    for s in sorted(a.keys() | b.keys()) if a.get(s) != b.get(s)]
            if self.same_policy and a_body != b_body:
                late += [f"stream {s}: served bodies differ" for s in
                         sorted((a_body or {}).keys() | (b_body or {}).keys())
                         if (a_body or {}).get(s) != (b_body or {}).get(s)]
            if late:
                raise RebuildMismatch(gen, live, [
                    f"{d} (in records projected while the log was read to judge: not judged, "
                    f"not accepted)" for d in late[:MAX_DIFFERENCES]], verdict=verdict)
            store.make_live(gen)
            accepted = store.gens.record_accepted_swap(live, gen, accept.reason, accept.by,
                                                       diffs, verdict.lines())
        log("warning", "differences_accepted", generation=gen, previous=live, id=accepted.id,
            by=accept.by, reason=accept.reason, differences=len(diffs))
        return accepted


def _scan_both(cfg: ProjectorConfig, live: str, gen: str, early: Mapping[int, int],
               bodies: bool) -> tuple[Summaries, Summaries]:
    """Both generations' rows below ``early`` summarised from their tables, side by side:
    when the load's own summary cannot stand for the rebuilt one's (a stream whose seq goes
    back along the log, or a live generation behind where the load stopped)."""
    live_side = OnThread(lambda: summarise_apart(cfg, live, early, bodies, SUMMARY_PARTS),
                         f"summarise-{live}")
    try:
        rebuilt = summarise_apart(cfg, gen, early, bodies, SUMMARY_PARTS)
    finally:
        live_early = live_side.result()
    return live_early, rebuilt


def _drop(store: Store, gen: str, result: RebuildResult) -> bool:
    try:
        store.drop_generation(gen)
        return True
    except StoreError as e:
        # The swap stands; the old generation stays 'retired' and the next rebuild drops it.
        result.warnings.append(f"could not drop {gen} yet: {e}")
        log("warning", "drop_failed", generation=gen, error=str(e), sqlstate=e.sqlstate)
        return False


def _rebuild_in_place(cfg: ProjectorConfig, store: Store, readers: list[LogReader],
                      live: str | None, progress_factory: ProgressFactory | None
                      ) -> RebuildResult:
    """An empty generation swapped in first, the old one dropped, then the new one filled
    as the live generation, feed by feed (the running projector may help; positions keep
    them from storing anything twice). No comparison: there is nothing left to compare with."""
    with store.transaction():
        store.lock_live()
        gen = store.create_generation()
        store.make_live(gen)
    log("info", "rebuild_in_place", generation=gen, previous=live)
    result = RebuildResult(gen, live, 0, 0.0, False)
    if live is not None:
        result.dropped = _drop(store, live, result)
    feeds = _feeds(store, readers, gen, follow_live=True)
    records = feeds[0]
    targets = records.reader.end_offsets()
    progress = (progress_factory(f"rebuild {gen}", sum(targets.values()))
                if progress_factory is not None else None)
    try:
        records.fill(targets, cfg, progress)
        for fed in feeds:
            fed.catch_up(cfg, progress if fed is records else None)
    except GenerationChanged as e:
        raise ProjectionError(f"another generation ({e.generation}) was made live during "
                              f"the in-place rebuild of {gen}") from e
    if progress is not None:
        progress.close()
    result.records = records.writer.records
    return result
