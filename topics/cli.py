"""``evidence topics ensure|check`` — create the topics, or verify an existing cluster's."""

from __future__ import annotations

import argparse
import os

HELP = "create or check the Kafka topics and their configs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["ensure", "check"],
                   help="ensure: create what is missing, then check; check: only verify")
    p.add_argument("--bootstrap", default=os.environ.get("EVIDENCE_KAFKA_BOOTSTRAP",
                                                         "127.0.0.1:9092"),
                   help="Kafka bootstrap servers (default: $EVIDENCE_KAFKA_BOOTSTRAP)")


def run(args: argparse.Namespace) -> int:
    from topics import TopicSettings, check_topics, ensure_topics, topic_specs

    settings = TopicSettings.from_env()
    if args.action == "ensure":
        created = ensure_topics(args.bootstrap, settings)
        for name in created:
            print(f"created {name}")
    else:
        check_topics(args.bootstrap, settings)
    for spec in topic_specs(settings):
        conf = " ".join(f"{k}={v}" for k, v in sorted(spec.configs.items()))
        print(f"ok {spec.name} partitions={spec.partitions} {conf}")
    return 0
