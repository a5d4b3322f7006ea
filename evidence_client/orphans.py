"""Orphan adoption: the spools of processes that ended with captures in them.

At start and every ``orphan_scan_s`` the Recorder takes the lock of each orphan it finds under
its spool root (only one process can: ``spool.claim_orphans``). Adopted spools are resent
oldest first, one batch at a time, and each batch is acknowledged in its spool only after Kafka
acknowledged (or refused for good) every capture in it; the Recorder's own captures wait
behind them, so a stream's earlier captures go first. A spool resent to the end is removed.
Used by the sender thread only.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .encoder import event_id_of
from .errors import ProducerError, SpoolError
from .metrics import Metrics
from .producer import RETRY
from .spool import Spool, SpoolEntry, claim_orphans
from .tracking import RESEND_BATCH, Backoff, Tracked

__all__ = ["Orphans"]

log = logging.getLogger("evidence_client.recorder")  # the logger these lines always had

Report = Callable[[ProducerError | None], None]
Send = Callable[[bytes, bytes, Report], None]
"""Produce (key, value) with a delivery callback; raises :class:`ProducerError`."""
NotRetried = Callable[[Tracked, ProducerError], None]
"""Deal with a capture Kafka will never take as it is (truncate it, or keep it aside)."""


@dataclass
class _Batch:
    source: Spool
    items: list[SpoolEntry]
    results: list[ProducerError | bool | None]  # None until its delivery report

    def reported(self) -> bool:
        return all(r is not None for r in self.results)


class Orphans:
    """The adopted spools of one Recorder and the one resend batch in flight."""

    def __init__(self, root: Path, own: Path, scan_s: float, metrics: Metrics,
                 backoff: Backoff) -> None:
        self._root, self._own, self._scan_s = root, own, scan_s
        self._metrics = metrics
        self._backoff = backoff
        self._spools: deque[Spool] = deque()
        self._batch: _Batch | None = None
        self._next_scan = 0.0

    @property
    def resending(self) -> bool:
        """A batch is out, waiting for its delivery reports."""
        return self._batch is not None

    @property
    def busy(self) -> bool:
        """Adopted captures wait: the own ones go after them."""
        return bool(self._spools) or self._batch is not None

    def pending(self) -> int:
        return sum(len(s) for s in self._spools)

    def claim(self, *, when_due: bool = False) -> None:
        """Adopt the orphans under the spool root now (or only once ``orphan_scan_s`` has
        passed since the last scan, ``when_due``)."""
        if when_due and time.monotonic() < self._next_scan:
            return
        self._next_scan = time.monotonic() + self._scan_s
        found = claim_orphans(self._root, exclude=self._own)
        if found and when_due:
            log.warning("adopting %d orphaned spool(s) with %d captures: %s", len(found),
                        sum(map(len, found)), ", ".join(o.directory.name for o in found))
        self._spools.extend(found)

    def resend(self, send: Send, not_retried: NotRetried) -> None:
        """Settle the batch in flight once every report is in; then send the next one when
        the backoff allows."""
        if self._batch is not None:
            if not self._batch.reported():
                return
            batch, self._batch = self._batch, None
            if not self._settle(batch, not_retried):
                return
        while self._spools and len(self._spools[0]) == 0:
            self._spools.popleft().remove()
        if not self._spools or not self._backoff.due():
            return
        source = self._spools[0]
        batch = _Batch(source, source.peek(RESEND_BATCH), [])
        batch.results = [None] * len(batch.items)

        def report(i: int, err: ProducerError | None) -> None:
            batch.results[i] = True if err is None else err

        for i, item in enumerate(batch.items):
            try:
                send(item.key, item.value, lambda err, i=i: report(i, err))
            except ProducerError as err:
                batch.results[i] = err
                if err.kind == RETRY:  # queue full: the rest waits for the next batch
                    batch.results[i + 1:] = [err] * (len(batch.items) - i - 1)
                    break
        self._batch = batch

    def _settle(self, batch: _Batch, not_retried: NotRetried) -> bool:
        """Acknowledge the batch's delivered prefix; False (and backoff) if a retriable
        failure stopped it."""
        done = 0
        failure: ProducerError | None = None
        for item, r in zip(batch.items, batch.results):
            if r is True:
                done += 1
                continue
            assert isinstance(r, ProducerError)
            if r.kind == RETRY:
                failure = r
                break
            not_retried(Tracked(event_id_of(item.value), item.key, item.value, spooled=False), r)
            done += 1  # dealt with for good: never retried
        if done:
            try:  # only now: Kafka has acknowledged (or refused) these
                batch.source.ack(done)
            except SpoolError as e:  # given up in memory all the same; the next ack records
                log.warning("cannot record %d resent captures in adopted spool %s yet: %s",
                            done, batch.source.directory.name, e)
            self._metrics.add("resent", done)
            self._metrics.add("adopted", done)
        if failure is not None:
            delay = self._backoff.failed()
            log.warning("resending an adopted spool failed (%s); retrying in %.1f s",
                        failure, delay)
            return False
        self._backoff.reset()
        return True

    def reported(self) -> bool:
        """Every capture of the batch in flight (if any) has its report."""
        return self._batch is None or self._batch.reported()

    def close(self) -> None:
        """Forget the batch in flight (its captures stay in their spool), remove the spools
        resent to the end, and let go of the others: orphans for the next Recorder."""
        self._batch = None
        for spool in self._spools:
            if len(spool) == 0:
                spool.remove()
            else:
                spool.close()
        self._spools.clear()
