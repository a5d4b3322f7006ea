"""The size policy: which bytes of a capture are kept verbatim. Pure: a CaptureEvent dict in,
a CaptureEvent dict out.

Digests and lengths always cover the full bytes: ``content_key``, ``response_digest`` and
``output_digest`` are computed before this policy runs. Up to ``max_verbatim_bytes`` (the sum
of every body the capture carries: request, response, error, input, prompt, chunks) the
bytes are kept as they are. Above it the capture is still sent and sealed, but *truncated*:
``capture.truncated`` is true, every body is dropped (null) except the first
:data:`ERROR_PREFIX_BYTES` of ``error_bytes`` (and ``params`` too when it is longer than that), and what remains proves the call (its content
key, response digest, output digest and lengths) without carrying it.

The default, :data:`DEFAULT_MAX_VERBATIM_BYTES` (48 MiB), fits the intake and log topics'
default ``max.message.bytes`` of 64 MiB with room for the rest of the record; a deployment
that raises or lowers those limits sets ``Recorder(max_verbatim_bytes=...)`` to match. A
capture Kafka still refuses as too large is truncated and sent again (the recorder does it).
"""

from __future__ import annotations

import copy
from typing import Any

from evidence_contract import TRUNCATED_ERROR_BYTES
from evidence_contract.envelope import OVERHEAD

__all__ = ["DEFAULT_MAX_VERBATIM_BYTES", "ERROR_PREFIX_BYTES", "apply_size_policy",
           "body_size", "truncate"]

DEFAULT_MAX_VERBATIM_BYTES = 48 * 1024 * 1024
ERROR_PREFIX_BYTES = TRUNCATED_ERROR_BYTES
"""What a truncated capture keeps of ``error_bytes`` (the contract's limit)."""

_BODIES = ("request_bytes", "response_bytes", "error_bytes", "input_bytes", "prompt_bytes")


def body_size(event: dict[str, Any]) -> int:
    """Bytes of content the capture carries verbatim (``params`` is request content too)."""
    n = sum(len(event.get(k) or b"") for k in _BODIES) + len(event.get("params") or "")
    return n + sum(len(c.get("chunk_bytes") or b"") for c in event.get("retrieval") or ())


def truncate(event: dict[str, Any], to_seal: bool = False) -> dict[str, Any]:
    """``event`` with every body dropped (error_bytes cut to its first 64 KiB), flagged.

    ``to_seal``: the event is sealed next, so the error prefix is 45 bytes shorter (its
    envelope must fit the contract's 64 KiB). An event already sealed (``encryption`` set)
    keeps its error_bytes envelope whole or not at all: a cut envelope would not open.
    """
    out = copy.copy(event)
    for k in _BODIES:
        if k in out and k != "error_bytes":
            out[k] = None
    if len(out.get("params") or "") > ERROR_PREFIX_BYTES:
        out["params"] = None  # parameters that large are content (tools, documents), not settings
    if out.get("error_bytes") is not None:
        if out.get("encryption") is not None:
            if len(out["error_bytes"]) > ERROR_PREFIX_BYTES:
                out["error_bytes"] = None
        else:
            keep = ERROR_PREFIX_BYTES - OVERHEAD if to_seal else ERROR_PREFIX_BYTES
            out["error_bytes"] = out["error_bytes"][:keep]
    out["retrieval"] = [{**c, "chunk_bytes": None} for c in out.get("retrieval") or ()]
    out["capture"] = {**out["capture"], "truncated": True}
    return out


def apply_size_policy(event: dict[str, Any], max_verbatim_bytes: int,
                      to_seal: bool = False) -> dict[str, Any]:
    """``event`` unchanged if its bodies fit ``max_verbatim_bytes``, else :func:`truncate`."""
    if body_size(event) <= max_verbatim_bytes:
        return event
    return truncate(event, to_seal)
