"""``evidence topics ensure|check`` — create the topics, or verify an existing cluster's.

Kafka and the topic prefix come from the shared options (:mod:`cli.settings`): the flag, else
``$EVIDENCE_KAFKA_BOOTSTRAP`` / ``$EVIDENCE_TOPIC_PREFIX``, else ``.stack/env``, else the
defaults; the partitions and topic configs from :meth:`topics.TopicSettings.from_env`."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from server.settings import Connection, SettingsError, add_connection_options

from .settings import STACK_ENV, stack_env

HELP = "create or check the Kafka topics and their configs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["ensure", "check"],
                   help="ensure: create what is missing, then check; check: only verify")
    add_connection_options(p, "bootstrap", "topic_prefix", fallback=STACK_ENV)


def run(args: argparse.Namespace) -> int:
    from topics import TopicSettings, check_topics, ensure_topics, topic_specs

    env = stack_env()
    try:
        conn = Connection.from_env(env).with_args(args)
        settings = replace(TopicSettings.from_env(env), names=conn.names)
    except (SettingsError, ValueError) as e:
        print(f"evidence topics: {e}", file=sys.stderr)
        return 2
    bootstrap = str(conn.bootstrap)
    if args.action == "ensure":
        created = ensure_topics(bootstrap, settings)
        for name in created:
            print(f"created {name}")
    else:
        check_topics(bootstrap, settings)
    for spec in topic_specs(settings):
        conf = " ".join(f"{k}={v}" for k, v in sorted(spec.configs.items()))
        print(f"ok {spec.name} partitions={spec.partitions} {conf}")
    return 0
