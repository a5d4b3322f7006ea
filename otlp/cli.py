"""``evidence otlp`` — receive OpenTelemetry GenAI spans and inference events over OTLP/HTTP and
produce them to the intake as captures mapped from telemetry (docs/otlp.md).

Exit codes: SIGTERM/SIGINT stop it cleanly (what is queued for Kafka is flushed), after which
uvicorn re-raises the signal; 1 when it cannot run (the port taken), 2 for a setting that
cannot work. Kafka being away is waited out: exports are answered 503
with Retry-After until it is back.
"""

from __future__ import annotations

import argparse

from server.settings import add_connection_options

HELP = "receive OTLP/HTTP GenAI telemetry (POST /v1/traces, /v1/logs) as captures mapped from it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    add_connection_options(p, "bootstrap", "topic_prefix")
    a("--host", help="address to listen on (default 127.0.0.1: telemetry carries prompts, "
                     "so widen this deliberately)")
    a("--port", type=int, help="port [EVIDENCE_OTLP_PORT, default 4318, OTLP/HTTP's]")
    a("--stream", help="the stream mapped captures are chained in [EVIDENCE_OTLP_STREAM, "
                       "default otel]")
    a("--stream-by-service", dest="stream_by_service", action="store_true", default=None,
      help="chain each resource's captures in <stream>.<service.name> "
           "[EVIDENCE_OTLP_STREAM_BY_SERVICE]")
    a("--max-body-bytes", dest="max_body_bytes", type=int,
      help="cap on a request body once decompressed, answered 413 past it "
           "[EVIDENCE_OTLP_MAX_BODY_BYTES, default 8 MiB]")
    a("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
      help="log level (default info); lines are JSON")
    p.epilog = ("Also: EVIDENCE_OTLP_DELIVERY_TIMEOUT_S, EVIDENCE_OTLP_RETRY_AFTER_S, "
                "EVIDENCE_OTLP_QUEUE_MAX_MESSAGES (see docs/configuration.md).")


def run(args: argparse.Namespace) -> int:
    from server.logs import configure, event_logger
    from server.version import version

    from otlp.config import ReceiverConfig
    from otlp.service import serve

    configure(args.log_level)
    log = event_logger("evidence.otlp")
    try:
        cfg = ReceiverConfig.from_env().with_args(args)
    except ValueError as e:
        log("error", "bad_config", error=str(e))
        return 2
    return serve(cfg, version(), args.log_level)
