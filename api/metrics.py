"""Prometheus metrics of one app instance, in a registry of its own.

    evidence_api_request_duration_seconds{method,route}   histogram, by route *template*
    evidence_api_requests_total{method,route,status}      counter
    evidence_api_verify_total{outcome}                    match | mismatch | no_digest
    evidence_api_projection_lag                           records behind the log (gauge)
    evidence_api_database_up                              1 if the last DB probe answered
    evidence_api_projector_heartbeat_age_seconds          since the projector's last heartbeat

Several workers (``EVIDENCE_API_WORKERS`` > 1, :func:`api.serving.serve`) share one registry
through prometheus_client's multiprocess mode: the parent sets ``PROMETHEUS_MULTIPROC_DIR`` to
a fresh directory before it starts them, every worker's metrics live in memory-mapped files
there, and whichever worker answers a scrape sums them all (:meth:`ApiMetrics.render`):
counters and histograms add up over workers (a worker that died keeps what it counted, so
``rate()`` sees no reset when one is replaced); the gauges report the most recent value any
worker set.

Labels never carry stream ids, event ids or keys: the route template, not the path, so a
scrape reveals no tenant's data. Every label comes from a fixed set, so the series count is
bounded whatever clients send: ``method`` is one of :data:`METHODS` (an HTTP server accepts any
token as a method, and each made-up one would otherwise be a series of its own), ``route`` a
template of the app's routes, and ``"other"`` stands for anything else. That is why ``/metrics``
is served without an API key (like ``/healthz``), on the 127.0.0.1 listener; put it behind the
same network policy as any Prometheus target if the API is exposed further.
"""

from __future__ import annotations

import time
from typing import Any

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["METHODS", "OTHER", "ApiMetrics", "MetricsMiddleware"]

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE",
                     "CONNECT"})
"""The methods of RFC 9110 and RFC 5789: the only ``method`` label values besides OTHER."""
OTHER = "other"

_BUCKETS = (.0005, .001, .0025, .005, .0075, .01, .025, .05, .075, .1, .25, .5, 1, 2.5, 5)


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.latency = Histogram("evidence_api_request_duration_seconds",
                                 "Request latency by route template.", ("method", "route"),
                                 buckets=_BUCKETS, registry=self.registry)
        self.requests = Counter("evidence_api_requests_total", "Requests by route and status.",
                                ("method", "route", "status"), registry=self.registry)
        self.verify = Counter("evidence_api_verify_total", "Replay verifications by outcome.",
                              ("outcome",), registry=self.registry)
        # Resolved once: counted on the hot route. An unusable input ("invalid") is not counted.
        self._verified = {o: self.verify.labels(o) for o in ("match", "mismatch", "no_digest")}
        self.altered = Counter("evidence_api_projection_altered_total",
                               "Rows that failed the API's check against their sealed record "
                               "and were served from the log instead (api.evidence).",
                               registry=self.registry)
        self.lag = Gauge("evidence_api_projection_lag",
                         "Records the projection is behind the log (sum over partitions).",
                         registry=self.registry, multiprocess_mode="mostrecent")
        self.db_up = Gauge("evidence_api_database_up",
                           "1 if the last database probe answered, else 0.",
                           registry=self.registry, multiprocess_mode="mostrecent")
        self.heartbeat_age = Gauge("evidence_api_projector_heartbeat_age_seconds",
                                   "Seconds since the projector last stored its heartbeat "
                                   "(NaN before its first).", registry=self.registry, multiprocess_mode="mostrecent")
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:  # labels() takes a lock; resolve each series once
            children = (self.latency.labels(method, route),
                        self.requests.labels(method, route, str(status)))
            self._children[key] = children
        children[0].observe(seconds)
        children[1].inc()

    def count_verify(self, outcome: str) -> None:
        """Count one replay verification by ``VerifyResult.outcome``."""
        counter = self._verified.get(outcome)
        if counter is not None:
            counter.inc()

    def count_altered(self) -> None:
        self.altered.inc()

    def render(self) -> bytes:
        """The exposition: this registry's, or, under several workers (the module docstring),
        every worker's summed from ``PROMETHEUS_MULTIPROC_DIR``."""
        path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if not path:
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=path)
        return generate_latest(registry)


class MetricsMiddleware:
    """Pure ASGI middleware (no BaseHTTPMiddleware: it would add a task per request)."""

    def __init__(self, app: Any, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            method = scope["method"]
            if method not in METHODS:
                method = OTHER
            # A route's template is fixed when the app is built; no route matched is OTHER.
            template = getattr(scope.get("route"), "path", None) or OTHER
            self.metrics.observe(method, template, status, time.perf_counter() - start)
