"""The projector's Prometheus metrics, in a registry of its own (no global state in tests)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = ["ProjectorMetrics"]


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

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """Serve /metrics on ``port`` (0: no endpoint), on ``addr``: loopback unless exposing
        it is asked for (the settings' ``metrics_host``, ``EVIDENCE_METRICS_HOST``)."""
        if port:
            start_http_server(port, addr=addr, registry=self.registry)
