"""The projector's Prometheus metrics, in a registry of its own (no global state in tests)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = ["MODEL_WATCH_KEYS", "ProjectorMetrics"]

MODEL_WATCH_KEYS = 200
"""The (provider, model) label pairs the drift metrics hold at most."""


class ProjectorMetrics:
    """Counters, a histogram and gauges the projector updates; :meth:`serve` exposes them."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.projected = Counter("evidence_projector_records", "Log records projected",
                                 registry=r)
        self.findings = Counter("evidence_projector_findings", "Audit findings raised",
                                ["kind"], registry=r)
        self.batch_seconds = Histogram(
            "evidence_projector_batch_seconds", "Time to fold and write one batch",
            buckets=(.002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10), registry=r)
        self.lag = Gauge("evidence_projector_lag", "Log offsets not yet projected", registry=r)
        self.heartbeat = Gauge("evidence_projector_heartbeat_timestamp_seconds",
                               "Unix time of the last heartbeat stored in PostgreSQL",
                               registry=r)
        self.reconnects = Counter("evidence_projector_reconnects",
                                  "Sessions ended by a Kafka or PostgreSQL failure and begun "
                                  "again", registry=r)
        # Drift watch (projections.drift): per provider and model asked for, at most
        # MODEL_WATCH_KEYS label pairs (the model is the caller's word); the records of
        # pairs past the bound are counted, not labelled.
        changes = "Records whose {} differs from the last one seen for their provider and model"
        last = "Sealed time (Unix seconds) of the last record whose {} changed"
        self.model_changes = {
            "fingerprint": Counter("evidence_model_fingerprint_changes",
                                   changes.format("provider fingerprint"),
                                   ["provider", "model"], registry=r),
            "served_model": Counter("evidence_model_served_model_changes",
                                    changes.format("served model (response_model)"),
                                    ["provider", "model"], registry=r)}
        self.model_last_change = {
            "fingerprint": Gauge("evidence_model_last_fingerprint_change_timestamp_seconds",
                                 last.format("provider fingerprint"), ["provider", "model"],
                                 registry=r),
            "served_model": Gauge("evidence_model_last_served_model_change_timestamp_seconds",
                                  last.format("served model"), ["provider", "model"],
                                  registry=r)}
        self.model_untracked = Counter(
            "evidence_model_watch_untracked_records",
            f"Records of provider and model pairs past the first {MODEL_WATCH_KEYS} watched",
            registry=r)

    def model_changed(self, change: Any) -> None:
        """Count a :class:`projections.drift.Change`."""
        labels = (change.provider, change.model)
        self.model_changes[change.kind].labels(*labels).inc()
        self.model_last_change[change.kind].labels(*labels).set(change.at_us / 1e6)

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """Serve /metrics on ``port`` (0: no endpoint), on ``addr``: loopback unless exposing
        it is asked for (the settings' ``metrics_host``, ``EVIDENCE_METRICS_HOST``)."""
        if port:
            start_http_server(port, addr=addr, registry=self.registry)
