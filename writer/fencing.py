"""After a fencing: was it a live rival holding the writer's identity, or nobody?

Fencing (``FencedError``) is not proof of a second writer: the coordinator fences a writer
itself when it aborts a transaction that timed out (a broker kill -9 and restart), and a
broker stalled past the session timeout fences the writer's own static consumer. A real second
writer joins the group with the same ``group.instance.id`` right after its init_transactions and
keeps heartbeating. :func:`live_rival` watches the group for that member, and
:class:`Fencings` counts how often we were fenced lately; the service shell
(:mod:`writer.service`) closes its clients first and decides what follows. No Kafka here: the
shell hands in how to list the group's members.

A fencing is not always named as one. A fenced transactional producer often fails the call in
progress with a generic ``_FATAL`` ("Unable to produce message: Local: Fatal error") and hands
the fatal error itself, with its code, to the error callback, which runs inside ``poll``;
librdkafka marks the client fatal before it queues that event, so the failed call can come
first. The event does not always come at all (a full-suite run waited 10 s for it), while the
rival's consumer, joining with our group.instance.id, fences our intake consumer too, whose
fatal error only a consume serves. So the shell (``WriterService._named``) serves both clients
for a while before it takes a generic ``_FATAL`` for anything else.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Protocol, TypeVar

__all__ = ["FENCINGS_FOR_RIVAL", "FENCING_WINDOW_S", "Fencings", "Member", "describe",
           "live_rival"]

FENCING_WINDOW_S, FENCINGS_FOR_RIVAL = 120.0, 3  # this many fencings in the window: a rival


class Member(Protocol):
    """A member of a consumer group, as the group coordinator describes it."""

    member_id: str
    client_id: str
    group_instance_id: str | None


M = TypeVar("M", bound=Member)


def live_rival(members: Callable[[], Iterable[M] | None], instance_id: str, ours: set[str],
               session_timeout_ms: int, join_wait_s: float, stopped: Callable[[], bool],
               pause: Callable[[float], None]) -> M | None:
    """A live member of our group, not ours, holding ``instance_id``; or None.

    Our clients must be closed first, so that our own member stops heartbeating: a static
    member does not leave on close, it expires after the session timeout. A member with our
    instance id whose member id none of our consumers ever had (``ours``), still there after a
    session timeout, is heartbeating, so alive: a rival. (Its client id cannot tell: a static
    member that replaces another keeps the replaced one's client id.) Our own member, or nobody,
    until ``join_wait_s`` has passed (the time a new writer takes from init_transactions to
    joining the group) means no rival. ``members()`` answering None (a group the coordinator
    does not describe) counts as nobody there.
    """
    persist_s = session_timeout_ms / 1000 + 2.0
    start = time.monotonic()
    join_until, give_up = start + join_wait_s, start + join_wait_s + 2 * persist_s
    seen: dict[str, float] = {}
    while True:
        listed = members()
        now = time.monotonic()
        holder = next((m for m in listed or () if m.group_instance_id == instance_id), None)
        if holder is not None and holder.member_id not in ours:
            if now - seen.setdefault(holder.member_id, now) >= persist_s:
                return holder
        elif now >= join_until:
            return None
        if stopped() or now >= give_up:
            return None
        pause(min(0.5, persist_s / 4))


class Fencings:
    """The fencings of the last ``FENCING_WINDOW_S``: ``FENCINGS_FOR_RIVAL`` of them mean a
    rival, whether or not the group shows one (a rival may fence us faster than it is seen)."""

    def __init__(self) -> None:
        self._times: list[float] = []

    def __len__(self) -> int:
        return len(self._times)

    def add(self) -> str | None:
        """Count one now; a description of the rival they mean, or None."""
        now = time.monotonic()
        self._times = [t for t in self._times if now - t < FENCING_WINDOW_S] + [now]
        if len(self._times) >= FENCINGS_FOR_RIVAL:
            return f"fenced {len(self._times)} times in {FENCING_WINDOW_S:.0f} s"
        return None


def describe(m: Member) -> str:
    return f"group member {m.member_id} (client {m.client_id})"
