"""From a log message to a ``records`` row (pure).

Columns are in the order of ``RECORD_COLUMNS``, the order of ``schema.sql``; the COPY in the
projector and the tests' row builders both go through :func:`record_row`.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from evidence_contract import DecodeError, decode, valid_seed

from .columns import (  # noqa: F401 - re-exported: the row's columns, by name
    OCCURRED_AT,
    PREV_DIGEST,
    RECORD_COLUMNS,
    RECORD_DIGEST,
    RECORD_TYPES,
    SEQ,
    STREAM,
)
from .redact import apply as redact

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def micros_to_datetime(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def record_row(value: bytes, partition: int, offset: int,
               redaction: Any = None) -> tuple[Any, ...]:
    """The ``records`` row of one encoded EvidenceRecord; raises ``DecodeError`` if it is not.
    With ``redaction`` (a :class:`projections.redact.Policy`) its served body columns are
    masked (:func:`projections.redact.apply`); ``record_bytes`` never is."""
    # One decode (not split_record, which reads the body twice): the projector does not
    # recompute record_digest, `evidence audit` does; it only needs the values.
    name, record = decode(value)
    if name != "EvidenceRecord":
        raise DecodeError(f"expected an EvidenceRecord, got a {name}")
    body, seal = record["body"], record["seal"]
    provider, replay, capture = body["provider"], body["replay"], body["capture"]
    row = (
        partition, offset, body["stream"], seal["seq"], uuid.UUID(body["event_id"]),
        body["schema_version"], micros_to_datetime(seal["occurred_at"]), seal["occurred_at"],
        micros_to_datetime(body["captured_at"]), body["content_key"], seal["prev_digest"],
        seal["record_digest"], body["response_digest"], body["output_digest"],
        body["input_digest"], body["prompt_digest"], body["outcome"], provider["name"],
        provider["endpoint"], provider["api_version"], body["model_id"],
        body["response_model"], body["fingerprint"], body["params"], body["http_status"],
        body["response_content_type"], seed_int(replay["seed"]), replay["temperature"],
        replay["top_p"], replay["deterministic"], capture["request_policy"], capture["streamed"],
        capture["closed_early"], capture["truncated"], seal["writer"]["writer_id"],
        body["request_length"], body["response_length"], body["request_bytes"],
        body["response_bytes"], body["error_bytes"], body["input_bytes"], body["prompt_bytes"],
        key_id_bytes(body.get("encryption")), *trace_columns(body.get("trace"),
                                                             body.get("telemetry")),
        bytes(value),
    )
    return row if redaction is None else redact(row, redaction)


def key_id_bytes(encryption: dict[str, Any] | None) -> bytes | None:
    """The ``key_id`` column of a record's ``encryption`` (None: a plain record)."""
    if not encryption:
        return None
    try:
        return bytes.fromhex(encryption["key_id"])
    except (KeyError, TypeError, ValueError):
        raise DecodeError("encryption.key_id is not a key id") from None


def trace_columns(trace: dict[str, Any] | None, telemetry: dict[str, Any] | None
                  ) -> tuple[bytes | None, bytes | None, bool, uuid.UUID | None]:
    """The ``trace_id``, ``span_id``, ``mapped`` and ``corroborates`` columns of a record's
    ``trace`` and ``telemetry`` (record contract 2.2; both None in an earlier record)."""
    corroborates = None if telemetry is None else telemetry["corroborates"]
    try:
        corroborated = None if corroborates is None else uuid.UUID(corroborates)
    except ValueError:
        raise DecodeError("telemetry.corroborates is not an event id") from None
    return (None if trace is None else trace["trace_id"],
            None if trace is None else trace["span_id"],
            telemetry is not None, corroborated)


def seed_int(seed: str | None) -> int | None:
    """The record's seed (decimal text) as the integer it is; None when absent.

    Raises ``DecodeError`` for text that is not an integer (the writer never seals one).
    """
    if seed is None:
        return None
    if not valid_seed(seed):
        raise DecodeError(f"replay.seed {seed[:40]!r} is not an integer as decimal text")
    return int(seed)
