"""The pure core of the OTLP/HTTP receiver: bodies in, GenAI calls out, no I/O.

    decode       OTLP/HTTP bodies (protobuf, JSON, gzip, size cap) to export requests;
                 responses (partial_success, google.rpc.Status) to bytes
    dialects     GenAI spans and inference events of each dialect to MappedCall
    openinference  OpenInference's llm.* spans
    messages     message content shapes and the output text rule
    attributes   OTLP attribute values as Python, with their exact bytes
    model        MappedCall and its parts
    bijotel      BIJOTEL's replay claims recomputed; replay compared on its basis
    errors       OtlpError tree (400 / 413 / 415)
"""

from otlp.bijotel import ClaimCheck, ReplayVerdict, check_claims, verify_replay_claim
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
from otlp.errors import BadRequestError, OtlpError, TooLargeError, UnsupportedMediaError
from otlp.model import BijotelClaims, Content, MappedCall, Params, Usage

__all__ = [
    "DEFAULT_MAX_BODY",
    "JSON",
    "PROTOBUF",
    "BadRequestError",
    "BijotelClaims",
    "ClaimCheck",
    "Content",
    "MappedCall",
    "OtlpError",
    "Params",
    "ReplayVerdict",
    "TooLargeError",
    "UnsupportedMediaError",
    "Usage",
    "calls_in_logs",
    "calls_in_traces",
    "check_claims",
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
