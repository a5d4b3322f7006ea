"""The ``records`` table's columns, in the order of ``schema.sql`` (pure, no imports).

Both the row builder (:mod:`projections.rows`) and the redaction (:mod:`projections.redact`,
which masks some of a row's columns) read a row by these positions; they live here, below
both, so that neither imports the other to know them.
"""

from __future__ import annotations

__all__ = ["OCCURRED_AT", "PREV_DIGEST", "RECORD_COLUMNS", "RECORD_DIGEST", "RECORD_TYPES",
           "SEQ", "STREAM"]

RECORD_COLUMNS = (
    "log_partition", "log_offset", "stream", "seq", "event_id", "schema_version",
    "occurred_at", "occurred_at_us", "captured_at", "content_key", "prev_digest",
    "record_digest", "response_digest", "output_digest", "input_digest", "prompt_digest",
    "outcome", "provider_name", "provider_endpoint", "provider_api_version", "model_id",
    "response_model", "fingerprint", "params", "http_status", "response_content_type",
    "seed", "temperature", "top_p", "deterministic", "request_policy", "streamed",
    "closed_early", "truncated", "writer_id", "request_length", "response_length",
    "request_bytes", "response_bytes", "error_bytes", "input_bytes", "prompt_bytes",
    "key_id", "trace_id", "span_id", "mapped", "corroborates", "record_bytes",
)
"""``record_bytes`` stays last: the audit compares a row's bytes with the log by ``row[-1]``.
``key_id`` is the record's ``encryption.key_id`` as 16 bytes (None for a plain record): a
record is *erased* when its key id is in ``erasures``. ``trace_id`` (16 bytes) and ``span_id``
(8) are its ``trace`` (record contract 2.2; None without one), ``mapped`` whether it was
mapped from telemetry (``telemetry`` set) and ``corroborates`` the gateway capture's event id
its span named (``telemetry.corroborates``)."""

# PostgreSQL types of RECORD_COLUMNS, for binary COPY (``copy.set_types``). The seed is
# numeric: it is an integer of any size (decimal text in the record), often >= 2**63.
RECORD_TYPES = (
    "int4", "int8", "text", "int8", "uuid", "text",
    "timestamptz", "int8", "timestamptz", "bytea", "bytea",
    "bytea", "bytea", "bytea", "bytea", "bytea",
    "text", "text", "text", "text", "text",
    "text", "text", "text", "int4", "text",
    "numeric", "float8", "float8", "bool", "text", "bool",
    "bool", "bool", "text", "int8", "int8",
    "bytea", "bytea", "bytea", "bytea", "bytea",
    "bytea", "bytea", "bytea", "bool", "uuid",
    "bytea",
)
assert len(RECORD_TYPES) == len(RECORD_COLUMNS)

# Positions in a row of the values the fold needs.
STREAM, SEQ, OCCURRED_AT, PREV_DIGEST, RECORD_DIGEST = (
    RECORD_COLUMNS.index(c) for c in ("stream", "seq", "occurred_at", "prev_digest",
                                      "record_digest"))
