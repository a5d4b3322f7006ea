"""``evidence api``: serve the REST API with uvicorn (what ``make up`` starts)."""

from __future__ import annotations

import argparse
import os

HELP = "serve the REST API (replay verify, records, replay serving) with uvicorn"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; the API serves evidence, "
                        "so widen this deliberately)")
    p.add_argument("--port", type=int, default=int(os.environ.get("EVIDENCE_API_PORT") or 8000),
                   help="port (default $EVIDENCE_API_PORT, else 8000)")
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"],
                   help="log level of the API and uvicorn (default info); lines are JSON")
    p.add_argument("--access-log", action="store_true",
                   help="log every request (off by default; /metrics counts them)")
    p.epilog = ("Configuration comes from the environment (`source .stack/env`): "
                "EVIDENCE_DATABASE_URL, EVIDENCE_API_KEY + EVIDENCE_API_KEY_STREAMS, "
                "EVIDENCE_API_KEYS_FILE, EVIDENCE_PG_VIEWS_SCHEMA, EVIDENCE_API_MAX_LAG; "
                "limits: EVIDENCE_API_MAX_BODY_BYTES, EVIDENCE_API_MAX_VERIFY_BYTES, "
                "EVIDENCE_API_BODY_TIMEOUT, EVIDENCE_API_HEADER_TIMEOUT, "
                "EVIDENCE_API_KEEP_ALIVE_TIMEOUT, EVIDENCE_API_MAX_HEADER_BYTES (see api.config). "
                "OpenAPI docs are served at /docs.")


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from server.logs import configure

    from .app import create_app
    from .config import Settings
    from .serving import uvicorn_config

    configure(args.log_level)
    settings = Settings.from_env()  # an ApiConfigError says what to set; exits 1
    app = create_app(settings)
    # log_config=None: uvicorn keeps its loggers but adds no handlers of its own, so its
    # lines reach the root handler above and come out as the same JSON lines.
    # uvicorn_config adds the header, keep-alive and head-size bounds of the settings.
    config = uvicorn_config(app, settings, host=args.host, port=args.port,
                            log_level=args.log_level, access_log=args.access_log,
                            server_header=False, log_config=None)
    server = uvicorn.Server(config)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    # As uvicorn.run does: a server that never started (port taken, ...) exits 3.
    return 0 if server.started else 3
