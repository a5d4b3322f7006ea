"""``evidence publisher`` — sign the deployment tree and push its checkpoints to witnesses.

Exit codes: 0 after a clean stop (SIGTERM/SIGINT), 1 when it cannot run (no log key, a key
for another log), 2 usage. Kafka, PostgreSQL and witnesses being away are waited out.
"""

from __future__ import annotations

import argparse
import signal

from server.settings import add_connection_options

HELP = "sign the deployment tree (one origin) and push its checkpoints to the witnesses"


def add_arguments(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    add_connection_options(p, note={"database_url": "for proof hashes"})
    a("--interval", dest="interval_s", type=float,
      help="at most one checkpoint this often, in seconds "
           "[EVIDENCE_LOG_CHECKPOINT_INTERVAL_S, default 10]")
    a("--witnesses", dest="witnesses_file",
      help="the witnesses file, re-read when it changes [EVIDENCE_WITNESSES_FILE]")


def run(args: argparse.Namespace) -> int:
    from server.log_key import load_signing_key
    from server.logs import configure, event_logger

    from publisher.config import PublisherConfig
    from publisher.service import Publisher

    configure()
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per push is the publisher's
    log = event_logger("evidence.publisher")
    try:
        cfg = PublisherConfig.from_env().with_args(args)
    except ValueError as e:
        log("error", "bad_config", error=str(e))
        return 2
    if not cfg.log_signing_key_file:
        log("error", "cannot_start", error="EVIDENCE_LOG_SIGNING_KEY_FILE is not set: the "
            "publisher signs the deployment's checkpoints with the log key")
        return 1
    try:
        key = load_signing_key(cfg.log_signing_key_file, cfg.log_name)
    except ValueError as e:
        log("error", "cannot_start", error=str(e))
        return 1
    publisher = Publisher(cfg, key)

    def stop(signum: int, _frame: object) -> None:
        log("info", "signal", signal=signal.Signals(signum).name)
        publisher.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        publisher.run()
    finally:
        publisher.close()
    return 0
