"""Retention classes and the scheduled shredder (issue 13, phase 2).

A retention file (``EVIDENCE_RETENTION_FILE`` of the shredder, ``evidence retention``) is
JSON (YAML too, if PyYAML is installed):

    {"classes":  {"short": {"keep_days": 30}, "long": {"keep_days": 3650}},
     "streams":  {"acme:*": "short", "acme:audit": "long"},
     "subjects": {"user-8d1f": "long"},
     "default":  null}

A key's class comes from, in order: the subject's override (``subjects``; ``null`` there
means kept forever); else the streams the key sealed content of (the key store records them
at ``data_key(subject, stream=)`` time), each stream's class being its exact entry, else the
longest matching glob pattern (``fnmatch``), else ``default``. A key used in several streams
of different classes takes the *longest* keep, and a stream with no class (``null``) keeps
the key forever: shredding a key shreds every stream it sealed, and one stream's retention
must not cut another's short. A key with no stream recorded takes ``default``.

The shredder destroys a key when its epoch ended more than ``keep_days`` ago (due at
``epoch_end + keep_days``), one erasure per key through :func:`server.erasure.erase_subject`
with request id ``retention:<class>:<epoch>:<key id>`` (the writer receipts a request id
once, so one per key; the key id names no one and is on the receipt anyway). The destroy is
bounded (``before_epoch=`` the epoch's end), so the subject's newer keys stay live. Held
subjects are skipped, logged and counted; keys of epoch ``all`` (made before epochs) never
end and are never shredded here. A key erased by someone else between the plan and its
shredding is skipped (nothing left to erase). :func:`plan` is pure (states, holds, now in;
what is due out); :func:`run_once` acts on it, at the clock's time or at a given ``now``
(``evidence retention run --dry-run --now T``: what would be shredded at T, each key named).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from evidence_contract import iso_micros, now_micros
from evidence_contract.errors import EvidenceError
from evidence_contract.keys import (
    EPOCH_ALL,
    ERASED,
    LIVE,
    Hold,
    KeyStore,
    KeyStoreError,
    LegalHold,
    SubjectState,
    epoch_end,
)
from server.logs import event_logger

__all__ = [
    "DAY_US",
    "Due",
    "Plan",
    "RetentionClass",
    "RetentionConfigError",
    "RetentionPolicy",
    "RunResult",
    "load_policy",
    "parse_policy",
    "plan",
    "request_id_for",
    "run_once",
    "serve",
    "status",
]

log = event_logger("evidence.retention")

DAY_US = 86_400_000_000
_CLASS_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_TOP_KEYS = {"classes", "streams", "subjects", "default"}
REQUEST_PREFIX = "retention:"


class RetentionConfigError(EvidenceError, ValueError):
    """The retention file is missing, unreadable or not a valid policy (says where)."""


@dataclass(frozen=True, slots=True)
class RetentionClass:
    name: str
    keep_days: int

    @property
    def keep_us(self) -> int:
        return self.keep_days * DAY_US


@dataclass(frozen=True)
class RetentionPolicy:
    """A parsed, validated retention file (:func:`parse_policy`)."""

    classes: Mapping[str, RetentionClass]
    streams: Mapping[str, str | None] = field(default_factory=dict)   # pattern -> class
    subjects: Mapping[str, str | None] = field(default_factory=dict)  # subject -> class
    default: str | None = None
    source: str = "<policy>"
    digest: str = ""  # SHA-256 of the file's bytes: which policy a run used

    def class_of_stream(self, stream: str) -> RetentionClass | None:
        """The stream's class: its exact entry, else the longest matching pattern (ties by
        pattern text), else the default; ``None``: kept forever."""
        if stream in self.streams:
            name = self.streams[stream]
        else:
            hits = sorted((p for p in self.streams if fnmatch.fnmatchcase(stream, p)),
                          key=lambda p: (-len(p), p))
            name = self.streams[hits[0]] if hits else self.default
        return None if name is None else self.classes[name]

    def class_of(self, key: SubjectState) -> RetentionClass | None:
        """The key's class (module docstring); ``None``: kept forever."""
        if key.subject in self.subjects:
            name = self.subjects[key.subject]
            return None if name is None else self.classes[name]
        if not key.streams:
            return None if self.default is None else self.classes[self.default]
        found = [self.class_of_stream(s) for s in key.streams]
        if any(c is None for c in found):
            return None
        return max(found, key=lambda c: (c.keep_days, c.name))  # type: ignore[union-attr]


def _where(source: str, what: str) -> str:
    return f"retention file {source}: {what}"


def _class_ref(doc_classes: Mapping[str, Any], value: Any, source: str, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in doc_classes:
        raise RetentionConfigError(_where(source, f"{where} names class {value!r}, which is not "
                                   f"in classes ({', '.join(sorted(doc_classes)) or 'none'})"))
    return value


def parse_policy(doc: Any, source: str = "<policy>", digest: str = "") -> RetentionPolicy:
    """Validate a retention document; :class:`RetentionConfigError` says what and where."""
    if not isinstance(doc, dict):
        raise RetentionConfigError(_where(source, "must be an object with \"classes\""))
    extra = set(doc) - _TOP_KEYS
    if extra:
        raise RetentionConfigError(_where(source, f"unknown keys {sorted(extra)} (expected "
                                          f"{sorted(_TOP_KEYS)})"))
    raw_classes = doc.get("classes")
    if not isinstance(raw_classes, dict) or not raw_classes:
        raise RetentionConfigError(_where(source, "\"classes\" must be a non-empty object of "
                                          "name -> {\"keep_days\": N}"))
    classes = {}
    for name, spec in raw_classes.items():
        if not _CLASS_RE.fullmatch(name):
            raise RetentionConfigError(_where(source, f"class name {name!r} must be 1-64 of "
                                              "[A-Za-z0-9_.-] (it goes into request ids)"))
        if not isinstance(spec, dict) or set(spec) != {"keep_days"}:
            raise RetentionConfigError(_where(source, f"class {name!r} must be exactly "
                                              "{\"keep_days\": N}"))
        days = spec["keep_days"]
        if not isinstance(days, int) or isinstance(days, bool) or not 0 <= days <= 36_500:
            raise RetentionConfigError(_where(source, f"class {name!r}: keep_days must be an "
                                              f"integer from 0 to 36500, not {days!r}"))
        classes[name] = RetentionClass(name, days)
    streams = doc.get("streams", {})
    if not isinstance(streams, dict):
        raise RetentionConfigError(_where(source, "\"streams\" must be an object of "
                                          "stream pattern -> class (or null)"))
    for pattern, value in streams.items():
        if not pattern or not re.fullmatch(r"[A-Za-z0-9._:*?\[\]!-]{1,128}", pattern):
            raise RetentionConfigError(_where(source, f"stream pattern {pattern!r} is not a "
                                              "stream id or glob of one"))
        _class_ref(raw_classes, value, source, f"stream pattern {pattern!r}")
    subjects = doc.get("subjects", {})
    if not isinstance(subjects, dict):
        raise RetentionConfigError(_where(source, "\"subjects\" must be an object of "
                                          "subject -> class (or null)"))
    for subject, value in subjects.items():
        _class_ref(raw_classes, value, source, f"subject {subject!r}")
    default = _class_ref(raw_classes, doc.get("default"), source, "\"default\"")
    return RetentionPolicy(classes, dict(streams), dict(subjects), default, source, digest)


def load_policy(path: str | os.PathLike[str]) -> RetentionPolicy:
    """Read and validate a retention file (JSON; ``.yaml``/``.yml`` with PyYAML)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise RetentionConfigError(_where(str(p), str(e))) from e
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError as e:
                raise RetentionConfigError(_where(str(p), "YAML needs PyYAML; use JSON")) from e
            doc = yaml.safe_load(raw)
        else:
            doc = json.loads(raw)
    except RetentionConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - JSONDecodeError, YAMLError
        raise RetentionConfigError(_where(str(p), f"not valid: {e}")) from e
    return parse_policy(doc, str(p), hashlib.sha256(raw).hexdigest())


# -- the plan (pure) ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Due:
    """A live key under a retention class, and when it is due for shredding (UTC µs)."""

    cls: RetentionClass
    key: SubjectState
    due_at: int


@dataclass
class Plan:
    due: list[Due] = field(default_factory=list)       # shred now (oldest epoch first)
    held: list[Due] = field(default_factory=list)      # due, but the subject is held
    waiting: list[Due] = field(default_factory=list)   # not due yet
    kept: list[SubjectState] = field(default_factory=list)  # no class, or epoch "all"

    @property
    def next_due(self) -> int | None:
        return min((d.due_at for d in self.waiting), default=None)


def request_id_for(d: Due) -> str:
    return f"{REQUEST_PREFIX}{d.cls.name}:{d.key.epoch}:{d.key.key_id}"


def plan(policy: RetentionPolicy, keys: list[SubjectState], held: set[str], now: int) -> Plan:
    """Which live keys are due at ``now``, held, waiting or kept forever."""
    out = Plan()
    for k in keys:
        if k.state != LIVE:
            continue
        end = epoch_end(k.epoch) if k.epoch != EPOCH_ALL else None
        cls = policy.class_of(k)
        if end is None or cls is None:
            out.kept.append(k)
            continue
        d = Due(cls, k, end + cls.keep_us)
        if d.due_at > now:
            out.waiting.append(d)
        elif k.subject in held:
            out.held.append(d)
        else:
            out.due.append(d)
    out.due.sort(key=lambda d: (epoch_end(d.key.epoch), d.key.subject, d.key.key_id))
    return out


# -- acting on it ------------------------------------------------------------------------------
class _Bounded:
    """The store as ``erase_subject`` sees it: ``destroy`` shreds only epochs that ended by
    ``bound``, so a retention erasure never takes the subject's newer keys."""

    def __init__(self, store: KeyStore, bound: int) -> None:
        self._store, self._bound = store, bound

    def destroy(self, subject: str, request_id: str | None = None,
                before_epoch: int | str | None = None) -> list[SubjectState]:
        return self._store.destroy(subject, request_id, before_epoch=self._bound)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@dataclass
class RunResult:
    shredded: list[tuple[Due, Any]] = field(default_factory=list)  # (due, ErasureRequest)
    held: list[Due] = field(default_factory=list)
    skipped: list[tuple[Due, str]] = field(default_factory=list)   # (due, why)
    failed: list[tuple[Due, str]] = field(default_factory=list)    # retried next run
    dry_run: bool = False
    next_due: int | None = None

    def summary(self, keys: bool = False) -> dict[str, Any]:
        """The counts and when the next key is due; with ``keys``, also each key the run
        shredded (or, dry, would shred), held, skipped or failed, by key id (never the
        subject), with its class, epoch, due time and request id."""
        out: dict[str, Any] = {
            "shredded": len(self.shredded), "held": len(self.held),
            "skipped": len(self.skipped), "failed": len(self.failed),
            "dry_run": self.dry_run, "next_due": _iso(self.next_due)}
        if keys:
            out["keys"] = [
                *(_named(d, "would_shred" if self.dry_run else "shredded")
                  for d, _ in self.shredded),
                *(_named(d, "held") for d in self.held),
                *(_named(d, "skipped", why) for d, why in self.skipped),
                *(_named(d, "failed", why) for d, why in self.failed)]
        return out


def _named(d: Due, outcome: str, why: str | None = None) -> dict[str, Any]:
    out = {"key_id": d.key.key_id, "outcome": outcome, "class": d.cls.name,
           "epoch": d.key.epoch, "due_at": _iso(d.due_at), "request_id": request_id_for(d)}
    return out if why is None else {**out, "why": why}


def _iso(us: int | None) -> str | None:
    return None if us is None else iso_micros(us)


Erase = Callable[..., Any]


def _default_erase() -> Erase:
    from server.erasure import erase_subject

    return erase_subject


def run_once(store: KeyStore, policy: RetentionPolicy, producer_cfg: Mapping[str, Any], *,
             topics: Any = None, now: int | None = None, dry_run: bool = False,
             erase: Erase | None = None, retry: list[Due] | None = None) -> RunResult:
    """Shred every key due at ``now`` (default: the clock) through ``erase_subject``.

    Held subjects are skipped (logged, counted). A key whose destroy worked but whose
    receipt request did not reach Kafka is in ``failed``: pass those as ``retry`` to the
    next run, which repeats the request under the same request id (the keys are gone by
    then; ``erase_subject`` collects their tombstones, the writer receipts once)."""
    erase = erase or _default_erase()
    now = now_micros() if now is None else now
    keys = store.subjects()
    held = {h.subject: h for h in store.holds()}
    p = plan(policy, keys, set(held), now)
    result = RunResult(held=p.held, dry_run=dry_run, next_due=p.next_due)
    for d in p.held:
        h = held[d.key.subject]
        log("warning", "retention_held", key_id=d.key.key_id, retention_class=d.cls.name,
            epoch=d.key.epoch, held_since=_iso(h.held_at), hold_reason=h.reason,
            why="due, but its subject is under a legal hold: not shredded")
    live = [k for k in keys if k.state == LIVE]
    todo = {d.key.key_id: d for d in [*(retry or []), *p.due]}  # a failed key may be due too
    for d in todo.values():
        if dry_run:
            result.shredded.append((d, None))
            continue
        early = _ends_as_early(d, live, p.due)
        if early is not None:
            why = f"key {early.key_id} of the same subject ends as early and is not due"
            log("warning", "retention_skipped", key_id=d.key.key_id,
                retention_class=d.cls.name, epoch=d.key.epoch, why=why)
            result.skipped.append((d, why))
            continue
        _shred(d, store, producer_cfg, topics, erase, result)
    return result


def _ends_as_early(d: Due, live: list[SubjectState], due: list[Due]) -> SubjectState | None:
    """A live key of ``d``'s subject, other than ``d``'s, that is not due although its epoch
    ended by ``d``'s: a bounded destroy takes every live key of the subject that ended by
    then, so shredding ``d`` now would cut that one short."""
    end = epoch_end(d.key.epoch)
    assert end is not None
    return next((k for k in live if k.subject == d.key.subject and k.key_id != d.key.key_id
                 and k.epoch != EPOCH_ALL and (epoch_end(k.epoch) or 0) <= end
                 and not any(x.key.key_id == k.key_id for x in due)), None)


def _shred(d: Due, store: KeyStore, producer_cfg: Mapping[str, Any], topics: Any,
           erase: Erase, result: RunResult) -> None:
    """Erase the due key ``d`` (its subject's keys whose epoch ended by ``d``'s) under its
    request id, and put the outcome in ``result``: shredded, held (a hold placed since the
    plan), skipped (erased by someone else since) or failed (retried next run)."""
    from server.erasure import ErasureFailed, NothingToErase

    rid = request_id_for(d)
    end = epoch_end(d.key.epoch)
    assert end is not None
    reason = (f"retention class {d.cls.name}: keep {d.cls.keep_days} days after epoch "
              f"{d.key.epoch} (ended {_iso(end)})")
    try:
        req = erase(_Bounded(store, end), producer_cfg, d.key.subject, rid, reason,
                    topics=topics)
    except LegalHold as e:  # placed since the plan was made
        log("warning", "retention_held", key_id=d.key.key_id, retention_class=d.cls.name,
            epoch=d.key.epoch, why=f"a legal hold since the plan: {e}")
        result.held.append(d)
        return
    except NothingToErase as e:  # erased by someone else since the plan was made
        why = ("erased already" + (f" under request {', '.join(e.erased_by)}"
                                   if e.erased_by else ""))
        log("warning", "retention_skipped", key_id=d.key.key_id,
            retention_class=d.cls.name, epoch=d.key.epoch, why=why)
        result.skipped.append((d, why))
        return
    except (ErasureFailed, KeyStoreError) as e:
        log("error", "retention_failed", key_id=d.key.key_id, request_id=rid, error=str(e))
        result.failed.append((d, str(e)))
        return
    log("info", "retention_shredded", key_id=d.key.key_id, retention_class=d.cls.name,
        epoch=d.key.epoch, request_id=rid)
    result.shredded.append((d, req))


def serve(store: KeyStore, policy: RetentionPolicy, producer_cfg: Mapping[str, Any], *,
          topics: Any = None, interval_s: float = 3600.0, dry_run: bool = False,
          stop: threading.Event | None = None, once: bool = False,
          on_run: Callable[[RunResult], None] | None = None, now: int | None = None) -> int:
    """Run the shredder every ``interval_s`` (or once) until ``stop``; returns how many runs
    had failures (0 is clean). Failed receipt requests are retried on the next run. ``now``
    (UTC µs) fixes the time every run plans at (default: the clock's at each run)."""
    stop = stop or threading.Event()
    retry: list[Due] = []
    bad_runs = 0
    while True:
        try:
            result = run_once(store, policy, producer_cfg, topics=topics, dry_run=dry_run,
                              retry=retry, now=now)
        except KeyStoreError as e:  # the store is unreachable: try again next interval
            log("error", "retention_run_failed", error=str(e))
            result = RunResult(failed=[], dry_run=dry_run)
            bad_runs += 1
        else:
            retry = [d for d, _ in result.failed]
            bad_runs += bool(result.failed)
            log("info", "retention_run", **result.summary())
        if on_run is not None:
            on_run(result)
        if once or stop.wait(interval_s):
            return bad_runs


# -- status ------------------------------------------------------------------------------------
def status(store: KeyStore, policy: RetentionPolicy | None, now: int | None = None
           ) -> dict[str, Any]:
    """What ``evidence retention status`` shows: classes (patterns, streams and subjects seen,
    live and erased keys, next shred), holds, erased counts from the key store."""
    now = now_micros() if now is None else now
    keys = store.subjects()
    holds: list[Hold] = store.holds()
    erased = [k for k in keys if k.state == ERASED]
    out: dict[str, Any] = {
        "policy": None if policy is None else {"file": policy.source, "sha256": policy.digest,
                                               "default": policy.default},
        "holds": [{"subject": h.subject, "reason": h.reason, "request_id": h.request_id,
                   "held_at": _iso(h.held_at)} for h in holds],
        "keys": {"live": sum(k.state == LIVE for k in keys), "erased": len(erased),
                 "erased_by_retention": sum((k.request_id or "").startswith(REQUEST_PREFIX)
                                            for k in erased),
                 "epoch_all": sum(k.epoch == EPOCH_ALL for k in keys if k.state == LIVE)},
        "classes": [],
    }
    if policy is None:
        return out
    p = plan(policy, keys, {h.subject for h in holds}, now)
    for cls in sorted(policy.classes.values(), key=lambda c: c.name):
        mine = [d for d in (*p.due, *p.held, *p.waiting) if d.cls.name == cls.name]
        gone = [k for k in erased
                if (k.request_id or "").startswith(f"{REQUEST_PREFIX}{cls.name}:")]
        out["classes"].append({
            "name": cls.name, "keep_days": cls.keep_days,
            "patterns": sorted(pat for pat, c in policy.streams.items() if c == cls.name),
            "streams": sorted({s for d in mine for s in d.key.streams}),
            "subjects": len({d.key.subject for d in mine}),
            "live_keys": len(mine), "due_now": sum(1 for d in p.due if d.cls.name == cls.name),
            "held": sum(1 for d in p.held if d.cls.name == cls.name),
            "erased_keys": len(gone),
            "next_shred": _iso(min((d.due_at for d in p.waiting if d.cls.name == cls.name),
                                   default=None)),
        })
    out["kept_forever"] = len(p.kept)
    return out
