"""``python -m devstack up|down|status`` — what the Makefile calls."""

from __future__ import annotations

import argparse
import sys

from devstack.config import StackError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="devstack", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start Kafka, PostgreSQL, the topics and the services")
    p_up.add_argument("--no-services", action="store_true",
                      help="only the infrastructure (Kafka, PostgreSQL, topics)")
    p_down = sub.add_parser("down", help="stop what `up` started")
    p_down.add_argument("--clean", action="store_true", help="also delete .stack/")
    sub.add_parser("status", help="what runs, where")
    args = parser.parse_args(argv)

    from devstack import stack

    try:
        if args.command == "up":
            stack.up(with_services=not args.no_services)
        elif args.command == "down":
            stack.down(clean=args.clean)
        else:
            for name, state in stack.status():
                print(f"{name:<12} {state}")
    except StackError as e:
        print(f"devstack: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
