"""The pure core of the OTLP/HTTP receiver: bodies in, GenAI calls out, no I/O.

    decode       OTLP/HTTP bodies (protobuf, JSON, gzip, size cap) to export requests;
                 responses (partial_success, google.rpc.Status) to bytes
    dialects     GenAI spans and inference events of each dialect to MappedCall
    openinference  OpenInference's llm.* spans
    messages     message content shapes and the output text rule
    attributes   OTLP attribute values as Python, with their exact bytes
    model        MappedCall and its parts
    bijotel      BIJOTEL's replay claims recomputed; replay compared on its basis
    capture      a MappedCall as the CaptureEvent of record contract 2.2 (mapped from telemetry)
    errors       OtlpError tree (400 / 413 / 415); UnmappableError (rejected in partial_success)
"""

from otlp.bijotel import Claim, ClaimCheck, ReplayVerdict, check_claims, claims, verify_replay_claim
from otlp.capture import Mapped, Streams, build_capture, captures_in_logs, captures_in_traces
from otlp.decode import (
    DEFAULT_MAX_BODY,
    JSON,
    PROTOBUF,
    decode_logs,
    decode_traces,
    logs_response,
    media_type,
    status_body,
    trace_response,
)
from otlp.dialects import (
    calls_in_logs,
    calls_in_traces,
    dialect_of,
    log_records,
    map_log_event,
    map_span,
    with_message_events,
)
from otlp.errors import (
    BadRequestError,
    OtlpError,
    TooLargeError,
    UnmappableError,
    UnsupportedMediaError,
)
from otlp.model import BijotelClaims, Content, MappedCall, Params, Usage

__all__ = [
    "DEFAULT_MAX_BODY",
    "JSON",
    "PROTOBUF",
    "BadRequestError",
    "BijotelClaims",
    "Claim",
    "ClaimCheck",
    "Content",
    "Mapped",
    "MappedCall",
    "OtlpError",
    "Params",
    "ReplayVerdict",
    "Streams",
    "TooLargeError",
    "UnmappableError",
    "UnsupportedMediaError",
    "Usage",
    "build_capture",
    "calls_in_logs",
    "calls_in_traces",
    "captures_in_logs",
    "captures_in_traces",
    "check_claims",
    "claims",
    "decode_logs",
    "decode_traces",
    "dialect_of",
    "log_records",
    "logs_response",
    "map_log_event",
    "map_span",
    "media_type",
    "status_body",
    "trace_response",
    "verify_replay_claim",
    "with_message_events",
]
