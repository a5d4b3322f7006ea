"""``evidence writer`` — run the single writer until SIGTERM/SIGINT.

Exit codes: 0 after a clean stop (the open transaction finished), 1 when the writer cannot
run or must not continue (wrong topics, writer-state disagreeing with the log), 2 usage, 3
fenced by another live writer with its identity (a supervisor must not restart it: the two
would fence each other in turn). Kafka outages, broker restarts and fencing by the coordinator
alone do not end it: it makes its clients anew and resumes (see :mod:`writer.service`).
"""

from __future__ import annotations

import argparse
import signal

from server.settings import add_connection_options

HELP = "run the single writer: seal intake captures into the hash-chained log"


def add_arguments(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    add_connection_options(p, "bootstrap", "topic_prefix")
    a("--transactional-id", dest="transactional_id",
      help="Kafka transactional.id, one per deployment [EVIDENCE_WRITER_TRANSACTIONAL_ID, default evidence-writer]")
    a("--group-id", dest="group_id", help="consumer group [EVIDENCE_WRITER_GROUP_ID, default evidence-writer]")
    a("--group-instance-id", dest="group_instance_id",
      help="static group membership id [EVIDENCE_WRITER_GROUP_INSTANCE_ID, default: the transactional id]")
    a("--writer-id", dest="writer_id", help="writer identity stamped in seals [EVIDENCE_WRITER_ID, default host:pid]")
    a("--batch-max-messages", dest="batch_max_messages", type=int,
      help="messages per transaction at most [EVIDENCE_WRITER_BATCH_MAX_MESSAGES, default 5000]")
    a("--batch-linger-ms", dest="batch_linger_ms", type=int,
      help="longest wait for a batch to fill once it has a message [EVIDENCE_WRITER_BATCH_LINGER_MS, default 20]")
    a("--dedup-window-s", dest="dedup_window_s", type=int,
      help="how long a sealed event_id is remembered [EVIDENCE_WRITER_DEDUP_WINDOW_S, default 7 days]")
    a("--dedup-max-ids", dest="dedup_max_ids", type=int,
      help="event_ids remembered per partition at most [EVIDENCE_WRITER_DEDUP_MAX_IDS, default 1000000]")
    a("--metrics-port", dest="metrics_port", type=int,
      help="Prometheus port, 0 disables [EVIDENCE_WRITER_METRICS_PORT, default 9464]")


def run(args: argparse.Namespace) -> int:
    from server.logs import configure, event_logger
    from writer.config import WriterConfig
    from writer.errors import WriterError
    from writer.service import WriterService

    configure()
    log = event_logger("evidence.writer")
    try:
        cfg = WriterConfig.from_env().with_args(args)
    except ValueError as e:
        log("error", "bad_config", error=str(e))
        return 2
    service = WriterService(cfg)

    def stop(signum: int, _frame: object) -> None:
        log("info", "signal", signal=signal.Signals(signum).name,
            message="finishing the open transaction, then exiting")
        service.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        service.start()
    except Exception as e:  # noqa: BLE001 - one clear line for any start-up failure
        from evidence_contract import EvidenceError

        kind = "cannot_start" if isinstance(e, (EvidenceError, WriterError)) else "start_failed"
        log("error", kind, error=str(e), error_type=type(e).__name__)
        service.close()
        return 1
    return service.run()
