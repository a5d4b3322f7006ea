"""The writer's Prometheus metrics, in a registry of its own (no global state in tests)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = ["WriterMetrics"]


class WriterMetrics:
    """Counters and histograms the writer updates; :meth:`serve` exposes them over HTTP."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.sealed = Counter("evidence_writer_sealed", "Captures sealed into the log", registry=r)
        self.rejected = Counter("evidence_writer_rejected", "Intake messages parked in rejected",
                                ["reason"], registry=r)
        self.duplicates = Counter("evidence_writer_duplicates",
                                  "Captures absorbed because their event_id was already sealed",
                                  registry=r)
        self.reencoded = Counter("evidence_writer_reencoded",
                                 "Captures whose body was not canonical Avro and was re-encoded",
                                 registry=r)
        self.aborts = Counter("evidence_writer_transaction_aborts", "Transactions aborted",
                              registry=r)
        self.commit_seconds = Histogram(
            "evidence_writer_transaction_commit_seconds", "commit_transaction latency",
            buckets=(.002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10), registry=r)
        self.batch_size = Histogram(
            "evidence_writer_batch_size", "Intake messages per transaction",
            buckets=(1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000), registry=r)
        self.last_commit = Gauge("evidence_writer_last_commit_timestamp_seconds",
                                 "Unix time of the last committed transaction", registry=r)
        self.reconnects = Counter("evidence_writer_reconnects",
                                  "Kafka sessions ended by a failure and made anew, by error",
                                  ["error"], registry=r)
        self.intake_lag = Gauge(
            "evidence_writer_intake_lag",
            "Intake messages past the writer's position on its partitions (their ends as last "
            "fetched), updated by the sealing loop at most once a second: it stays put while "
            "the loop cannot seal",
            registry=r)
        self.checkpoints = Counter("evidence_writer_checkpoints",
                                   "Signed checkpoints committed to the checkpoints topic",
                                   registry=r)
        self.checkpoint_sign_seconds = Histogram(
            "evidence_writer_checkpoint_sign_seconds",
            "Time to compute a stream's tree root and sign its checkpoint note",
            buckets=(.00005, .0001, .0002, .0005, .001, .002, .005, .01, .05), registry=r)
        self.erasures = Counter(
            "evidence_writer_erasure_requests",
            "Erasure requests consumed from intake, by outcome: issued (a receipt signed and "
            "committed), duplicate (already receipted), refused (no log key), invalid",
            ["outcome"], registry=r)
        self.checkpoint_refused = Gauge(
            "evidence_writer_checkpoint_refused_streams",
            "Streams whose restored tree disagreed with their last signed checkpoint (or the "
            "log): sealed, never signed", registry=r)

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """Serve /metrics on ``port`` (0: no endpoint), on ``addr``: loopback unless exposing
        it is asked for (the settings' ``metrics_host``, ``EVIDENCE_METRICS_HOST``)."""
        if port:
            start_http_server(port, addr=addr, registry=self.registry)
