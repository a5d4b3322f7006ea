"""``evidence checkpoint STREAM [--tree-size N] [--issue]``: print a stream's signed checkpoint.

Prints the note exactly as the API serves it (the log's signature and every cosignature the
log holds). ``--issue`` first asks the writer for a new one: an ``evidence-control:
checkpoint`` message on the intake topic, keyed by the stream (the writer issues one if the
stream has grown since its last), then waits for it to be projected (``--wait`` seconds).

Exit codes: 0 printed; 1 none, or the API or Kafka is unreachable; 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
import time

from .settings import SettingsError, add_options, resolve
from .tlog import CliError, add_common, api_client, fail, stack_env

HELP = "print a stream's signed checkpoint (--issue: ask the writer for a new one first)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("stream", help="stream id")
    p.add_argument("--tree-size", type=int, metavar="N", help="the checkpoint of this size")
    p.add_argument("--issue", action="store_true",
                   help="ask the writer to issue a checkpoint now, and wait for it")
    p.add_argument("--wait", type=float, default=30.0, metavar="S",
                   help="with --issue: seconds to wait for the new checkpoint (default 30)")
    add_options(p, "bootstrap", "topic_prefix",
                note={"bootstrap": "with --issue", "topic_prefix": "with --issue"})
    add_common(p)


def _size_of(note: bytes) -> int:
    return int(note.split(b"\n", 2)[1])


def _request_checkpoint(bootstrap: str, prefix: str, stream: str, timeout: float) -> None:
    from confluent_kafka import KafkaException, Producer

    from evidence_contract.tlog import CONTROL_CHECKPOINT, CONTROL_HEADER
    from evidence_contract.topics import TopicNames

    try:
        # murmur2_random: Kafka's Java partitioner, so the key lands on the stream's partition
        p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                      "enable.idempotence": True, "message.timeout.ms": int(timeout * 1000)})
        errors: list = []
        p.produce(TopicNames(prefix).intake, value=b"", key=stream.encode("utf-8"),
                  headers=[(CONTROL_HEADER, CONTROL_CHECKPOINT.encode())],
                  on_delivery=lambda err, _m: err and errors.append(err))
        left = p.flush(timeout)
    except (KafkaException, BufferError) as e:
        raise CliError(1, f"cannot ask the writer through Kafka at {bootstrap}: {e}") from e
    if errors or left:
        raise CliError(1, f"Kafka at {bootstrap} did not take the request: "
                          f"{errors[0] if errors else 'no acknowledgement'}")


def run(args: argparse.Namespace) -> int:
    from evidence_contract import valid_stream_id

    if not valid_stream_id(args.stream):
        return fail("checkpoint", CliError(2, f"{args.stream!r} is not a stream id"))
    if args.tree_size is not None and (args.tree_size < 1 or args.issue):
        return fail("checkpoint", CliError(2, "--tree-size is a size >= 1, without --issue"))
    env = stack_env()
    path = f"/streams/{args.stream}/checkpoint"
    try:
        api = api_client(args, env)
        if args.issue:
            before = api.get(path)
            old = _size_of(before.content) if before.status_code == 200 else 0
            try:
                s = resolve(args, env)
            except SettingsError as e:
                raise CliError(2, str(e)) from e
            if s.bootstrap is None:
                raise CliError(1, f"--issue needs Kafka; {s.need('bootstrap')}")
            _request_checkpoint(s.bootstrap, s.topic_prefix, args.stream, s.timeout)
            deadline = time.monotonic() + args.wait
            while True:
                r = api.get(path)
                if r.status_code == 200 and _size_of(r.content) > old:
                    break
                if time.monotonic() > deadline:
                    raise CliError(1, f"no new checkpoint of {args.stream} within {args.wait:g} s"
                                      f" (the latest is of size {old}; the writer issues one "
                                      f"only when the stream has grown)")
                time.sleep(0.2)
        else:
            params = None if args.tree_size is None else {"tree_size": args.tree_size}
            r = api.ok(path, params)
    except CliError as e:
        return fail("checkpoint", e)
    sys.stdout.buffer.write(r.content)
    sys.stdout.flush()
    return 0
