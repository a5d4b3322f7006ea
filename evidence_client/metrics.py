"""A Recorder's counters (``Recorder.metrics``), shared by its front and its sender thread."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

__all__ = ["COUNTERS", "Metrics"]

COUNTERS = ("captured", "delivered", "spooled", "resent", "adopted", "truncated",
            "undeliverable", "unspooled", "slow_durable", "failed", "errors", "pending")


@dataclass
class Metrics:
    """Counters of one Recorder. ``captured`` counts calls whose CaptureEvent was built;
    every capture is written to the spool before its call returns (``unspooled`` counts those
    the disk refused: their calls waited for Kafka instead), and each ends up ``delivered``
    (at its first attempt), ``spooled`` (it waited in the spool for Kafka) and later
    ``resent``, ``undeliverable`` (refused by Kafka for good, kept under ``undeliverable/``),
    or ``failed`` (lost, logged with its event id).
    ``slow_durable`` counts calls that went on before their capture was on disk
    (``durable_timeout_ms``). ``truncated`` counts captures sent without their bodies (size
    policy); ``adopted`` those of ``resent`` that came from the orphaned spools of other
    (ended) processes; ``errors`` capture-side failures kept away from the application;
    ``pending`` is the number of captures waiting in this Recorder's spools."""

    captured: int = 0
    delivered: int = 0
    spooled: int = 0
    resent: int = 0
    adopted: int = 0
    truncated: int = 0
    undeliverable: int = 0
    unspooled: int = 0
    slow_durable: int = 0
    failed: int = 0
    errors: int = 0
    pending: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {k: getattr(self, k) for k in COUNTERS}
