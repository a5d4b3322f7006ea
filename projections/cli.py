"""``evidence projector``: run the projector until SIGTERM (or Ctrl-C), then exit 0.

Kafka and PostgreSQL outages do not end it (it reconnects and resumes from its stored
positions, see :mod:`projections.service`); an error that cannot heal exits 1."""

from __future__ import annotations

import argparse
import signal
import threading

from server.logs import configure, event_logger
from server.settings import add_connection_options

from .config import ProjectorConfig
from .errors import ProjectionError

HELP = "project the log into PostgreSQL (the live generation) until stopped"

log = event_logger("evidence.projector")


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """Flags shared by ``projector`` and ``projections``; each defaults to its env var."""
    add_connection_options(p, "database_url", "bootstrap", "topic_prefix", "views_schema")
    p.add_argument("--meta-schema", dest="meta_schema",
                   help="schema of the generations and live tables "
                        "(env EVIDENCE_PG_META_SCHEMA, default evidence_meta)")
    p.add_argument("--generation-prefix", dest="generation_prefix",
                   help="generation schema prefix (env EVIDENCE_PG_GENERATION_PREFIX, "
                        "default evidence_g)")
    p.add_argument("--batch", dest="batch_max_messages", type=int,
                   help="max messages per batch transaction (env EVIDENCE_PROJECTOR_BATCH)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p)
    p.add_argument("--metrics-port", dest="metrics_port", type=int,
                   help="Prometheus /metrics port, 0 disables "
                        "(env EVIDENCE_PROJECTOR_METRICS_PORT, default 9465)")


def run(args: argparse.Namespace) -> int:
    # At use, not for a cycle: every `evidence` command imports this module for its
    # arguments, and only this one needs Kafka's client and the metrics server.
    from .metrics import ProjectorMetrics
    from .service import Projector

    configure()
    cfg = ProjectorConfig.from_env().with_args(args)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        # Only a flag: the batch transaction in flight finishes, then the loop ends.
        log("info", "stopping", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    metrics = ProjectorMetrics()
    metrics.serve(cfg.metrics_port, cfg.metrics_host)
    try:
        Projector(cfg, metrics).run(stop.is_set)
    except ProjectionError as e:
        log("error", "fatal", error=str(e), error_type=type(e).__name__,
            message="the projector cannot continue; exiting")
        return 1
    return 0
