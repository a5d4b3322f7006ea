"""``evidence api``: serve the REST API with uvicorn (what ``make up`` starts)."""

from __future__ import annotations

import argparse

HELP = "serve the REST API (replay verify, records, replay serving) with uvicorn"

DEFAULT_FACTORY = "api.app:app_from_env"
"""What the server (each worker) builds its app with; ``--factory`` (not in ``--help``) lets
the bench serve the same app plus its bare route (``bench.app:bench_app``)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; the API serves evidence, "
                        "so widen this deliberately)")
    p.add_argument("--port", type=int, default=None,
                   help="port (default $EVIDENCE_API_PORT, else 8000)")
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"],
                   help="log level of the API and uvicorn (default info); lines are JSON")
    p.add_argument("--access-log", action="store_true",
                   help="log every request (off by default; /metrics counts them)")
    p.add_argument("--workers", type=int, default=None,
                   help="server processes (default $EVIDENCE_API_WORKERS, else one per usable "
                        "core, at most 8); each has its own pool of EVIDENCE_API_POOL_MAX")
    p.add_argument("--factory", default=DEFAULT_FACTORY, help=argparse.SUPPRESS)
    p.epilog = ("Configuration comes from the environment (`source .stack/env`): "
                "EVIDENCE_DATABASE_URL, EVIDENCE_API_KEY + EVIDENCE_API_KEY_STREAMS, "
                "EVIDENCE_API_KEYS_FILE, EVIDENCE_PG_VIEWS_SCHEMA, EVIDENCE_API_MAX_LAG; "
                "limits: EVIDENCE_API_MAX_BODY_BYTES, EVIDENCE_API_MAX_VERIFY_BYTES, "
                "EVIDENCE_API_BODY_TIMEOUT, EVIDENCE_API_HEADER_TIMEOUT, "
                "EVIDENCE_API_KEEP_ALIVE_TIMEOUT, EVIDENCE_API_MAX_HEADER_BYTES; serving: "
                "EVIDENCE_API_WORKERS, EVIDENCE_API_POOL_MAX (per worker), EVIDENCE_API_BACKLOG "
                "(see api.config). "
                "OpenAPI docs are served at /docs.")


def run(args: argparse.Namespace) -> int:
    from server.logs import configure

    from .config import Settings, api_port
    from .errors import ApiConfigError
    from .serving import serve

    configure(args.log_level)
    # Checked here, once, before any worker starts: an ApiConfigError says what to set and
    # exits 1 (a worker would only fail its start-up, and the parent with it, less clearly).
    settings = Settings.from_env()
    workers = settings.workers if args.workers is None else args.workers
    if workers < 1:
        raise ApiConfigError(f"--workers {workers}: must be at least 1")
    # log_config=None: uvicorn keeps its loggers but adds no handlers of its own, so its
    # lines reach the root handler and come out as the same JSON lines (json_logs puts that
    # handler in every worker too). serve() adds the header, keep-alive and head-size
    # bounds of the settings; a server that never started (port taken, ...) exits 3, as
    # uvicorn.run does.
    return serve(args.factory, settings, workers=workers, host=args.host,
                 port=api_port() if args.port is None else args.port,
                 log_level=args.log_level, access_log=args.access_log, server_header=False,
                 log_config=None, json_logs=True)
