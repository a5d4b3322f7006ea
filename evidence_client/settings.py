"""The Recorder's settings: one frozen object, built once from the constructor's arguments and
the environment, and validated once, here (:class:`~evidence_client.errors.ConfigError`), so
the rest of the client reads plain, checked values.

The environment fills in what the arguments leave out:

    EVIDENCE_KAFKA_BOOTSTRAP   bootstrap_servers (required one way or the other)
    EVIDENCE_TOPIC_PREFIX      topic_prefix (default "evidence": captures go to <prefix>.intake)
    EVIDENCE_SPOOL_DIR         spool_dir (default ~/.local/state/evidence-store/spool)
    EVIDENCE_API_URL           api_url (the evidence API, named in spans' record references)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from evidence_contract import now_micros, valid_stream_id
from evidence_contract.topics import TopicNames

from .capture import HASH_ONLY, VALUE
from .errors import ConfigError
from .sizing import DEFAULT_MAX_VERBATIM_BYTES

__all__ = ["AFTER_RETURN", "BEFORE_RETURN", "CONTENT_POLICIES", "DURABILITIES", "ENCRYPT", "PLAIN",
           "RecorderSettings", "check_stream"]

BEFORE_RETURN = "before_return"
AFTER_RETURN = "after_return"
DURABILITIES = (BEFORE_RETURN, AFTER_RETURN)
"""``Recorder(durability=...)``: a call returns once its capture is fsync'd in the spool, or
at once (its capture is fsync'd by the sender thread right after; see docs/capture.md)."""

PLAIN = "plain"
ENCRYPT = "encrypt"
CONTENT_POLICIES = (PLAIN, ENCRYPT)
"""``Recorder(content_policy=...)``: record content as it is, or sealed per subject."""

_POSITIVE_INTS = ("delivery_timeout_ms", "max_block_ms", "max_pending", "max_verbatim_bytes",
                  "durable_timeout_ms")


def check_stream(stream: str | None) -> None:
    """Raise :class:`ConfigError` unless ``stream`` is None or a stream id."""
    if stream is not None and not valid_stream_id(stream):
        raise ConfigError(f"stream {stream!r} is not a stream id ([A-Za-z0-9._:-]{{1,128}})")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class RecorderSettings:
    """Everything a Recorder is configured with; see :class:`~evidence_client.Recorder` for
    what each setting means. Construction validates; :meth:`from_arguments` also reads the
    environment for what the arguments leave out."""

    bootstrap_servers: str
    spool_dir: Path
    """The spool root: each Recorder's own spool is a directory inside it."""
    stream: str | None = None
    topic_prefix: str = "evidence"
    request_policy: str = VALUE
    delivery_timeout_ms: int = 30_000
    max_block_ms: int = 1_000
    max_pending: int = 100_000
    max_verbatim_bytes: int = DEFAULT_MAX_VERBATIM_BYTES
    durable_timeout_ms: int = 5_000
    durability: str = BEFORE_RETURN
    group_commit_ms: float = 0.0
    unwaited_commit_ms: float = 5.0
    orphan_scan_s: float = 10.0
    close_timeout: float = 30.0
    producer_config: Mapping[str, Any] | None = None
    host: str | None = None
    content_policy: str = PLAIN
    key_store: Any = None
    key_cache_s: float = 60.0
    key_clock: Callable[[], int] = now_micros
    """UTC µs, for the end of a key's epoch (tests pass a fake one)."""
    tracer_provider: Any = None
    """Where the calls' spans go (``evidence_client.otel``); None: the global provider."""
    api_url: str | None = None
    """The evidence API's URL, in the record references put on spans."""

    @classmethod
    def from_arguments(cls, bootstrap_servers: str | None = None, *,
                       topic_prefix: str | None = None,
                       spool_dir: str | os.PathLike[str] | None = None,
                       request_policy: Any = VALUE, api_url: str | None = None,
                       **rest: Any) -> "RecorderSettings":
        """The settings of ``Recorder(...)``'s arguments, the environment filling the gaps."""
        bootstrap = bootstrap_servers or os.environ.get("EVIDENCE_KAFKA_BOOTSTRAP")
        if not bootstrap:
            raise ConfigError("bootstrap_servers is required (or set EVIDENCE_KAFKA_BOOTSTRAP)")
        if spool_dir is None:
            base = os.environ.get("EVIDENCE_SPOOL_DIR")
            spool_dir = base or Path.home() / ".local" / "state" / "evidence-store" / "spool"
        return cls(bootstrap_servers=bootstrap, spool_dir=Path(spool_dir),
                   topic_prefix=topic_prefix or os.environ.get("EVIDENCE_TOPIC_PREFIX")
                   or "evidence",
                   # An enum member (e.g. a RequestPolicy) stands for its value.
                   request_policy=getattr(request_policy, "value", request_policy),
                   api_url=api_url or os.environ.get("EVIDENCE_API_URL") or None, **rest)

    def __post_init__(self) -> None:
        check_stream(self.stream)
        if self.request_policy not in (VALUE, HASH_ONLY):
            raise ConfigError(f"request_policy must be {VALUE!r} or {HASH_ONLY!r}, "
                              f"not {self.request_policy!r}")
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive int, not {value!r}")
        if not _is_number(self.close_timeout) or self.close_timeout < 0:
            raise ConfigError("close_timeout must be >= 0")
        for name in ("group_commit_ms", "unwaited_commit_ms"):
            value = getattr(self, name)
            if not _is_number(value) or not 0 <= value <= 1000:
                raise ConfigError(f"{name} must be a number of ms from 0 to 1000, not {value!r}")
        if self.durability not in DURABILITIES:
            raise ConfigError(f"durability must be one of {DURABILITIES}, "
                              f"not {self.durability!r}")
        if not _is_number(self.orphan_scan_s) or self.orphan_scan_s <= 0:
            raise ConfigError("orphan_scan_s must be > 0")
        if not _is_number(self.key_cache_s) or self.key_cache_s < 0:
            raise ConfigError("key_cache_s must be >= 0")
        if self.content_policy not in CONTENT_POLICIES:
            raise ConfigError(f"content_policy must be one of {CONTENT_POLICIES}, "
                              f"not {self.content_policy!r}")
        if self.content_policy == ENCRYPT:
            if self.key_store is None:
                raise ConfigError("content_policy='encrypt' needs a key_store")
            try:
                from evidence_contract import sealing  # noqa: F401 - needs the extra
            except ImportError as e:
                raise ConfigError("content_policy='encrypt' needs the [encrypt] extra "
                                  f"(cryptography): {e}") from e

    @property
    def topic(self) -> str:
        """Where captures go: ``<topic_prefix>.intake``."""
        return TopicNames(self.topic_prefix).intake
