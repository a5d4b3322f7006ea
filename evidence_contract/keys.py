"""The key store's port: what the gateway, the Replayer and (later) erasure need of a store of
per-subject data keys. Pure: a Protocol, values and errors; implementations do the I/O.

    class KeyStore(Protocol):
        data_key(subject, stream=None) -> DataKey   the subject's key of the current epoch,
                                                     created on first use; records the stream
        key(key_id)         -> DataKey         any key by id; KeyErased / UnknownKey otherwise
        destroy(subject, request_id=None, before_epoch=None) -> list[SubjectState]
                                               shred every live key of it (or only the keys
                                               whose epoch ended by ``before_epoch``);
                                               LegalHold if the subject is held
        subjects()          -> list[SubjectState]                 live and erased, by subject
        hold(subject, reason, request_id=None) -> Hold             a legal hold: no destroy
        release(subject, request_id=None) -> Hold | None          lift it
        holds()             -> list[Hold]                         the subjects held now

**Epochs.** A subject has one live data key per *epoch*, a UTC calendar period named by a
label: ``"2024-05-17"`` (granularity ``day``), ``"2024-05"`` (``month``), or ``"all"`` for keys
made before epochs existed (they never end, so retention never shreds them; erasing the
subject does). :func:`epoch_of` names the epoch of a time, :func:`epoch_end` says when one
ends; both are pure, so the gateway's key cache, the stores and the shredder agree on them.

Implementations: ``evidence_client.keystore.FileKeyStore`` (a directory of 0600 files, for
the devstack and tests) and ``server.keystore.PgKeyStore`` (PostgreSQL, server side). Both
keep data keys wrapped by a :class:`KeyWrapper`; ``evidence_contract.sealing.LocalKek`` wraps
with a local key-encryption key. The seam for a KMS or Vault is a ``KeyWrapper`` whose
``wrap`` / ``unwrap`` call the service (AWS KMS ``Encrypt`` / ``Decrypt`` with the key id as
encryption context; Vault transit ``encrypt`` / ``decrypt``), so the KEK never leaves it.

Destroying a subject really destroys: the wrapped key is overwritten and unlinked (file) or
its row deleted (PostgreSQL), and what stays is a tombstone (key id, subject, when, under
which request) so later lookups answer :class:`KeyErased` with ``erased_at``.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterator, Protocol, runtime_checkable

from .errors import EvidenceError
from .model import iso_micros

__all__ = [
    "DAY",
    "EPOCH_ALL",
    "EPOCH_GRANULARITIES",
    "ERASED",
    "LIVE",
    "MONTH",
    "DataKey",
    "Hold",
    "KeyErased",
    "KeyStore",
    "KeyStoreError",
    "KeyWrapper",
    "LegalHold",
    "SubjectState",
    "UnknownKey",
    "ended_by",
    "epoch_bound",
    "epoch_end",
    "epoch_of",
    "epoch_start",
    "parse_granularity",
    "unwrapping",
    "valid_epoch",
    "valid_subject",
]

LIVE = "live"
ERASED = "erased"

MAX_SUBJECT_BYTES = 256

DAY, MONTH = "day", "month"
EPOCH_GRANULARITIES = (DAY, MONTH)
EPOCH_ALL = "all"
"""The epoch of a key made before keys had epochs: it never ends."""

_DAY_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_MONTH_RE = re.compile(r"\d{4}-\d{2}")
_UNIX = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _micros(t: datetime) -> int:
    d = t - _UNIX
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def parse_granularity(text: str | None) -> str:
    """``day`` or ``month`` (default ``day``); ``ValueError`` for anything else."""
    g = (text or DAY).strip().lower()
    if g not in EPOCH_GRANULARITIES:
        raise ValueError(f"key epoch must be one of {EPOCH_GRANULARITIES}, not {text!r}")
    return g


def epoch_of(micros: int, granularity: str = DAY) -> str:
    """The label of the UTC epoch that contains ``micros`` (µs since the Unix epoch)."""
    t = datetime.fromtimestamp(micros / 1_000_000, tz=timezone.utc)
    if granularity == DAY:
        return t.strftime("%Y-%m-%d")
    if granularity == MONTH:
        return t.strftime("%Y-%m")
    raise ValueError(f"unknown epoch granularity {granularity!r}")


def _bounds(epoch: str) -> tuple[datetime, datetime] | None:
    if epoch == EPOCH_ALL:
        return None
    try:
        if _DAY_RE.fullmatch(epoch):
            start = datetime.strptime(epoch, "%Y-%m-%d").replace(tzinfo=timezone.utc)
            return start, datetime.fromordinal(start.toordinal() + 1).replace(tzinfo=timezone.utc)
        if _MONTH_RE.fullmatch(epoch):
            start = datetime.strptime(epoch, "%Y-%m").replace(tzinfo=timezone.utc)
            y, m = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
            return start, start.replace(year=y, month=m)
    except ValueError:
        pass
    raise ValueError(f"{epoch!r} is not an epoch (YYYY-MM-DD, YYYY-MM or {EPOCH_ALL!r})")


def valid_epoch(epoch: object) -> bool:
    """An epoch label: ``YYYY-MM-DD``, ``YYYY-MM`` or ``all``."""
    if not isinstance(epoch, str):
        return False
    try:
        _bounds(epoch)
    except ValueError:
        return False
    return True


def epoch_start(epoch: str) -> int | None:
    """When the epoch began (UTC µs); ``None`` for ``all``."""
    b = _bounds(epoch)
    return None if b is None else _micros(b[0])


def epoch_end(epoch: str) -> int | None:
    """When the epoch ends (UTC µs, exclusive); ``None`` for ``all``, which never ends."""
    b = _bounds(epoch)
    return None if b is None else _micros(b[1])


def epoch_bound(before_epoch: int | str) -> int:
    """The bound of ``destroy(..., before_epoch=)`` as UTC µs: an int is a time, a label
    the start of that epoch (so ``before_epoch="2024-06"`` shreds epochs that ended by
    June 2024 began)."""
    if isinstance(before_epoch, bool) or not isinstance(before_epoch, (int, str)):
        raise TypeError(f"before_epoch must be µs or an epoch label, not {before_epoch!r}")
    if isinstance(before_epoch, int):
        return before_epoch
    start = epoch_start(before_epoch)
    if start is None:
        raise ValueError("before_epoch cannot be 'all' (it never ends)")
    return start


def ended_by(epoch: str, bound: int) -> bool:
    """Whether the epoch ended at or before ``bound`` (UTC µs); ``all`` never does."""
    end = epoch_end(epoch)
    return end is not None and end <= bound


def valid_subject(s: object) -> bool:
    """A subject id: a non-empty str of at most 256 UTF-8 bytes, no control characters."""
    return (isinstance(s, str) and 0 < len(s.encode("utf-8", "surrogatepass")) <= MAX_SUBJECT_BYTES
            and s.isprintable())


class KeyStoreError(EvidenceError):
    """The key store cannot answer (unreadable, misconfigured, unreachable)."""


class UnknownKey(KeyStoreError, LookupError):
    """No key with this id was ever in the store."""


class LegalHold(KeyStoreError):
    """The subject is under a legal hold: nothing of it may be destroyed until released."""

    def __init__(self, hold: "Hold") -> None:
        self.hold = hold
        self.subject = hold.subject
        super().__init__(f"subject {hold.subject!r} is under a legal hold since "
                         f"{iso_micros(hold.held_at)} (reason: {hold.reason}"
                         f"{f', request {hold.request_id}' if hold.request_id else ''}); "
                         f"release it first")


class KeyErased(KeyStoreError, LookupError):
    """The key was destroyed: what it sealed is unrecoverable. ``erased_at`` is UTC µs."""

    def __init__(self, key_id: str, subject: str, erased_at: int, request_id: str | None) -> None:
        self.key_id, self.subject = key_id, subject
        self.erased_at, self.request_id = erased_at, request_id
        super().__init__(f"key {key_id} of subject {subject!r} was erased at "
                         f"{iso_micros(erased_at)}"
                         f"{f' under request {request_id}' if request_id else ''}")


@dataclass(frozen=True, slots=True)
class DataKey:
    """A subject's data key, unwrapped. ``material`` never shows in ``repr``."""

    key_id: str
    subject: str
    material: bytes = field(repr=False)
    created_at: int = 0
    epoch: str = EPOCH_ALL

    @property
    def expires_at(self) -> int | None:
        """When this key stops being the subject's current key (its epoch's end, UTC µs);
        ``None`` for ``all``. A cache must not hand it out for new content after that."""
        return epoch_end(self.epoch)


@dataclass(frozen=True, slots=True)
class SubjectState:
    """One key of a subject: live, or erased (with when and under which request)."""

    subject: str
    key_id: str
    state: str
    created_at: int
    erased_at: int | None = None
    request_id: str | None = None
    epoch: str = EPOCH_ALL
    streams: tuple[str, ...] = ()
    """The streams the key sealed content of (as ``data_key(subject, stream=)`` was told)."""


@dataclass(frozen=True, slots=True)
class Hold:
    """A legal hold on a subject: who put it (request id), why, when (UTC µs)."""

    subject: str
    reason: str
    held_at: int
    request_id: str | None = None


@runtime_checkable
class KeyWrapper(Protocol):
    """Wraps and unwraps data keys with a key-encryption key it holds (locally or remote)."""

    kek_id: str

    def wrap(self, key_id: str, data_key: bytes) -> bytes: ...

    def unwrap(self, key_id: str, wrapped: bytes) -> bytes: ...


@contextmanager
def unwrapping(key_id: str) -> Iterator[None]:
    """Around a store's unwrapping of the stored key ``key_id``: whatever fails (a wrong KEK's
    ``OpenError``, a KMS error, a damaged stored key) is a ``KeyStoreError`` naming the key,
    the same from every implementation."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - OpenError, a KMS error, a bad stored key
        raise KeyStoreError(f"key {key_id} does not unwrap: {e}") from e


@runtime_checkable
class KeyStore(Protocol):
    """Per-subject data keys (see the module docstring)."""

    def data_key(self, subject: str, stream: str | None = None) -> DataKey: ...

    def key(self, key_id: str) -> DataKey: ...

    def destroy(self, subject: str, request_id: str | None = None,
                before_epoch: int | str | None = None) -> list[SubjectState]: ...

    def subjects(self) -> list[SubjectState]: ...

    def hold(self, subject: str, reason: str, request_id: str | None = None) -> Hold: ...

    def release(self, subject: str, request_id: str | None = None) -> Hold | None: ...

    def holds(self) -> list[Hold]: ...
