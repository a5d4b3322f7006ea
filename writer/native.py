"""Which seal path the writer takes: the compiled one, or the pure Python one.

``evidence_seal_native`` (built from ``native/seal/`` by ``make up`` / ``make test``) is a
compiled twin of the common case of :func:`writer.core.validate` and
:func:`writer.core.seal_capture`: a canonical, plain CaptureEvent that passes every rule,
sealed as it came. It answers None for
anything else, and the pure path then decides (and words every rejection), so the two can
only differ if the compiled one accepts what the pure one would not, or seals other bytes:
``tests/unit/test_native_seal.py`` holds both to the same vectors and to a differential run.

Selection (``EVIDENCE_NATIVE``), once per process and logged then (``native_seal``):

- unset or ``auto``: the compiled path if it imports and agrees with the contract, else pure;
- ``0``: the pure path;
- ``1``: the compiled path, and :class:`NativeSealError` if it cannot be had.

Before it is taken, the compiled path must know the contract's CaptureEvent fingerprints
with the same EvidenceRecord fingerprints and seal one vector byte for byte as the pure
path does; otherwise it is refused (``on`` with ``1``, ``off`` and why with auto).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any, Mapping

from evidence_contract import (
    SCHEMA_VERSION,
    EvidenceError,
    fingerprint,
    record_fingerprint_for,
    schema_name_for,
)
from evidence_contract.merkle import LEAF_LABEL
from server.logs import event_logger
from server.settings import native_setting
from writer.capture import self_check

__all__ = ["ENV", "MODULE", "NativeSealError", "Selection", "kernel", "select"]

ENV = "EVIDENCE_NATIVE"  # named in messages; read by server.settings.native_setting
MODULE = "evidence_seal_native"

log = event_logger("evidence.writer")


class NativeSealError(EvidenceError):
    """``EVIDENCE_NATIVE`` is not 0, 1 or auto, or is 1 and the compiled path cannot be had.

    Not a ``writer.errors.WriterError``: that module imports the Kafka shell, and the pure
    core (which selects its seal path here) must not."""


@dataclass(frozen=True)
class Selection:
    """The seal path chosen: ``module`` is ``evidence_seal_native`` when on, else None."""

    on: bool
    why: str
    module: Any = None


def _refusal(mod: Any) -> str:
    """Why ``mod`` must not seal for this contract ("" when it may)."""
    known = getattr(mod, "RECORD_FOR_CAPTURE", None)
    if not isinstance(known, dict) or not known:
        return "it names no CaptureEvent fingerprints"
    for capture_fp, record_fp in known.items():
        if schema_name_for(capture_fp) != "CaptureEvent":
            return f"its CaptureEvent fingerprint {capture_fp.hex()} is not the contract's"
        if record_fingerprint_for(capture_fp) != record_fp:
            return f"it seals {capture_fp.hex()} captures under another record fingerprint"
    if fingerprint("CaptureEvent") not in known:
        return (f"it does not know this contract's CaptureEvent "
                f"({fingerprint('CaptureEvent').hex()}, contract {SCHEMA_VERSION}): a build "
                f"older than this writer")
    if getattr(mod, "LEAF_LABEL", None) != LEAF_LABEL:
        return "its Merkle leaf label is not the contract's"
    return self_check(mod)


def _choose(setting: str) -> Selection:
    setting = setting.strip().lower() or "auto"
    if setting not in ("0", "1", "auto"):
        raise NativeSealError(f"{ENV}={setting!r}: expected 0, 1 or auto")
    if setting == "0":
        return Selection(False, f"{ENV}=0")
    try:
        mod = importlib.import_module(MODULE)
    except ImportError as e:
        if setting == "1":
            raise NativeSealError(f"{ENV}=1 but {MODULE} does not import ({e}): build it with "
                              f"`make up` (needs a Rust toolchain)") from e
        return Selection(False, f"{MODULE} is not installed (no Rust toolchain at build?)")
    refused = _refusal(mod)
    if refused:
        if setting == "1":
            raise NativeSealError(f"{ENV}=1 but {MODULE} is refused: {refused}")
        return Selection(False, f"{MODULE} is refused: {refused}")
    return Selection(True, f"{MODULE} {getattr(mod, '__file__', '')}", mod)


@functools.lru_cache(maxsize=4)
def _selected(setting: str) -> Selection:
    chosen = _choose(setting)
    log("info", "native_seal", native_seal="on" if chosen.on else "off", why=chosen.why)
    return chosen


def select(env: Mapping[str, str] | None = None) -> Selection:
    """The seal path ``EVIDENCE_NATIVE`` asks for (see the module docstring), chosen and
    logged once per setting and process."""
    return _selected(native_setting(env))


def kernel(writer: Mapping[str, str], native: bool | None = None) -> Any:
    """An ``evidence_seal_native.Kernel`` for this writer identity, or None for the pure path.

    ``native``: None selects by ``EVIDENCE_NATIVE``; False is the pure path; True is the
    compiled one or :class:`NativeSealError`.
    """
    if native is False:
        return None
    chosen = _selected("1") if native else select()
    if not chosen.on:
        return None
    return chosen.module.Kernel(writer["writer_id"], writer["transactional_id"], writer["version"])
