"""A Recorder's counters as Prometheus metrics, for the service that embeds it.

The client has no dependency on a metrics library. Two ways to export:

    from evidence_client.exposition import prometheus_text, register

    prometheus_text([recorder])     # the text format, to serve from the service's own /metrics
    register(recorder)              # or, with prometheus_client installed, into its registry

Samples (one set per Recorder, labelled with its default ``stream`` and its spool root):

    evidence_client_captures_total{state}   counters of ``Recorder.metrics`` (captured,
                                            delivered, spooled, resent, adopted, truncated,
                                            undeliverable, unspooled, slow_durable, failed,
                                            errors)
    evidence_client_spool_pending           captures waiting in the Recorder's spools (its own
                                            and the orphans it adopted) for Kafka

``ops/prometheus/alerts.yml`` alerts on a spool that keeps growing and on failed or
undeliverable captures from these names.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .recorder import Recorder

__all__ = ["CAPTURES", "PENDING", "STATES", "prometheus_text", "register", "samples"]

CAPTURES = "evidence_client_captures_total"
PENDING = "evidence_client_spool_pending"
STATES = ("captured", "delivered", "spooled", "resent", "adopted", "truncated",
          "undeliverable", "unspooled", "slow_durable", "failed", "errors")

_HELP = {
    CAPTURES: "Captures of the Recorder by what became of them (see Recorder.metrics).",
    PENDING: "Captures waiting in the Recorder's spools for Kafka.",
}


def _labels(recorder: "Recorder") -> dict[str, str]:
    return {"stream": recorder.stream or "", "spool": str(recorder.spool_dir)}


def samples(recorders: Iterable["Recorder"]) -> Iterator[tuple[str, dict[str, str], int]]:
    """(name, labels, value) of every sample, counters first."""
    snaps = [(_labels(r), r.metrics.snapshot()) for r in recorders]
    for labels, snap in snaps:
        for state in STATES:
            yield CAPTURES, {**labels, "state": state}, snap[state]
    for labels, snap in snaps:
        yield PENDING, labels, snap["pending"]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus_text(recorders: Iterable["Recorder"]) -> str:
    """The Prometheus text exposition format (version 0.0.4) of ``recorders``."""
    lines: list[str] = []
    seen: set[str] = set()
    for name, labels, value in samples(recorders):
        if name not in seen:
            seen.add(name)
            lines += [f"# HELP {name} {_HELP[name]}",
                      f"# TYPE {name} {'counter' if name == CAPTURES else 'gauge'}"]
        text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{text}}} {value}")
    return "\n".join(lines) + "\n" if lines else ""


def register(recorder: "Recorder", registry: Any = None) -> Any:
    """Register a collector of ``recorder`` in a prometheus_client registry (the default
    one unless given); returns the collector (``registry.unregister(it)`` to remove it).
    Needs ``prometheus_client``, which the client does not install."""
    try:
        from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily
    except ImportError as e:  # pragma: no cover - depends on the embedding service
        raise ImportError("evidence_client.exposition.register needs prometheus_client "
                          "(pip install prometheus-client); prometheus_text() does not") from e

    class _Collector:
        def collect(self):
            labels = _labels(recorder)
            names = [*labels, "state"]
            captures = CounterMetricFamily(CAPTURES.removesuffix("_total"), _HELP[CAPTURES],
                                           labels=names)
            pending = GaugeMetricFamily(PENDING, _HELP[PENDING], labels=list(labels))
            for name, sample_labels, value in samples([recorder]):
                if name == CAPTURES:
                    captures.add_metric([sample_labels[n] for n in names], value)
                else:
                    pending.add_metric([sample_labels[n] for n in labels], value)
            return [captures, pending]

    collector = _Collector()
    (registry if registry is not None else REGISTRY).register(collector)
    return collector
