"""A local, durable, append-only spool for captures Kafka has not acknowledged.

A spool *root* (``Recorder(spool_dir=...)``, ``EVIDENCE_SPOOL_DIR``, or
``~/.local/state/evidence-store/spool``) holds one spool directory per live Recorder, so every
process of a multi-worker server has its own::

    <root>/<start-micros hex>-<pid>-<random>/   a Recorder's spool (flock'd while it runs)
    <root>/undeliverable/<same name>/           captures Kafka refused for good, with REASONS
    <root>/.new-*                               a spool being created (ignored by others)

A spool whose LOCK nobody holds belongs to a process that ended (closed, crashed or killed):
an *orphan*. :func:`claim_orphans` takes each one's lock, so exactly one live Recorder adopts
it, resends it oldest first and then deletes it (:meth:`Spool.remove`). A new spool is made
under a ``.new-`` name and renamed into place only once its lock is held, so no one can
mistake it for an orphan in between.

Files in one spool directory:

    LOCK                   flock'd while a Recorder has the spool open (one owner at a time)
    HEAD                   "<generation> <offset>\\n": first byte not yet acknowledged
    spool-<gen>.log        frames, appended: fdatasync'd before ``append_many`` returns, or,
                           by ``write_many``, by its caller's later fsync (``sync_handle``)
    spool-<gen>.torn-<off> a torn or corrupt tail found at open, kept for inspection

A frame is ``be32 length | be32 crc32(payload) | payload`` and the payload is
``be16 len(key) | key | value``. Appends only ever go to the end; acknowledging moves HEAD
forward (written to a temp file, fsync'd, renamed, directory fsync'd), so an entry is given up
only after Kafka acknowledged it. A crash between a delivery and its HEAD update resends that
entry: a duplicate event_id, which the writer absorbs. When the acknowledged prefix is large
(or everything is acknowledged and the file is no longer small) the unacknowledged rest is
copied into a new generation and HEAD switched to it in one rename; the old file is deleted
afterwards.

Acknowledging is two steps, so that a thread appending never waits for HEAD's fsyncs:
:meth:`Spool.release` gives entries up in memory (and :meth:`Spool.compact` switches
generations when due), both under the owner's lock, beside appends; :meth:`Spool.record_head`
then writes HEAD outside it: on the thread that released, or on another (the journal's
syncer) from a position read under the lock. HEAD's writes are serialised with a
compaction's, and a position a compaction has overtaken is never written. An entry released
but not yet recorded (HEAD's write failed, or a crash came first) is only resent after a
reopen; the next record writes the newest head.

At open the frames after HEAD are checked. The first one that is short or fails its CRC ends
the valid data: the bytes from there on are moved to a ``.torn-`` file and the log truncated,
so a crash mid-append is never replayed as garbage.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import shutil
import struct
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from .errors import SpoolError, SpoolLockedError

__all__ = ["MAX_FRAME", "Spool", "SpoolEntry", "claim_orphans", "datasync", "keep_undeliverable",
           "new_spool", "scan", "spool_dirs"]

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">II")
_KEY_LEN = struct.Struct(">H")
MAX_FRAME = 64 * 1024 * 1024
"""Longest payload accepted; a larger length field is read as corruption."""
_COMPACT_BYTES = 64 * 1024 * 1024
"""An acknowledged prefix this large is dropped (a new generation) even while entries wait."""
_IDLE_COMPACT_BYTES = 4 * 1024 * 1024
"""A fully acknowledged file this large is dropped. Not at every acknowledgement: a new
generation costs four fsyncs under the owner's lock, which an appending call would wait for
(a lone caller did, at every 100 ms acknowledgement: its added p99)."""


@dataclass(frozen=True)
class SpoolEntry:
    """One spooled message, as :meth:`Spool.peek` returns it."""

    key: bytes
    value: bytes


def _frame(key: bytes, value: bytes) -> bytes:
    payload = _KEY_LEN.pack(len(key)) + key + value
    if len(payload) > MAX_FRAME:
        raise SpoolError(f"a {len(payload)}-byte capture is larger than the spool's {MAX_FRAME}")
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


_datasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


def datasync(fd: int) -> None:
    """fdatasync ``fd`` (fsync where there is none): its data and size are on disk."""
    _datasync(fd)


def fsync_dir(path: Path) -> None:
    """fsync a directory, so a rename or create in it is durable (shared by the client's
    other on-disk stores and the witness)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    """Append-only durable queue of (key, value) pairs. Not thread-safe: its owner serialises
    calls with a lock of its own, except :meth:`record_head`, which may run beside
    :meth:`append_many` on the thread that releases and compacts (the only one that does).

    ``Spool(directory)`` does no I/O; :meth:`open` takes the lock and recovers.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.torn_bytes = 0
        self._gen = 0
        self._head = 0
        self._size = 0
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self._index: deque[tuple[int, int]] = deque()  # (start, end) of unacked frames
        self._torn = False  # a failed append may have left a partial frame past _size
        self._recorded = (0, 0)  # (generation, offset) that HEAD says on disk
        # Serialises HEAD's writes: a compaction's (under the owner's lock) and those of a
        # thread that records it outside that lock (record_head with ``at``).
        self._head_lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------

    def open(self, *, create: bool = True) -> "Spool":
        """Take the directory's lock and recover it. ``create=False`` (adopting an orphan)
        neither creates the directory nor accepts one deleted while we waited for it."""
        try:
            if create:
                self.directory.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.directory / "LOCK",
                                    os.O_RDWR | (os.O_CREAT if create else 0), 0o600)
        except OSError as e:
            raise SpoolError(f"cannot open spool directory {self.directory}: {e}") from e
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not create:
                # The previous holder may have removed the directory between our open and
                # our flock: then our LOCK is an unlinked file and the spool is gone.
                if os.stat(self.directory / "LOCK").st_ino != os.fstat(self._lock_fd).st_ino:
                    raise FileNotFoundError(self.directory / "LOCK")
        except OSError as e:
            os.close(self._lock_fd)
            self._lock_fd = None
            if isinstance(e, FileNotFoundError):
                raise SpoolError(f"spool {self.directory} was removed") from e
            raise SpoolLockedError(f"spool {self.directory} is in use by another Recorder") from e
        try:
            self._recover()
        except OSError as e:
            self.close()
            raise SpoolError(f"cannot recover spool {self.directory}: {e}") from e
        return self

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def remove(self) -> None:
        """Delete this (empty or given-up) spool directory, then release its lock."""
        try:
            shutil.rmtree(self.directory)
        except OSError as e:
            log.warning("cannot remove spool %s: %s", self.directory, e)
        self.close()

    def __enter__(self) -> "Spool":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _log_path(self, gen: int) -> Path:
        return self.directory / f"spool-{gen:08d}.log"

    def _read_head(self) -> tuple[int, int]:
        try:
            gen, off = (self.directory / "HEAD").read_text().split()
            return int(gen), int(off)
        except FileNotFoundError:
            return 0, 0
        except ValueError as e:
            raise SpoolError(f"spool HEAD in {self.directory} is unreadable") from e

    def _write_head(self, gen: int, offset: int) -> None:
        tmp = self.directory / "HEAD.tmp"
        with open(tmp, "w") as f:
            f.write(f"{gen} {offset}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / "HEAD")
        fsync_dir(self.directory)
        self._recorded = (gen, offset)

    def _recover(self) -> None:
        gen, head = self._read_head()
        path = self._log_path(gen)
        # Files of other generations are either fully acknowledged (old) or a compaction
        # that crashed before HEAD switched to it (new, a copy of entries still in ours).
        for p in self.directory.glob("spool-*.log"):
            if p != path:
                p.unlink()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        size = os.fstat(self._fd).st_size
        self._gen, self._head = gen, min(head, size)
        self._recorded = (gen, head)
        pos = self._head
        while pos < size:
            header = os.pread(self._fd, _HEADER.size, pos)
            if len(header) < _HEADER.size:
                break
            length, crc = _HEADER.unpack(header)
            if length > MAX_FRAME or length < _KEY_LEN.size or pos + _HEADER.size + length > size:
                break
            payload = os.pread(self._fd, length, pos + _HEADER.size)
            if zlib.crc32(payload) != crc:
                break
            end = pos + _HEADER.size + length
            self._index.append((pos, end))
            pos = end
        if pos < size:
            self._quarantine(pos, size)
        self._size = pos

    def _quarantine(self, pos: int, size: int) -> None:
        assert self._fd is not None
        torn = self.directory / f"spool-{self._gen:08d}.torn-{pos}"
        with open(torn, "wb") as f:
            f.write(os.pread(self._fd, size - pos, pos))
            f.flush()
            os.fsync(f.fileno())
        os.ftruncate(self._fd, pos)
        os.fsync(self._fd)
        self.torn_bytes += size - pos
        log.error("spool %s: %d bytes after offset %d are torn or corrupt; moved to %s and not "
                  "replayed", self.directory, size - pos, pos, torn)

    # -- queue -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._index)

    @property
    def pending_bytes(self) -> int:
        return self._size - self._head

    def append(self, key: bytes, value: bytes) -> None:
        self.append_many([(key, value)])

    def append_many(self, items: list[tuple[bytes, bytes]]) -> None:
        """Append entries in order and fsync once; they are durable when this returns."""
        self._append(items, sync=True)

    def write_many(self, items: list[tuple[bytes, bytes]]) -> None:
        """Append entries in order without waiting for the disk: they are readable at once
        and durable once an fsync of the file that starts after this returns has returned
        (:meth:`sync_handle`, or the next :meth:`append_many`)."""
        self._append(items, sync=False)

    def sync_handle(self) -> int:
        """A duplicate of the log's descriptor, for an fsync (:func:`datasync`) outside the
        lock the appends take, which the caller closes. A compaction meanwhile replaces the
        file, fsync'd whole, so an fsync of the old one is harmless then."""
        if self._fd is None:
            raise SpoolError("spool is not open")
        return os.dup(self._fd)

    def _append(self, items: list[tuple[bytes, bytes]], sync: bool) -> None:
        if self._fd is None:
            raise SpoolError("spool is not open")
        if self._torn:
            self._cut_torn()
        frames = [_frame(k, v) for k, v in items]
        data = b"".join(frames)
        try:
            written = 0
            while written < len(data):
                written += os.write(self._fd, data[written:])
            # fdatasync, as a database's log does: the data and the file's new size (what
            # reading it back needs), without the timestamps a full fsync also writes.
            if sync:
                _datasync(self._fd)
        except OSError as e:
            # A partial frame may be on disk, past the end the index knows. The file is open
            # O_APPEND, so the next frames would land after it while the index placed them at
            # the known end: every later read would be out of frame (a chaos run's "disk
            # full" resent 190 garbage captures and lost the real ones). Cut it off now, or
            # before the next append; a crash in between leaves it to the next open's
            # quarantine.
            self._torn = True
            with contextlib.suppress(SpoolError):
                self._cut_torn()
            raise SpoolError(f"cannot append to spool {self.directory}: {e}") from e
        pos = self._size
        for f in frames:
            self._index.append((pos, pos + len(f)))
            pos += len(f)
        self._size = pos

    def _cut_torn(self) -> None:
        """Truncate the file back to its last whole frame (after a failed append)."""
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, self._size)
        except OSError as e:
            raise SpoolError(f"cannot cut a torn append off spool {self.directory}: {e}") from e
        self._torn = False

    def peek(self, max_entries: int = 500, max_bytes: int = 16 * 1024 * 1024) -> list[SpoolEntry]:
        """The oldest unacknowledged entries, in append order (at least one if any)."""
        if self._fd is None:
            raise SpoolError("spool is not open")
        out: list[SpoolEntry] = []
        total = 0
        for start, end in self._index:
            if out and (len(out) >= max_entries or total + end - start > max_bytes):
                break
            payload = os.pread(self._fd, end - start - _HEADER.size, start + _HEADER.size)
            (klen,) = _KEY_LEN.unpack_from(payload)
            out.append(SpoolEntry(payload[2:2 + klen], payload[2 + klen:]))
            total += end - start
        return out

    def ack(self, count: int) -> None:
        """Give up the ``count`` oldest entries (Kafka has acknowledged them) and record it:
        :meth:`release`, then :meth:`compact` when due, else :meth:`record_head`. Raises
        SpoolError when the disk refuses the record; the entries are given up all the same
        (a later ack records them; a crash before that resends them)."""
        self.release(count)
        if self.compaction_due():
            self.compact()
        else:
            self.record_head()

    def release(self, count: int) -> None:
        """Give up the ``count`` oldest entries in memory: :meth:`peek` no longer returns
        them. HEAD still names them until :meth:`record_head` or :meth:`compact`."""
        if self._fd is None:
            raise SpoolError("spool is not open")
        for _ in range(min(count, len(self._index))):
            self._index.popleft()
        self._head = self._index[0][0] if self._index else self._size

    @property
    def head_behind(self) -> bool:
        """HEAD on disk names entries already released."""
        return self._recorded != (self._gen, self._head)

    def compaction_due(self) -> bool:
        return (self._head >= _COMPACT_BYTES
                or (not self._index and self._head >= _IDLE_COMPACT_BYTES))

    @property
    def head_position(self) -> tuple[int, int]:
        """(generation, offset) of the first entry not released: what HEAD should say. Read
        under the owner's lock by a thread that records it outside (:meth:`record_head`)."""
        return self._gen, self._head

    def record_head(self, at: tuple[int, int] | None = None) -> None:
        """Write HEAD to say what was released (nothing to do when it already does).

        ``at``: the :attr:`head_position` read earlier under the owner's lock, by a thread
        that writes HEAD outside it (the journal's syncer). It is not written when a
        compaction has moved to another generation since (that compaction recorded a newer
        HEAD itself), nor when HEAD already says a later offset."""
        if self._fd is None:
            raise SpoolError("spool is not open")
        with self._head_lock:
            gen, head = at if at is not None else (self._gen, self._head)
            recorded = self._recorded
            if (gen, head) == recorded or gen != self._gen or (
                    recorded[0] == gen and recorded[1] > head):
                return
            try:
                self._write_head(gen, head)
            except OSError as e:
                raise SpoolError(f"cannot record acknowledgement in spool {self.directory}: "
                                 f"{e}") from e

    def compact(self) -> None:
        """Move what was not released into a new generation and record HEAD there. On
        failure nothing changed on disk (the next ack tries again)."""
        if self._fd is None:
            raise SpoolError("spool is not open")
        try:
            self._compact()
        except OSError as e:
            raise SpoolError(f"cannot compact spool {self.directory}: {e}") from e

    def _compact(self) -> None:
        # 1. copy the unacknowledged rest into the next generation and make it durable;
        # 2. switch HEAD to it (the commit point: a crash before leaves the old state whole);
        # 3. only then delete the old file.
        assert self._fd is not None
        old_fd, old_path, new_gen = self._fd, self._log_path(self._gen), self._gen + 1
        rest = os.pread(old_fd, self._size - self._head, self._head) if self._index else b""
        new_fd = os.open(self._log_path(new_gen), os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND,
                         0o600)
        try:
            written = 0
            while written < len(rest):
                written += os.write(new_fd, rest[written:])
            os.fsync(new_fd)
            fsync_dir(self.directory)
        except BaseException:
            os.close(new_fd)
            raise
        # HEAD's switch and the generation's, as one step to a thread recording HEAD
        # outside the owner's lock: it writes before both or sees the new generation.
        with self._head_lock:
            try:
                self._write_head(new_gen, 0)
            except BaseException:
                os.close(new_fd)
                raise
            shift = self._head
            self._fd, self._gen, self._size, self._head = new_fd, new_gen, self._size - shift, 0
        self._index = deque((s - shift, e - shift) for s, e in self._index)
        os.close(old_fd)
        old_path.unlink(missing_ok=True)


UNDELIVERABLE = "undeliverable"


def _is_spool(d: Path) -> bool:
    return (d.is_dir() and not d.name.startswith(".") and d.name != UNDELIVERABLE
            and (d / "LOCK").exists())


def spool_dirs(root: str | os.PathLike[str]) -> list[Path]:
    """The spool directories under ``root``, oldest first (by name: start time leads it)."""
    try:
        return sorted(d for d in Path(root).iterdir() if _is_spool(d))
    except FileNotFoundError:
        return []


def new_spool(root: str | os.PathLike[str]) -> Spool:
    """Create, lock and open a fresh spool directory of this process under ``root``."""
    root = Path(root)
    name = f"{time.time_ns() // 1000:014x}-{os.getpid()}-{secrets.token_hex(4)}"
    tmp = root / f".new-{name}"
    try:
        tmp.mkdir(parents=True)
    except OSError as e:
        raise SpoolError(f"cannot create a spool under {root}: {e}") from e
    spool = Spool(tmp).open()
    try:
        os.rename(tmp, root / name)
        fsync_dir(root)
    except OSError as e:
        spool.remove()
        raise SpoolError(f"cannot create a spool under {root}: {e}") from e
    spool.directory = root / name
    return spool


def claim_orphans(root: str | os.PathLike[str], exclude: Path | None = None) -> list[Spool]:
    """Lock and open every spool under ``root`` whose owner is gone, oldest first.

    Empty orphans are removed on the spot; the others are returned open (their lock held) for
    the caller to resend and then :meth:`Spool.remove`.
    """
    out: list[Spool] = []
    for d in spool_dirs(root):
        if exclude is not None and d == exclude:
            continue
        try:
            spool = Spool(d).open(create=False)
        except SpoolError:
            continue  # alive (locked), or just removed by another adopter
        if len(spool) == 0:
            spool.remove()
        else:
            out.append(spool)
    return out


def keep_undeliverable(root: str | os.PathLike[str], name: str,
                       items: list[tuple[bytes, bytes, str]]) -> None:
    """Append (key, value, reason) captures Kafka refused for good to
    ``<root>/undeliverable/<name>/``: the frames as in a spool, one REASONS line each."""
    d = Path(root) / UNDELIVERABLE / name
    with Spool(d) as spool:
        spool.append_many([(k, v) for k, v, _ in items])
    with open(d / "REASONS", "a", encoding="utf-8") as f:
        for _, _, reason in items:
            f.write(reason.replace("\n", " ") + "\n")
        f.flush()
        os.fsync(f.fileno())


def scan(directory: str | os.PathLike[str]) -> list[SpoolEntry]:
    """The unacknowledged entries of a spool, or of every spool under a spool root (oldest
    spool first), read-only and without taking locks (for inspection; a concurrent append may
    or may not be seen). Stops at a torn tail."""
    d = Path(directory)
    if not (d / "LOCK").exists() and d.is_dir():
        return [e for sub in spool_dirs(d) for e in scan(sub)]
    gen, head = Spool(d)._read_head() if (d / "HEAD").exists() else (0, 0)
    try:
        data = (d / f"spool-{gen:08d}.log").read_bytes()
    except FileNotFoundError:
        return []
    out, pos = [], head
    while pos + _HEADER.size <= len(data):
        length, crc = _HEADER.unpack_from(data, pos)
        payload = data[pos + _HEADER.size:pos + _HEADER.size + length]
        if length > MAX_FRAME or len(payload) != length or zlib.crc32(payload) != crc:
            break
        (klen,) = _KEY_LEN.unpack_from(payload)
        out.append(SpoolEntry(payload[2:2 + klen], payload[2 + klen:]))
        pos += _HEADER.size + length
    return out
