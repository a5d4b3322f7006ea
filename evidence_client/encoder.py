"""From a finished exchange to the bytes the sender spools and produces: the CaptureEvent
built (``capture.build_event``), sized (``sizing``), sealed under ``content_policy="encrypt"``
(the subject's keys from the :class:`~evidence_client.keycache.KeyCache`), and encoded. Runs
on the sender thread; no I/O but the key store's."""

from __future__ import annotations

import logging
from importlib.metadata import version
from typing import Any

from evidence_contract import decode, encode, new_event_id

from .capture import Exchange, build_event
from .keycache import KeyCache
from .metrics import Metrics
from .settings import ENCRYPT, RecorderSettings
from .sizing import apply_size_policy, truncate
from .tracking import Tracked

__all__ = ["LIBRARY", "CaptureEncoder"]

log = logging.getLogger("evidence_client.recorder")  # the logger these lines always had

LIBRARY = f"evidence-store-client/{version('evidence-store-client')}"
"""``capture.library`` of every record this client makes."""


class CaptureEncoder:
    """Encodes the captures of one Recorder; counts ``captured``, ``truncated``, ``failed``."""

    def __init__(self, settings: RecorderSettings, metrics: Metrics) -> None:
        self._settings = settings
        self._metrics = metrics
        self._sealed = settings.content_policy == ENCRYPT
        self._keys = (KeyCache(settings.key_store, settings.key_cache_s, settings.key_clock)
                      if self._sealed else None)

    def key_text(self, ex: Exchange) -> str:
        """The content key for a log line: a plain content key of sealed content would let a
        log reader confirm a guess."""
        return "(sealed)" if self._sealed else ex.content_key.hex()

    def _build(self, ex: Exchange, event_id: str) -> dict[str, Any]:
        """The capture as it leaves the process: sized, and sealed under ``encrypt``."""
        s = self._settings
        if self._keys is None:
            return apply_size_policy(build_event(ex, event_id, LIBRARY, s.host),
                                     s.max_verbatim_bytes)
        from evidence_contract.sealing import seal_body

        call = ex.call
        keys = self._keys.get(call.subject if call is not None and call.subject else ex.stream,
                              ex.stream)
        event = build_event(ex, event_id, LIBRARY, s.host, digests=keys)
        return seal_body(apply_size_policy(event, s.max_verbatim_bytes, to_seal=True), keys)

    def encode(self, ex: Exchange) -> Tracked | None:
        """The capture to track, or None when it cannot be made (logged and counted: a
        capture whose key the store cannot give is dropped, never sent in the clear)."""
        event_id = ex.event_id or new_event_id()  # the transport fixes it when the call begins
        try:
            sized = self._build(ex, event_id)
            value = encode("CaptureEvent", sized)
        except Exception:  # noqa: BLE001 - a client bug, not the application's problem
            self._metrics.add("failed")
            log.exception("capture %s could not be encoded and is dropped (content_key=%s)",
                          event_id, self.key_text(ex))
            return None
        self._metrics.add("captured")
        if sized["capture"]["truncated"]:
            self._metrics.add("truncated")
            log.warning("capture %s is larger than max_verbatim_bytes=%d: sealed truncated "
                        "(digests and lengths only)", event_id, self._settings.max_verbatim_bytes)
        return Tracked(event_id, ex.stream.encode("utf-8"), value)


def truncated(event_id: str, key: bytes, value: bytes) -> Tracked | None:
    """``value`` without its bodies (digests and lengths kept), or None when it cannot get
    smaller (already truncated, or not ours to decode)."""
    try:
        _, event = decode(value)
    except Exception:  # noqa: BLE001 - not ours to fix
        return None
    if event["capture"].get("truncated"):
        return None  # already as small as it gets
    return Tracked(event_id, key, encode("CaptureEvent", truncate(event)))


def event_id_of(value: bytes) -> str:
    """The event id of an encoded capture, for log lines ("?" when it does not decode)."""
    try:
        return decode(value)[1]["event_id"]
    except Exception:  # noqa: BLE001 - only for log lines
        return "?"
