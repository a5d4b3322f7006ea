"""What a Kafka cluster of three or more brokers requires of the project's topics (pure).

On one broker a topic can only have one replica, and that is allowed (the local stack, the
tests). On a cluster the point of the cluster is that one broker lost loses nothing and stops
nothing, which holds only when every topic has

- replication factor ≥ 3, so two replicas remain while one broker is down;
- ``min.insync.replicas`` ≥ 2, so an ``acks=all`` write (the gateway's, the writer's
  transaction) is acknowledged only once it is on two brokers;
- ``unclean.leader.election.enable`` false, so a replica that missed acknowledged records is
  never made leader, which would truncate them from the others.

A topic that falls short is refused, naming the topic and the setting, never silently
accepted; and topics are never created weaker than that on a cluster.
"""

from __future__ import annotations

from typing import Collection, Mapping

CLUSTER_BROKERS = 3
"""From this many brokers on, a cluster's rules apply."""
MIN_REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2


def is_cluster(brokers: int) -> bool:
    return brokers >= CLUSTER_BROKERS


def creation_configs(configs: Mapping[str, str], replication_factor: int) -> dict[str, str]:
    """A topic's configs as it is created: with ``min.insync.replicas`` 2 when it is
    replicated three ways or more (a cluster whose brokers default to 1 still gets 2)."""
    out = dict(configs)
    if replication_factor >= MIN_REPLICATION_FACTOR:
        out.setdefault("min.insync.replicas", str(MIN_INSYNC_REPLICAS))
    return out


def settings_problem(replication_factor: int, brokers: int) -> str | None:
    """Why topics with ``replication_factor`` must not be created on ``brokers``, or None."""
    if is_cluster(brokers) and replication_factor < MIN_REPLICATION_FACTOR:
        return (f"EVIDENCE_REPLICATION_FACTOR={replication_factor} on a cluster of {brokers} "
                f"brokers: at least {MIN_REPLICATION_FACTOR} are required, so that one broker "
                f"lost loses no acknowledged record")
    return None


def cluster_problems(name: str, brokers: int, replication_factor: int,
                     actual: Mapping[str, str | None],
                     pinned: Collection[str] = ()) -> list[str]:
    """What is too weak in an existing topic on a cluster of ``brokers``, one line per
    setting; empty on fewer than three brokers. ``replication_factor`` is the topic's
    smallest replica count over its partitions, ``actual`` its effective configs (a broker
    default included, as DescribeConfigs reports it); ``pinned`` the configs the topic's spec
    fixes, whose differences :func:`topics.spec.config_problems` already reports."""
    if not is_cluster(brokers):
        return []
    where = f"on a cluster of {brokers} brokers"
    problems = []
    if replication_factor < MIN_REPLICATION_FACTOR:
        problems.append(f"{name}: replication factor {replication_factor} {where}, at least "
                        f"{MIN_REPLICATION_FACTOR} required (one broker lost would lose "
                        f"acknowledged records)")
    isr = actual.get("min.insync.replicas")
    if isr is None or not isr.strip().isdigit() or int(isr) < MIN_INSYNC_REPLICAS:
        problems.append(f"{name}: min.insync.replicas={isr} {where}, at least "
                        f"{MIN_INSYNC_REPLICAS} required (an acknowledged write must be on "
                        f"two brokers)")
    if ("unclean.leader.election.enable" not in pinned
            and actual.get("unclean.leader.election.enable") != "false"):
        problems.append(f"{name}: unclean.leader.election.enable="
                        f"{actual.get('unclean.leader.election.enable')} {where}, must be "
                        f"false (an out-of-sync replica elected leader truncates acknowledged "
                        f"records)")
    return problems
