"""What a rebuild compares of two generations (:mod:`projections.rebuild`, step 3), and the
summaries it compares the records by.

Per stream the records' summary (count, ``sha256`` of the ``record_digest``s in seq order and
of the messages' hashes, and of the served bodies under one redaction policy), computed in
one scan of each generation (:func:`summarise_apart`, :func:`summarise_both`) and joined from
a prefix and a tail of the log (:func:`joined`); the findings; the streams' trees; and what
each side topic folded (:func:`compare_checkpoints`, :func:`compare_erasures`,
:func:`compare_logtree`). Each function returns the differences, described for people.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .config import ProjectorConfig
from .store import Store, StreamSummary

__all__ = ["MAX_VERDICT_LINES", "SUMMARY_PARTS", "Judge", "OnThread", "Summaries", "Verdict",
           "compare_checkpoints", "compare_erasures", "compare_generations", "compare_logtree",
           "compare_redaction", "compare_trees", "joined", "policy_digest", "summarise_apart",
           "summarise_both", "summary_line"]


MAX_VERDICT_LINES = 20


@dataclass(frozen=True)
class Verdict:
    """Which of two disagreeing generations the log supports. ``findings``: per generation,
    its records rows' differences from the log, described (an audit's projection findings);
    ``error``: why the log could not be read to judge (then it supports neither, as far as
    anyone knows)."""

    live: str
    rebuilt: str
    findings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    error: str | None = None

    @property
    def supports(self) -> str | None:
        """The rebuilt generation if its records match the log (it is the one derived from
        the log, whatever the live one's records say); else the live one if its do; else
        None."""
        if self.error is not None:
            return None
        if not self.findings.get(self.rebuilt, ()):
            return self.rebuilt
        if not self.findings.get(self.live, ()):
            return self.live
        return None

    def lines(self) -> list[str]:
        """For people and for the record: what the log said, then the rows it names."""
        live, rebuilt = self.live, self.rebuilt
        a, b = self.findings.get(live, ()), self.findings.get(rebuilt, ())
        rows = lambda n: f"{n} row{'' if n == 1 else 's'}"  # noqa: E731
        if self.error is not None:
            return [f"the log could not be read to judge between {live} and {rebuilt}: "
                    f"{self.error}"]
        if self.supports == rebuilt and a:
            head = (f"the log supports {rebuilt} (rebuilt from it now): its records match "
                    f"the log; {live}'s differ from it in {rows(len(a))}:")
        elif self.supports == rebuilt:
            head = (f"the log supports {rebuilt} (rebuilt from it now); the records of both "
                    f"match the log, so they differ in what is derived from the records "
                    f"(heads, findings, trees, checkpoints, erasures)")
        elif self.supports == live:
            head = (f"the log supports the live {live}: its records match the log; the "
                    f"rebuilt {rebuilt}'s differ from it in {rows(len(b))} (a fault of the "
                    f"rebuild, not of the live generation):")
        else:
            head = (f"the log supports neither: the records of {live} differ from it in "
                    f"{rows(len(a))}, those of {rebuilt} in {rows(len(b))}:")
        named = ([f"{live}: {f}" for f in a] if self.supports == rebuilt else
                 [f"{rebuilt}: {f}" for f in b] if self.supports == live else
                 [f"{g}: {f}" for g, fs in ((live, a), (rebuilt, b)) for f in fs])
        more = len(named) - MAX_VERDICT_LINES
        return [head] + named[:MAX_VERDICT_LINES] + ([f"... and {more} more"] if more > 0 else [])


Judge = Callable[[str, str], Verdict]
"""``judge(live, rebuilt)`` → the :class:`Verdict` of the log on two disagreeing
generations (the CLI's audits both with ``audit.run.audit_projections``)."""


def compare_trees(store: Store, live: str, rebuilt: str) -> list[str]:
    """Per stream, the tree root at the live generation's size in both generations."""
    sizes = store.trees.tree_sizes(live)
    if sizes is None:  # a live generation made before trees: nothing to compare with
        return []
    a, b = store.trees.tree_roots(live, sizes), store.trees.tree_roots(rebuilt, sizes)
    diffs = []
    for stream in sorted(sizes):
        x, y = a.get(stream), b.get(stream)
        if x != y:
            show = lambda r: "(absent)" if r is None else r.hex()[:16]  # noqa: E731
            diffs.append(f"tree {stream} at size {sizes[stream]}: {live} root {show(x)} "
                         f"!= {rebuilt} root {show(y)}")
    return diffs


def compare_checkpoints(store: Store, live: str, rebuilt: str,
                        bounds: Mapping[int, int]) -> list[str]:
    """The checkpoints below ``bounds`` (of the checkpoints topic) in both generations."""
    keys = store.checkpoints.checkpoint_keys
    a, b = keys(live, bounds), keys(rebuilt, bounds)
    if a is None:  # a live generation made before checkpoints were projected
        return []
    b = b or {}
    diffs = []
    for key in sorted(a.keys() | b.keys()):
        x, y = a.get(key), b.get(key)
        stream, size = key
        if x is None or y is None:
            diffs.append(f"checkpoint {stream} size {size} only in "
                         f"{live if y is None else rebuilt}")
        elif x[0] != y[0]:
            diffs.append(f"checkpoint {stream} size {size}: roots differ")
        elif x[1] is not None and y[1] is not None and x[1] != y[1]:
            diffs.append(f"checkpoint {stream} size {size}: root matches the tree in "
                         f"{live if x[1] else rebuilt} only")
    return diffs


def compare_erasures(store: Store, live: str, rebuilt: str,
                     bounds: Mapping[int, int]) -> list[str]:
    """The erasures below ``bounds`` (of the erasures topic) in both generations."""
    a, b = store.erasures.erasure_keys(live, bounds), store.erasures.erasure_keys(rebuilt, bounds)
    if a is None:  # a live generation made before erasures were projected
        return []
    b = b or set()
    show = lambda e: f"{e[0]} key {e[1].hex() if e[1] else '(none)'}"  # noqa: E731
    return ([f"erasure {show(e)} only in {live}" for e in sorted(a - b, key=repr)]
            + [f"erasure {show(e)} only in {rebuilt}" for e in sorted(b - a, key=repr)])


def compare_logtree(store: Store, live: str, rebuilt: str, bound: int) -> list[str]:
    """The deployment log below offset ``bound`` of ``<prefix>.tree`` in both generations:
    the entries, the tree's root at their number, the checkpoints (root, and whether it
    matched the tree where both have checked it) and the cosignatures."""
    a, b = store.log.log_keys(live, bound), store.log.log_keys(rebuilt, bound)
    if a is None:  # a live generation made before the deployment log was projected
        return []
    if b is None:
        return [f"the deployment log only in {live}"]
    diffs = []
    if a["entries"] != b["entries"]:
        diffs.append(f"deployment log entries: {live} {a['entries'][0]} "
                     f"({a['entries'][1].hex()[:16]}) != {rebuilt} {b['entries'][0]} "
                     f"({b['entries'][1].hex()[:16]})")
    elif a["root"] != b["root"]:
        show = lambda r: "(absent)" if r is None else r.hex()[:16]  # noqa: E731
        diffs.append(f"deployment tree at size {a['entries'][0]}: {live} root {show(a['root'])}"
                     f" != {rebuilt} root {show(b['root'])}")
    ca, cb = a["checkpoints"], b["checkpoints"]
    for size in sorted(ca.keys() | cb.keys()):
        x, y = ca.get(size), cb.get(size)
        if x is None or y is None:
            diffs.append(f"deployment checkpoint size {size} only in "
                         f"{live if y is None else rebuilt}")
        elif x[0] != y[0]:
            diffs.append(f"deployment checkpoint size {size}: roots differ")
        elif x[1] is not None and y[1] is not None and x[1] != y[1]:
            diffs.append(f"deployment checkpoint size {size}: root matches the tree in "
                         f"{live if x[1] else rebuilt} only")
    show_cosig = lambda c: f"size {c[0]} by {c[1]}+{c[2]:08x}"  # noqa: E731
    diffs += [f"deployment cosignature {show_cosig(c)} only in {live}"
              for c in sorted(a["cosignatures"] - b["cosignatures"])]
    diffs += [f"deployment cosignature {show_cosig(c)} only in {rebuilt}"
              for c in sorted(b["cosignatures"] - a["cosignatures"])]
    return diffs


def compare_redaction(store: Store, live: str, rebuilt: str, bounds: Mapping[int, int],
                      bodies: tuple[Mapping[str, bytes], Mapping[str, bytes]] | None = None
                      ) -> tuple[list[str], list[str]]:
    """(differences, warnings) of the two generations' redaction policies. The same policy:
    the served bodies must be masked alike (a difference is a mismatch). Another policy (the
    file changed since the live generation was built): a warning naming both digests, no
    body comparison; the rebuild is how a new policy is applied to every row."""
    (_ra, a), (_rb, b) = store.redaction(live), store.redaction(rebuilt)
    digest = lambda p: "none" if p is None else p.digest.hex()  # noqa: E731
    if digest(a) != digest(b):
        return [], [f"redaction policy changed: {live} was built with {digest(a)}, "
                    f"{rebuilt} with {digest(b)} (re-applied to every row)"]
    summarise = store.records.body_summaries
    x, y = bodies or (summarise(live, bounds), summarise(rebuilt, bounds))
    return [f"stream {s}: served bodies differ under the same redaction policy "
            f"{digest(a)}" for s in sorted(x.keys() | y.keys()) if x.get(s) != y.get(s)], []


def compare_generations(store: Store, live: str, rebuilt: str, bounds: Mapping[int, int],
                        checkpoint_bounds: Mapping[int, int] | None = None,
                        erasure_bounds: Mapping[int, int] | None = None,
                        summaries: tuple[Mapping[str, StreamSummary],
                                         Mapping[str, StreamSummary]] | None = None,
                        tree_bounds: Mapping[int, int] | None = None
                        ) -> tuple[int, list[str]]:
    """Compare two generations over the log below ``bounds`` (the checkpoints topic below
    ``checkpoint_bounds``, the erasures topic below ``erasure_bounds``, the tree topic below
    ``tree_bounds``); (streams, differences). ``summaries``: both generations' stream
    summaries when the caller has them already (see :func:`summarise_both`)."""
    a, b = summaries or (store.records.stream_summaries(live, bounds),
                         store.records.stream_summaries(rebuilt, bounds))
    diffs: list[str] = []
    for stream in sorted(a.keys() | b.keys()):
        x, y = a.get(stream), b.get(stream)
        if x == y:
            continue
        diffs.append(f"stream {stream}: {live} {summary_line(x)} != {rebuilt} {summary_line(y)}")
    findings = store.records.finding_keys
    fa, fb = Counter(findings(live, bounds)), Counter(findings(rebuilt, bounds))
    for key in sorted((fa - fb).keys(), key=repr):
        diffs.append(f"finding {_finding(key)} only in {live}")
    for key in sorted((fb - fa).keys(), key=repr):
        diffs.append(f"finding {_finding(key)} only in {rebuilt}")
    ta = sum(s[0] for s in a.values())
    tb = sum(s[0] for s in b.values())
    if ta != tb:
        diffs.insert(0, f"record count: {live} {ta} != {rebuilt} {tb}")
    diffs += compare_trees(store, live, rebuilt)
    if checkpoint_bounds is not None:
        diffs += compare_checkpoints(store, live, rebuilt, checkpoint_bounds)
    if erasure_bounds is not None:
        diffs += compare_erasures(store, live, rebuilt, erasure_bounds)
    if tree_bounds is not None:
        diffs += compare_logtree(store, live, rebuilt, tree_bounds.get(0, 0))
    return len(a.keys() | b.keys()), diffs


def policy_digest(store: Store, gen: str) -> str:
    policy = store.redaction(gen)[1]
    return "none" if policy is None else policy.digest.hex()


class OnThread:
    """A call run on a thread of its own; :meth:`result` waits for it and returns its value
    or raises its error in the caller's thread."""

    def __init__(self, call: Callable[[], Any], name: str) -> None:
        self._got: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(call,), name=name, daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self._got["value"] = call()
        except BaseException as e:  # raised by result(), in the caller's thread
            self._got["error"] = e

    def result(self) -> Any:
        self._thread.join()
        if "error" in self._got:
            raise self._got["error"]
        return self._got["value"]


Summaries = tuple[dict[str, StreamSummary], dict[str, bytes] | None]
"""``Store.summaries``' answer: per stream the summary, and the served bodies' digest or None."""

SUMMARY_PARTS = max(1, (os.cpu_count() or 2) // 2)
"""Connections that share each generation's summary before the lock, a share of the streams
each: a summary is one server process, and the two generations' run side by side (on 2
cores, one each)."""


def summarise_apart(cfg: ProjectorConfig, gen: str, bounds: Mapping[int, int], bodies: bool,
                    parts: int = 1, since: Mapping[int, int] | None = None) -> Summaries:
    """``gen``'s committed rows below ``bounds`` (from ``since``) summarised
    (``Store.summaries``) on ``parts`` connections of their own, side by side, each over its
    share of the streams."""
    def one(k: int) -> Summaries:
        with Store(cfg) as store:
            return store.records.summaries(gen, bounds, bodies, since=since,
                                   part=(k, parts) if parts > 1 else None)

    if parts == 1:
        return one(0)
    shares = [OnThread(lambda k=k: one(k), f"summarise-{gen}-{k}") for k in range(parts)]
    sums: dict[str, StreamSummary] = {}
    body: dict[str, bytes] | None = {} if bodies else None
    for share in shares:
        a, b = share.result()
        sums.update(a)
        if body is not None and b is not None:
            body.update(b)
    return sums, body


def summarise_both(store: Store, live: str, rebuilt: str, bounds: Mapping[int, int],
                   bodies: bool, since: Mapping[int, int] | None = None
                   ) -> tuple[Summaries, Summaries]:
    """The live and the rebuilt generation's summaries of the rows below ``bounds`` (from
    ``since``), each generation scanned once, side by side: the live one on a connection of
    its own (its rows are committed, and the caller holds the live lock, so no batch adds to
    them), the rebuilt one on ``store``'s, inside the caller's transaction, which holds its
    last rows. On a 2-core machine one after the other this was a third of a rebuild beside
    a full live generation."""
    theirs = OnThread(lambda: summarise_apart(store.cfg, live, bounds, bodies, since=since),
                       "summarise-live")
    try:
        mine = store.records.summaries(rebuilt, bounds, bodies, since=since)
    finally:
        got = theirs.result()
    return got, mine


_ABSENT = bytes(32)


def _join_digests(prefix: bytes | None, tail: bytes | None) -> bytes:
    return hashlib.sha256((prefix or _ABSENT) + (tail or _ABSENT)).digest()


def joined(prefix: Summaries, tail: Summaries) -> Summaries:
    """Per stream, the summaries of a prefix of the log and of the rest, as one: the counts
    added, each digest the sha256 of the prefix's and the tail's (32 zero bytes standing for
    a part without the stream). Two generations' joined summaries over the same split are
    equal exactly when both parts are (up to sha256 collisions)."""
    (ps, pb), (ts, tb) = prefix, tail
    none = (0, None, None)
    sums = {}
    for stream in ps.keys() | ts.keys():
        (pc, pd, ph), (tc, td, th) = ps.get(stream, none), ts.get(stream, none)
        sums[stream] = (pc + tc, _join_digests(pd, td), _join_digests(ph, th))
    body = None
    if pb is not None and tb is not None:
        body = {stream: _join_digests(pb.get(stream), tb.get(stream))
                for stream in pb.keys() | tb.keys()}
    return sums, body


def summary_line(s: tuple[int, bytes, bytes] | None) -> str:
    if s is None:
        return "(absent)"
    return f"count={s[0]} chain={s[1].hex()[:16]} bytes={s[2].hex()[:16]}"


def _finding(key: tuple) -> str:
    p, o, kind, stream, seq = key
    return f"{kind} at {p}/{o} (stream {stream}, seq {seq})"
