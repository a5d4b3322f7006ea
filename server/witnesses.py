"""The witnesses file (``EVIDENCE_WITNESSES_FILE``): who cosigns the log, and where to push.

One witness a line, ``#`` comments, blank lines ignored (docs/witnessing.md)::

    # <witness verifier key> [<submission URL>]
    witness.example/w1+6d8e2c1a+BNv... http://127.0.0.1:7380
    witness.example/pq+1f2e3d4c+Bj8...                      # accepted, never pushed to

The key is a C2SP note verifier key of a cosignature key: Ed25519 ``cosignature/v1`` (type
0x04) or ML-DSA-44 (type 0x06). The URL is the prefix of the witness's tlog-witness
``add-checkpoint`` endpoint (``<url>/add-checkpoint``), http or https, kept without a
trailing ``/``; a key without one is a witness whose cosignatures the log accepts but does
not push to.

:func:`parse_witnesses` reads the text (pure); :class:`WatchedWitnesses` is the file as the
publisher and the API see it at any moment: one ``stat`` a call, a re-read when the file's
inode, size, modification or change time changed, the last good list kept (and the reason
logged) while a new version is malformed, and no witnesses while the file does not exist.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from evidence_contract.errors import EvidenceError
from evidence_contract.note import (
    COSIGNATURE_TYPES, NoteError, VerifierKey, parse_vkey,
)

from server.logs import EventLog, event_logger

__all__ = ["WatchedWitnesses", "Witness", "WitnessesFileError", "parse_witnesses"]

_log = event_logger("evidence.witnesses")

class WitnessesFileError(EvidenceError, ValueError):
    """A witnesses file that cannot be taken; the message names the line and why."""


@dataclass(frozen=True)
class Witness:
    """One line of the witnesses file: its cosignature key and, when pushed to, its URL."""

    key: VerifierKey
    url: str | None = None

    @property
    def add_checkpoint_url(self) -> str | None:
        """``<url>/add-checkpoint``, the tlog-witness endpoint; None for a key only accepted."""
        return None if self.url is None else self.url + "/add-checkpoint"


def _strip_comment(line: str) -> str:
    # A '#' that starts a field starts a comment: keys are base64 ('#'-free), and a fragment
    # has no meaning in a submission URL.
    for i, c in enumerate(line):
        if c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _url(text: str, where: str) -> str:
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 -- raises ValueError for a port that is no number in range
    except ValueError as e:
        raise WitnessesFileError(f"{where}: {text!r} is not a URL: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WitnessesFileError(f"{where}: the submission URL {text!r} is not an http:// or "
                                 f"https:// URL with a host")
    if parts.query or parts.fragment or "#" in text or parts.username or parts.password:
        raise WitnessesFileError(f"{where}: the submission URL {text!r} is a prefix: no user, "
                                 f"query or fragment")
    return text.rstrip("/")


def parse_witnesses(text: str, source: str = "the witnesses file") -> list[Witness]:
    """Parse the witnesses file's text; ``WitnessesFileError`` naming ``source`` and the line
    for a malformed key, a key that is not a witness's cosignature key, a URL that is not
    http(s), a line of more than two fields, or a key listed twice."""
    witnesses: list[Witness] = []
    seen: dict[tuple[str, int], int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = _strip_comment(raw).split()
        if not fields:
            continue
        where = f"{source} line {number}"
        if len(fields) > 2:
            raise WitnessesFileError(f"{where}: expected '<witness verifier key> "
                                     f"[<submission URL>]', got {len(fields)} fields")
        try:
            key = parse_vkey(fields[0])
        except NoteError as e:
            raise WitnessesFileError(f"{where}: not a note verifier key: {e}") from None
        if key.sig_type not in COSIGNATURE_TYPES:
            raise WitnessesFileError(
                f"{where}: key {key.name}+{key.key_id:08x} has type {key.sig_type:#04x}, not a "
                f"witness's cosignature key (0x04 Ed25519 cosignature/v1 or 0x06 ML-DSA-44)")
        ident = (key.name, key.key_id)
        if ident in seen:
            raise WitnessesFileError(f"{where}: witness key {key.name}+{key.key_id:08x} is "
                                     f"already on line {seen[ident]}")
        seen[ident] = number
        url = _url(fields[1], where) if len(fields) == 2 else None
        witnesses.append(Witness(key, url))
    return witnesses


class WatchedWitnesses:
    """The witnesses file at ``path`` as it is now, re-read only when it changed.

    :meth:`current` costs one ``stat`` when nothing changed. A change (inode, size,
    modification or change time) is read and parsed; a version that cannot be read or parsed is logged
    once (``witnesses_file_invalid``, an error) and the last good list stays in force, so a
    half-edited file never drops every witness. A missing file is no witnesses. Safe to call
    from several threads.
    """

    def __init__(self, path: str | os.PathLike[str], log: EventLog | None = None) -> None:
        self.path = Path(path)
        self._log = log or _log
        self._lock = threading.Lock()
        # (dev, ino, size, mtime_ns, ctime_ns): ctime too, so that a chmod making an unreadable
        # version readable is seen.
        self._seen: tuple[int, ...] | None = None
        self._missing_logged = False
        self._last_error: str | None = None
        self._witnesses: tuple[Witness, ...] = ()

    def current(self) -> tuple[Witness, ...]:
        """The witnesses the file lists now (the last good version of it)."""
        with self._lock:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                if not self._missing_logged:
                    self._missing_logged = True
                    self._log("warning" if self._witnesses else "info", "witnesses_file_missing",
                              path=str(self.path), witnesses=0)
                self._seen, self._witnesses = None, ()
                return ()
            except OSError as e:
                return self._keep(f"cannot stat it: {e.strerror}")
            self._missing_logged = False
            seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if seen == self._seen:
                return self._witnesses
            self._seen = seen
            try:
                text = self.path.read_text(encoding="utf-8")
                witnesses = tuple(parse_witnesses(text, str(self.path)))
            except OSError as e:
                return self._keep(f"cannot read it: {e.strerror}")
            except UnicodeDecodeError as e:
                return self._keep(f"not UTF-8: {e}")
            except WitnessesFileError as e:
                return self._keep(str(e))
            if witnesses != self._witnesses or self._last_error is not None:
                self._log("info", "witnesses_file_loaded", path=str(self.path),
                          witnesses=len(witnesses),
                          keys=[f"{w.key.name}+{w.key.key_id:08x}" for w in witnesses])
            self._witnesses, self._last_error = witnesses, None
            return witnesses

    def keys(self) -> tuple[VerifierKey, ...]:
        """The cosignature keys of :meth:`current`."""
        return tuple(w.key for w in self.current())

    def _keep(self, reason: str) -> tuple[Witness, ...]:
        if reason != self._last_error:  # said once per version, not once per call
            self._last_error = reason
            self._log("error", "witnesses_file_invalid", path=str(self.path), reason=reason,
                      kept=len(self._witnesses))
        return self._witnesses
