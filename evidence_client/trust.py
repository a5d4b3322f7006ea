"""What a verifying reader trusts and remembers: the pinned log key, the witnesses it
requires, and the last checkpoint it verified per origin.

    verifier = LogVerifier(log_key="evidence-store.local/log+1a2b3c4d+AX...")
    verified = verifier.check(bundle)          # evidence_contract.bundle.verify_bundle
    verifier.known_size("evidence-store.local/log/acme:chat")   # ask the API to prove from it

With ``log_witnesses=`` every record must also be covered by a deployment checkpoint that at
least ``min_log_witnesses`` of them (default: all) cosigned: the bundle's ``log`` path
(docs/witnessing.md). Until the publisher has signed one over the record, the check raises
:class:`EvidenceUncovered`, which the readers retry for a while as they do for a stream's
checkpoint.

The pure check is :func:`evidence_contract.bundle.verify_bundle`; this module adds the state
a client keeps between reads, as Go's sumdb client keeps its latest verified tree: each
origin's last verified checkpoint, so that a later read whose checkpoint is older (a
rollback) or forks from it is refused, and one that is newer must come with a consistency
proof from it. With ``state_file`` that memory outlives the process (a small JSON file,
written atomically after each newer checkpoint), which is what the CLI uses.

The log key is pinned: given as a key, its text, or a file holding its text. Trust on first
use is never implied: only with ``trust_on_first_use=True`` is the key taken from the API the
first time (and then pinned in ``state_file`` if there is one), and every later read is
checked against that key.

Errors are translated here, once, into the client's tree (:mod:`evidence_client.errors`):
``Tampered`` -> :class:`EvidenceTampered` (``RolledBack`` -> :class:`CheckpointRolledBack`),
``Unwitnessed`` -> :class:`EvidenceUnwitnessed`, ``Uncovered`` -> :class:`EvidenceUncovered`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .errors import (
    CheckpointRolledBack,
    ConfigError,
    EvidenceTampered,
    EvidenceUncovered,
    EvidenceUnverified,
    EvidenceUnwitnessed,
)

__all__ = ["LogVerifier", "load_key", "translate"]


def load_key(key: Any, what: str = "log_key") -> Any:
    """A ``VerifierKey`` from a key, its note text, or a path to a file of it (a signer key
    file gives its verifier)."""
    from evidence_contract.note import NoteError, VerifierKey, parse_skey, parse_vkey

    if isinstance(key, VerifierKey):
        return key
    if isinstance(key, Path) or (isinstance(key, str) and "+" not in key):
        try:
            key = Path(key).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{what}: cannot read the key file {key}: {e}") from e
    if not isinstance(key, str):
        raise ConfigError(f"{what} must be a verifier key, its text or a file of it")
    text = key.strip()
    try:
        return parse_skey(text).verifier if text.startswith("PRIVATE+KEY+") else parse_vkey(text)
    except NoteError as e:
        raise ConfigError(f"{what} is not a note verifier key: {e}") from e


@contextlib.contextmanager
def translate() -> Iterator[None]:
    """The contract's verification failures as the client's errors (the one place)."""
    from evidence_contract import bundle

    try:
        yield
    except bundle.RolledBack as e:
        raise CheckpointRolledBack(str(e)) from e
    except bundle.Tampered as e:
        raise EvidenceTampered(str(e)) from e
    except bundle.Unwitnessed as e:
        raise EvidenceUnwitnessed(str(e)) from e
    except bundle.Uncovered as e:
        raise EvidenceUncovered(str(e)) from e
    except bundle.Unverified as e:  # pragma: no cover - every kind is named above
        raise EvidenceUnverified(str(e)) from e


class LogVerifier:
    """Checks evidence bundles against a pinned log key and remembers each origin's last
    verified checkpoint (see the module docstring). Thread-safe."""

    def __init__(self, log_key: Any = None, *, witnesses: Iterable[Any] = (),
                 min_witnesses: int | None = None, trust_on_first_use: bool = False,
                 state_file: str | Path | None = None,
                 log_witnesses: Iterable[Any] | None = None,
                 min_log_witnesses: int | None = None) -> None:
        from evidence_contract.bundle import witness_keys

        self._lock = threading.Lock()
        self._state_file = Path(state_file) if state_file is not None else None
        self._known: dict[str, Any] = {}
        self._doc = self._read_state()
        pinned = self._doc.get("pinned")
        if log_key is not None:
            self.log_key = load_key(log_key)
        elif pinned and trust_on_first_use:
            self.log_key = load_key(pinned, f"the key pinned in {self._state_file}")
        elif trust_on_first_use:
            self.log_key = None         # taken from the API on first use
        else:
            raise ConfigError("a verifying reader needs the log's verifier key: pass log_key= "
                              "(the key text, a file of it, or GET /log/key as obtained from "
                              "a source you trust), or trust_on_first_use=True to pin the "
                              "API's key the first time, or verify=False to read unverified")
        if self.log_key is not None:
            self._known = self._section()
        try:
            self.witnesses = witness_keys(witnesses)
        except Exception as e:  # noqa: BLE001 - NoteError, OSError: a bad witness key
            raise ConfigError(f"a witness key is not a note verifier key: {e}") from e
        self.min_witnesses = len(self.witnesses) if min_witnesses is None else min_witnesses
        if not 0 <= self.min_witnesses <= len(self.witnesses):
            raise ConfigError(f"min_witnesses must be between 0 and the {len(self.witnesses)} "
                              f"witness key(s) given, not {self.min_witnesses}")
        # log_witnesses: the record must be covered by a deployment checkpoint they cosigned
        # (docs/witnessing.md); None: that path is not asked for.
        try:
            self.log_witnesses = None if log_witnesses is None else witness_keys(log_witnesses)
        except Exception as e:  # noqa: BLE001 - NoteError, OSError: a bad witness key
            raise ConfigError(f"a log witness key is not a note verifier key: {e}") from e
        given = len(self.log_witnesses or ())
        self.min_log_witnesses = given if min_log_witnesses is None else min_log_witnesses
        if not 0 <= self.min_log_witnesses <= given:
            raise ConfigError(f"min_log_witnesses must be between 0 and the {given} log "
                              f"witness key(s) given, not {self.min_log_witnesses}")

    # -- state ---------------------------------------------------------------------------
    # The state file: {"pinned": <key text or null>, "logs": {<key text>: {<origin>:
    # {"size": n, "root": base64}}}}: one section per log key, so a new deployment (a new
    # key) starts afresh while a rollback of a known log is caught.
    def _read_state(self) -> dict[str, Any]:
        if self._state_file is None or not self._state_file.exists():
            return {"pinned": None, "logs": {}}
        try:
            doc = json.loads(self._state_file.read_text(encoding="utf-8"))
            if not isinstance(doc, dict) or not isinstance(doc.get("logs", {}), dict):
                raise ValueError("not a state document")
            doc.setdefault("logs", {})
            return doc
        except (OSError, ValueError) as e:
            raise ConfigError(f"the verified-checkpoint state {self._state_file} is "
                              f"unreadable ({e}); it guards against rollbacks, so it is not "
                              f"silently replaced: move it aside to start afresh") from e

    def _section(self) -> dict[str, Any]:
        from evidence_contract.note import Checkpoint, format_vkey

        out: dict[str, Any] = {}
        try:
            for origin, cp in self._doc["logs"].get(format_vkey(self.log_key), {}).items():
                out[origin] = Checkpoint(origin, int(cp["size"]), base64.b64decode(cp["root"]))
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"the verified-checkpoint state {self._state_file} is "
                              f"malformed ({e}); move it aside to start afresh") from e
        return out

    def _save_state(self) -> None:
        if self._state_file is None:
            return
        from evidence_contract.note import format_vkey

        if self.log_key is not None:
            self._doc["logs"][format_vkey(self.log_key)] = {
                o: {"size": c.size, "root": base64.b64encode(c.root_hash).decode()}
                for o, c in sorted(self._known.items())}
        self._state_file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self._state_file.parent, prefix=".verified-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(self._doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._state_file)

    def snapshot(self) -> dict[str, Any]:
        """Every origin's last verified checkpoint, now: take it *before* asking the API, and
        check the answer against it, so that a read racing a newer one in another thread is
        checked against what was known when it asked, not refused as a rollback."""
        with self._lock:
            return dict(self._known)

    def known(self, origin: str) -> Any:
        """The last checkpoint verified for ``origin``, or None."""
        with self._lock:
            return self._known.get(origin)

    def pin(self, fetch_key: Callable[[], str]) -> None:
        """Trust on first use: take the log key from ``fetch_key()`` if none is pinned."""
        with self._lock:
            if self.log_key is not None:
                return
        key = load_key(fetch_key(), "the API's /log/key")
        from evidence_contract.note import format_vkey

        with self._lock:
            if self.log_key is None:
                self.log_key = key
                self._doc["pinned"] = format_vkey(key)
                self._known = self._section()
                self._save_state()

    # -- the check -----------------------------------------------------------------------
    def wants_consistency(self, doc: Any, snapshot: dict[str, Any]) -> tuple[str, int, int] | None:
        """``(stream, first, second)`` when the bundle's checkpoint is newer than the one
        known for its origin and the bundle carries no consistency proof from it (the reader
        did not know the stream when it asked): fetch that proof and put it in
        ``doc["consistency"]`` before :meth:`check`. None when nothing is missing."""
        from evidence_contract.bundle import Uncovered, checkpoint_of

        with translate():
            try:
                stream, cp = checkpoint_of(doc)
            except Uncovered:
                return None  # no checkpoint yet: nothing to be consistent with; check() says so
        known = snapshot.get(cp.origin)
        consistency = doc.get("consistency") if isinstance(doc, dict) else None
        if known is None or cp.size <= known.size or (
                isinstance(consistency, dict) and consistency.get("first") == known.size):
            return None
        return stream, known.size, cp.size

    def check(self, doc: Any, snapshot: dict[str, Any], *,
              content_key: bytes | None = None) -> Any:
        """Verify the API's bundle JSON ``doc`` against the checkpoints of ``snapshot`` (see
        :meth:`snapshot`); return ``evidence_contract.bundle.Verified`` and remember its
        checkpoint if newer. Raises an :class:`EvidenceUnverified`."""
        from evidence_contract.bundle import Trust, checkpoint_of, newer, parse_bundle, verify_bundle

        if self.log_key is None:
            raise ConfigError("no log key is pinned yet (trust on first use pins it at the "
                              "first read)")
        trust = Trust(self.log_key, self.witnesses, self.min_witnesses, self.log_witnesses,
                      self.min_log_witnesses)
        with translate():
            b = parse_bundle(doc)
            origin = checkpoint_of(doc)[1].origin
            verified = verify_bundle(b, trust, snapshot.get(origin), content_key=content_key)
        with self._lock:
            before = self._known.get(origin)
            latest = newer(before, verified.checkpoint)
            if latest is not before:
                self._known[origin] = latest
                self._save_state()
        return verified
