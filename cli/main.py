"""``evidence`` — the command line of evidence-store.

Exit codes follow one rule across subcommands: 0 success, 1 could not run (a service is
unreachable, say), 2 usage error; subcommands that compare things add 3 for "found a
difference".
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from evidence_contract.errors import EvidenceError

EXIT_OK, EXIT_CANNOT_RUN, EXIT_USAGE = 0, 1, 2

# name -> (help, add_arguments, run); subcommand modules register here as they land.
Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]


def _dev_args(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="dev_command", required=True)
    up = sub.add_parser("up", help="start Kafka, PostgreSQL, topics and services on 127.0.0.1")
    up.add_argument("--no-services", action="store_true", help="only the infrastructure")
    down = sub.add_parser("down", help="stop what `up` started")
    down.add_argument("--clean", action="store_true", help="also delete .stack/")
    sub.add_parser("status", help="what runs, where")


def _dev_run(args: argparse.Namespace) -> int:
    try:
        from devstack import down, status, up
    except ImportError as e:  # devstack ships in no wheel: the local stack runs from a checkout
        print("evidence dev: the local stack runs from a checkout of evidence-store (devstack/ "
              f"is in no installed package: {e}); in a checkout, run `make up`", file=sys.stderr)
        return EXIT_CANNOT_RUN

    if args.dev_command == "up":
        up(with_services=not args.no_services)
    elif args.dev_command == "down":
        down(clean=args.clean)
    else:
        for name, state in status():
            print(f"{name:<10} {state}")
    return EXIT_OK


# Subcommands that live beside their component: each module offers HELP,
# add_arguments(parser) and run(args) -> int. A component that has not landed yet is absent.
SUBCOMMAND_MODULES = {
    "topics": "cli.topics",
    "writer": "writer.cli",
    "projector": "projections.cli",
    "projections": "cli.projections",
    "api": "api.cli",
    "replay": "cli.replay",
    "audit": "cli.audit",
    "monitor": "cli.monitor",
    "export": "cli.export",
    "checkpoint": "cli.checkpoint",
    "prove": "cli.prove",
    "witness": "cli.witness",
    "publisher": "publisher.cli",
    "verify": "cli.verify",
    "list": "cli.records",
    "inspect": "cli.inspect",
    "stats": "cli.stats",
    "drift": "cli.drift",
    "harness": "cli.harness",
    "retention": "cli.retention",
    "erase": "cli.erase",
    "fidelity": "fidelity.cli",
    "otlp": "otlp.cli",
    "demo": "cli.demo",
}


def _commands(only: str | None = None) -> dict[str, Command]:
    """Every subcommand there is; or, given ``only``, that one alone (when it is there)."""
    import importlib
    import importlib.util

    commands: dict[str, Command] = {}
    if only in (None, "dev"):
        commands["dev"] = ("run the local stack (Kafka, PostgreSQL, services)", _dev_args,
                           _dev_run)
    for name, module_name in SUBCOMMAND_MODULES.items():
        if only is not None and name != only:
            continue
        try:
            if importlib.util.find_spec(module_name) is None:
                continue
        except ModuleNotFoundError:
            continue
        mod = importlib.import_module(module_name)
        commands[name] = (mod.HELP, mod.add_arguments, mod.run)
    return commands


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 already; keep its wording
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


GC_TUNED = frozenset({"writer", "projector", "projections"})
"""The commands whose process runs with ``server.runtime.tune_gc``: the services and the
rebuild, which allocate per record at tens of thousands of records a second."""


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="evidence", description="evidence-store: the evidence layer for LLM calls")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    # A command line that names its subcommand first builds (and imports) that one alone: the
    # others' modules import Kafka, Avro, FastAPI and OpenTelemetry between them, half a
    # second that every `evidence list` would pay. Anything else (no subcommand, an unknown
    # one, `--help`) builds them all, so the usage and errors list every subcommand.
    first = (sys.argv[1:] if argv is None else argv)[:1]
    named = first[0] if first and (first[0] in SUBCOMMAND_MODULES or first[0] == "dev") else None
    commands = _commands(named) if named is not None else {}
    if not commands:
        commands = _commands()
    for name, (help_text, add_args, _run) in commands.items():
        add_args(sub.add_parser(name, help=help_text, description=help_text))
    args = parser.parse_args(argv)
    if argv is None and args.command in GC_TUNED:
        # A process of its own (the console script, ``python -m cli.main``), not a caller
        # that passes argv (a test, an embedding program): the collector is the process's.
        from server.runtime import tune_gc

        tune_gc()
    try:
        return commands[args.command][2](args)
    except EvidenceError as e:
        print(f"evidence {args.command}: {e}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
