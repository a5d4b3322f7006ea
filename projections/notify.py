"""Head notices: the live projector tells listeners which streams' heads a batch moved.

After a batch of the live generation commits, the projector sends one PostgreSQL ``NOTIFY``
on :func:`heads_channel` of its views schema; the payload names the streams whose heads the
batch moved, space-separated (a stream id has no space), or is ``*`` when the names would not
fit a notice. The API listens on the same channel (``api.watch``), so that
``GET /streams/{s}?after_seq=N&wait_ms=M`` answers as soon as the head passes N, rather than
the client asking again and again.

Best effort, on purpose. The notice goes after the commit, in a statement of its own, and a
failure is logged and forgotten. Nothing depends on it for correctness: a waiter reads the
head again at least every ``RECHECK_S`` whatever it hears, and the batch is durable before
the notice is sent. Sent inside the batch's transaction it would have been atomic with it,
but a notice queue filled up behind a stuck listener would then fail the commit, and a
read-side convenience would stop the projection of the log.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

__all__ = ["ALL", "CHANNEL_PREFIX", "PAYLOAD_MAX", "RECHECK_S", "heads_channel", "payload",
           "streams_of"]

CHANNEL_PREFIX = "evidence_heads:"
ALL = "*"
PAYLOAD_MAX = 7000
"""Longest payload sent as names; PostgreSQL refuses one of 8000 bytes or more."""

RECHECK_S = 0.5
"""A waiter reads the head at least this often, notice or none: a notice sent while the API
was not listening (a reconnect, a blue/green swap) delays it by this much at most."""

_NAME_MAX = 63  # NAMEDATALEN - 1: PostgreSQL refuses a longer channel name


def heads_channel(views: str) -> str:
    """The channel of the read model served from schema ``views`` (several read models may
    share one database: each has its own channel)."""
    name = CHANNEL_PREFIX + views
    if len(name.encode()) <= _NAME_MAX:
        return name
    return CHANNEL_PREFIX + hashlib.sha256(views.encode()).hexdigest()[:32]


def payload(streams: Iterable[str]) -> str:
    """The notice for a batch that moved the heads of ``streams``."""
    text = " ".join(sorted(streams))
    return text if 0 < len(text) <= PAYLOAD_MAX else ALL


def streams_of(text: str) -> frozenset[str] | None:
    """The streams a notice names; None for every stream (``*``, or an empty payload)."""
    names = frozenset(text.split())
    return None if not names or ALL in names else names
