"""A key store in a local directory: per-subject data keys for the devstack and tests.

Implements ``evidence_contract.keys.KeyStore``. Each key is one file, ``<key_id>.key``
(mode 0600, in a 0700 directory), a JSON object with the subject, its epoch, the streams it
sealed content of, when it was made, the KEK id and the data key wrapped by the KEK (AES key
wrap). A file without an ``epoch`` (made before epochs) is of epoch ``all``. Legal holds are
one file, ``holds.json``: every hold ever placed, with when it was released. Writes are atomic (a temporary file,
fsync, rename, fsync of the directory); creating and destroying hold an exclusive
``flock`` on ``.lock``, so processes sharing the directory never give one subject two live
keys.

Destroying a subject really destroys its keys: for each, a tombstone is written to a
temporary file, the key file's bytes are overwritten with zeros and fsync'd, and the
tombstone is renamed over it, so ``<key_id>.key`` then says only who, when and under which
request. Limits, said plainly: on copy-on-write or journaling file systems, SSDs that remap
blocks, snapshots and backups, overwritten bytes may survive elsewhere; those residual
copies are wrapped, so rotating the KEK (re-wrap the live keys, destroy the old KEK) is what
makes them useless. A deployment keeps the KEK in a KMS (see ``KeyWrapper``).

The KEK comes from :func:`load_kek`: ``EVIDENCE_KEK_FILE`` (a 0600 file of 32 raw bytes or
64 hex digits) or ``EVIDENCE_KEK`` (64 hex digits, for tests).
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

from evidence_contract import now_micros, valid_stream_id
from evidence_contract.keys import (
    DAY,
    EPOCH_ALL,
    ERASED,
    LIVE,
    DataKey,
    Hold,
    KeyErased,
    KeyStoreError,
    KeyWrapper,
    LegalHold,
    SubjectState,
    UnknownKey,
    ended_by,
    epoch_bound,
    epoch_of,
    parse_granularity,
    unwrapping,
    valid_subject,
)

from .errors import ConfigError
from .spool import fsync_dir as _fsync_dir

__all__ = ["FileKeyStore", "load_kek"]

_KEY_SUFFIX = ".key"
_HOLDS = "holds.json"


def load_kek(env: dict[str, str] | None = None) -> KeyWrapper:
    """The local KEK named by the environment, as a ``LocalKek`` (needs ``[encrypt]``).

    ``EVIDENCE_KEK_FILE``: a file of mode 0600 (or stricter) holding 32 raw bytes or 64 hex
    digits; ``EVIDENCE_KEK``: 64 hex digits. Raises ``ConfigError`` for anything else.
    """
    from evidence_contract.sealing import KEK_SIZE, LocalKek

    env = os.environ if env is None else env
    path, text = env.get("EVIDENCE_KEK_FILE"), env.get("EVIDENCE_KEK")
    if path:
        try:
            st = os.stat(path)
            raw = Path(path).read_bytes()
        except OSError as e:
            raise ConfigError(f"EVIDENCE_KEK_FILE {path}: {e}") from e
        if st.st_mode & 0o077:
            raise ConfigError(f"EVIDENCE_KEK_FILE {path} is readable by others "
                              f"(mode {stat.S_IMODE(st.st_mode):o}); make it 0600")
        kek = raw if len(raw) == KEK_SIZE else _hex_kek(raw.strip().decode("ascii", "replace"),
                                                        "EVIDENCE_KEK_FILE")
    elif text:
        kek = _hex_kek(text.strip(), "EVIDENCE_KEK")
    else:
        raise ConfigError("no key-encryption key: set EVIDENCE_KEK_FILE (or EVIDENCE_KEK)")
    return LocalKek(kek)


def _hex_kek(text: str, name: str) -> bytes:
    try:
        kek = bytes.fromhex(text)
    except ValueError:
        kek = b""
    if len(kek) != 32:
        raise ConfigError(f"{name} must hold 32 bytes (64 hex digits)")
    return kek


class FileKeyStore:
    """Per-subject data keys as files under ``directory``, wrapped by ``wrapper``.

    ``epoch`` is the granularity of new keys (``day`` or ``month``); ``clock`` gives UTC µs
    (tests pass a fake one to cross an epoch)."""

    def __init__(self, directory: str | os.PathLike[str], wrapper: KeyWrapper, *,
                 epoch: str = DAY, clock: Callable[[], int] = now_micros) -> None:
        self.directory = Path(directory)
        self.wrapper = wrapper
        self.granularity = parse_granularity(epoch)
        self.clock = clock
        self._lock = threading.Lock()  # flock is per open file, not per thread

    def __repr__(self) -> str:
        return f"FileKeyStore({str(self.directory)!r}, {self.wrapper!r})"

    # -- files -----------------------------------------------------------------------------
    def _ensure(self) -> None:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as e:
            raise KeyStoreError(f"key store {self.directory}: {e}") from e

    class _Locked:
        def __init__(self, store: "FileKeyStore") -> None:
            self.store = store

        def __enter__(self) -> None:
            self.store._lock.acquire()
            try:
                self.store._ensure()
                self.fd = os.open(self.store.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(self.fd, fcntl.LOCK_EX)
            except BaseException:
                self.store._lock.release()
                raise

        def __exit__(self, *exc: object) -> None:
            try:
                os.close(self.fd)  # releases the flock
            finally:
                self.store._lock.release()

    def _path(self, key_id: str) -> Path:
        return self.directory / f"{key_id}{_KEY_SUFFIX}"

    def _write(self, path: Path, doc: dict[str, Any]) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        data = json.dumps(doc, sort_keys=True).encode("utf-8")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        _fsync_dir(self.directory)

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise KeyStoreError(f"key store {path}: {e}") from e
        if raw.strip(b"\x00") == b"":
            # Zeroed by a destroy that stopped before its tombstone was renamed in: the key
            # is gone all the same.
            return {"key_id": path.name[:-len(_KEY_SUFFIX)], "subject": "?", "created_at": 0,
                    "erased_at": 0, "request_id": None}
        try:
            return json.loads(raw)
        except ValueError as e:
            raise KeyStoreError(f"key store {path} is not a key file: {e}") from e

    def _docs(self) -> Iterator[dict[str, Any]]:
        if not self.directory.is_dir():
            return
        for path in sorted(self.directory.glob(f"*{_KEY_SUFFIX}")):
            doc = self._read(path)
            if doc is not None:
                yield doc

    # -- the port --------------------------------------------------------------------------
    def _unwrap(self, doc: dict[str, Any]) -> DataKey:
        if "erased_at" in doc:
            raise KeyErased(doc["key_id"], doc["subject"], doc["erased_at"], doc.get("request_id"))
        with unwrapping(doc["key_id"]):
            material = self.wrapper.unwrap(doc["key_id"], bytes.fromhex(doc["wrapped"]))
        return DataKey(doc["key_id"], doc["subject"], material, doc["created_at"],
                       doc.get("epoch", EPOCH_ALL))

    def data_key(self, subject: str, stream: str | None = None) -> DataKey:
        """The subject's key of the current epoch; made (and stored wrapped) on first use.
        ``stream``, when given, is recorded on the key (retention maps streams to classes)."""
        from evidence_contract.sealing import new_data_key, new_key_id

        if not valid_subject(subject):
            raise ValueError(f"subject {subject!r} is not a subject id")
        if stream is not None and not valid_stream_id(stream):
            raise ValueError(f"stream {stream!r} is not a stream id")
        epoch = epoch_of(self.clock(), self.granularity)
        with self._Locked(self):
            for doc in self._docs():
                if (doc["subject"] == subject and "erased_at" not in doc
                        and doc.get("epoch", EPOCH_ALL) == epoch):
                    if stream is not None and stream not in doc.get("streams", []):
                        doc["streams"] = sorted({*doc.get("streams", []), stream})
                        self._write(self._path(doc["key_id"]), doc)
                    return self._unwrap(doc)
            key_id, material = new_key_id(), new_data_key()
            doc = {"key_id": key_id, "subject": subject, "created_at": now_micros(),
                   "epoch": epoch, "streams": [stream] if stream is not None else [],
                   "kek_id": self.wrapper.kek_id,
                   "wrapped": self.wrapper.wrap(key_id, material).hex()}
            self._write(self._path(key_id), doc)
            return DataKey(key_id, subject, material, doc["created_at"], epoch)

    def key(self, key_id: str) -> DataKey:
        """Any key by id: ``KeyErased`` (with when) once destroyed, ``UnknownKey`` if never."""
        from evidence_contract.envelope import valid_key_id

        if not valid_key_id(key_id):
            raise UnknownKey(f"{key_id!r} is not a key id")
        doc = self._read(self._path(key_id))
        if doc is None:
            raise UnknownKey(f"no key {key_id} in {self.directory}")
        return self._unwrap(doc)

    def destroy(self, subject: str, request_id: str | None = None,
                before_epoch: int | str | None = None) -> list[SubjectState]:
        """Shred every live key of ``subject`` (with ``before_epoch``, only those whose
        epoch ended by then: µs, or an epoch label meaning its start); returns what was
        erased (empty if none). ``LegalHold`` if the subject is held: nothing is shredded."""
        bound = None if before_epoch is None else epoch_bound(before_epoch)
        erased = []
        with self._Locked(self):
            # Checked under the flock that hold() takes too: a hold placed while this runs
            # either is seen here or waits for the shred to finish.
            held = self._active_holds().get(subject)
            if held is not None:
                raise LegalHold(held)
            for doc in list(self._docs()):
                if doc["subject"] != subject or "erased_at" in doc:
                    continue
                epoch = doc.get("epoch", EPOCH_ALL)
                if bound is not None and not ended_by(epoch, bound):
                    continue
                path = self._path(doc["key_id"])
                tomb = {"key_id": doc["key_id"], "subject": subject,
                        "created_at": doc["created_at"], "erased_at": now_micros(),
                        "request_id": request_id, "epoch": epoch,
                        "streams": doc.get("streams", [])}
                # 1. the tombstone, durable, beside the key file; 2. the key file's bytes
                #    overwritten in place and fsync'd; 3. the tombstone renamed over it (the
                #    zeroed inode is freed), the directory fsync'd. A crash between 2 and 3
                #    leaves a zeroed file, read as erased.
                tmp = path.with_name(f".{path.name}.erase.tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    os.write(fd, json.dumps(tomb, sort_keys=True).encode("utf-8"))
                    os.fsync(fd)
                finally:
                    os.close(fd)
                fd = os.open(path, os.O_WRONLY)
                try:
                    size = os.fstat(fd).st_size
                    os.write(fd, b"\x00" * size)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, path)
                _fsync_dir(self.directory)
                erased.append(SubjectState(subject, doc["key_id"], ERASED, doc["created_at"],
                                           tomb["erased_at"], request_id, epoch,
                                           tuple(tomb["streams"])))
        return erased

    def subjects(self) -> list[SubjectState]:
        """Every key, live and erased, by subject then creation time."""
        out = [SubjectState(d["subject"], d["key_id"], ERASED if "erased_at" in d else LIVE,
                            d["created_at"], d.get("erased_at"), d.get("request_id"),
                            d.get("epoch", EPOCH_ALL), tuple(d.get("streams", [])))
               for d in self._docs()]
        return sorted(out, key=lambda s: (s.subject, s.created_at, s.key_id))

    # -- legal holds -----------------------------------------------------------------------
    def _hold_log(self) -> list[dict[str, Any]]:
        doc = self._read(self.directory / _HOLDS)
        return [] if doc is None else list(doc.get("holds", []))

    def _active_holds(self) -> dict[str, Hold]:
        return {h["subject"]: Hold(h["subject"], h["reason"], h["held_at"], h.get("request_id"))
                for h in self._hold_log() if h.get("released_at") is None}

    def hold(self, subject: str, reason: str, request_id: str | None = None) -> Hold:
        """Put ``subject`` under a legal hold (``destroy`` refuses it until released).
        Holding a held subject keeps the first hold and returns it."""
        if not valid_subject(subject):
            raise ValueError(f"subject {subject!r} is not a subject id")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError("a legal hold needs a reason")
        with self._Locked(self):
            log = self._hold_log()
            current = self._active_holds().get(subject)
            if current is not None:
                return current
            entry = {"subject": subject, "reason": reason, "request_id": request_id,
                     "held_at": now_micros()}
            self._write(self.directory / _HOLDS, {"holds": [*log, entry]})
            return Hold(subject, reason, entry["held_at"], request_id)

    def release(self, subject: str, request_id: str | None = None) -> Hold | None:
        """Lift the subject's legal hold; returns the hold lifted (``None`` if none)."""
        with self._Locked(self):
            log = self._hold_log()
            for entry in log:
                if entry["subject"] == subject and entry.get("released_at") is None:
                    entry["released_at"] = now_micros()
                    entry["release_request_id"] = request_id
                    self._write(self.directory / _HOLDS, {"holds": log})
                    return Hold(subject, entry["reason"], entry["held_at"],
                                entry.get("request_id"))
        return None

    def holds(self) -> list[Hold]:
        """The subjects under a legal hold now, by subject."""
        return sorted(self._active_holds().values(), key=lambda h: h.subject)
