"""Request and response bodies of the REST API (pydantic); the rows they are filled from are
mapped in :mod:`api.rows` (re-exported here).

Request bodies reject unknown fields (``extra="forbid"``), so a typo such as
``replayed_outptu`` is a 422 rather than a silently ignored field.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel, ConfigDict, Field, PrivateAttr, StrictInt, StrictStr, WithJsonSchema,
    model_validator,
)

from evidence_contract import STREAM_ID_RE, valid_event_id
from evidence_contract.model import EVENT_ID_RE

from .rows import erased_of, finding_dict, head_dict, record_dict  # the rows as these bodies

__all__ = [
    "EVENT_PATTERN", "FINDINGS_SHOWN", "MAX_SEQ", "STREAM_GLOB_PATTERN", "STREAM_PATTERN",
    "RecordCursor", "RecordList",
    "TRACE_PATTERN", "TraceOut", "TraceRecords", "TelemetryOut", "TelemetryClaimOut",
    "BijotelReplayOut", "BundleConsistency", "BundleInclusion", "BundleLog", "ConsistencyProof", "CosignatureAccepted", "EvidenceBundle", "ErasedBody", "ErasureOut", "ErrorBody", "FindingOut", "InclusionProof", "LogInclusion", "RecordOut", "RecordPage", "StreamDetail", "StreamSummary", "TooManyBody",
    "StreamList", "VerifyRequest", "VerifyResponse", "finding_dict", "head_dict", "record_dict",
]

MAX_SEQ = (1 << 63) - 1
STREAM_PATTERN = "^" + STREAM_ID_RE.pattern + "$"
EVENT_PATTERN = "^" + EVENT_ID_RE.pattern + "$"
STREAM_GLOB_PATTERN = r"^[A-Za-z0-9._:*?-]{1,128}$"
"""A stream id, or a pattern of one: ``*`` any characters, ``?`` one (``GET /records``)."""
TRACE_PATTERN = "^[0-9a-f]{32}$"
"""A W3C trace id as text: 32 lowercase hex digits (not all zero)."""
FINDINGS_SHOWN = 100
"""How many findings an answer lists; it gives their count in full."""


class ErrorBody(BaseModel):
    error: str = Field(description="stable code: unauthorized, forbidden, not_found, conflict, "
                                   "erased, invalid_request, "
                                   "invalid_manifest, too_large, timeout, "
                                   "too_many_requests, unavailable, "
                                   "method_not_allowed, internal")
    message: str = Field(description="what went wrong, for people")


class ErasedBody(BaseModel):
    """410: the record exists and its proofs hold, but its content was erased."""

    error: Literal["erased"]
    message: str
    erased_at: int = Field(description="when the key was destroyed, µs since the epoch")
    request_id: str = Field(description="the erasure's request id (its signed receipt on "
                                        "evidence.erasures)")


class TooManyBody(BaseModel):
    """429: the key already has its limit of this expensive request in progress."""

    error: Literal["too_many_requests"]
    message: str
    limit: int = Field(description="how many of these requests one key may have in progress "
                                   "in one server process")
    setting: str = Field(description="the API setting that raises the limit")


class ErasureOut(BaseModel):
    erased_at: str = Field(description="when the key was destroyed (ISO 8601, UTC)")
    erased_at_us: int
    request_id: str


_BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"

# Strict: a JSON true is not seq 1, nor are "1", 1.0 or 1e3; a stream or event id is a string.
StreamField = Annotated[StrictStr, Field(pattern=STREAM_PATTERN)]
SeqField = Annotated[StrictInt, Field(ge=1, le=MAX_SEQ)]
# Checked by the model (for a message that says what an event id is); documented by pattern.
EventIdField = Annotated[StrictStr, WithJsonSchema({"type": "string", "pattern": EVENT_PATTERN})]
Base64Field = Annotated[StrictStr, WithJsonSchema({"type": "string", "pattern": _BASE64_PATTERN})]


def _one_of(*branches: tuple[tuple[str, ...], tuple[str, ...]]) -> dict[str, Any]:
    """JSON Schema for "exactly one of these groups of fields": each branch requires its
    fields (non-null) and has the other groups' fields absent or null."""
    schemas = []
    for present, absent in branches:
        props: dict[str, Any] = {f: {"not": {"type": "null"}} for f in present}
        props.update({f: {"type": "null"} for f in absent})
        schemas.append({"required": list(present), "properties": props})
    return {"oneOf": schemas}


_RECORD, _EVENT = ("stream", "seq"), ("event_id",)
_OUTPUT, _RESPONSE = ("replayed_output",), ("replayed_response_b64",)


class VerifyRequest(BaseModel):
    """The record, by ``stream`` + ``seq`` or by ``event_id``, and exactly one replayed value.

    Both either/or rules are in the JSON Schema too (``allOf`` of two ``oneOf``), so a client
    or a fuzzer generated from the OpenAPI document sends what the handler accepts. A null
    field is the same as an absent one."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [
            {"stream": "acme:support.chat", "seq": 12, "replayed_output": "Hi!"},
            {"event_id": "0190b6d2-7c3e-7a51-9f00-1234567890ab",
             "replayed_response_b64": "e30="},
        ],
        "allOf": [_one_of((_RECORD, _EVENT), (_EVENT, _RECORD)),
                  _one_of((_OUTPUT, _RESPONSE), (_RESPONSE, _OUTPUT))],
    })

    stream: StreamField | None = Field(None, description="stream id of the record")
    seq: SeqField | None = Field(None, description="seq of the record in the stream: a JSON "
                                                   "integer >= 1 (not a string, float or bool)")
    event_id: EventIdField | None = Field(
        None, description="the capture's event id: a UUIDv7 in canonical lowercase text")
    replayed_output: StrictStr | None = Field(
        None, description="re-executed output text; compared with output_digest = "
                          "sha256(0x04 || utf8(text))")
    replayed_response_b64: Base64Field | None = Field(
        None, description="re-executed verbatim response body, base64 (standard alphabet); "
                          "compared with response_digest = sha256(0x01 || bytes)")
    basis: Literal["record", "bijotel"] | None = Field(
        None, description="what to compare with: record (absent or null) the record's own "
                          "digest; bijotel the bijotel.replay.output_hash claim of a record "
                          "mapped from a span that made BIJOTEL's replay claims, compared as "
                          "BIJOTEL's verify_replay does (sha256(utf8(replayed_output)), no "
                          "prefix), with its answers; needs replayed_output")

    _response: bytes | None = PrivateAttr(None)
    _event_uuid: uuid.UUID | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _one_record_one_input(self) -> VerifyRequest:
        if self.event_id is not None:
            if self.stream is not None or self.seq is not None:
                raise ValueError("name the record either by stream and seq or by event_id, "
                                 "not both")
            if not valid_event_id(self.event_id):
                raise ValueError(f"event_id {self.event_id[:64]!r} is not a UUID in canonical "
                                 f"form (a capture's event id is a lowercase UUIDv7)")
            self._event_uuid = uuid.UUID(self.event_id)
        elif self.seq is not None and self.stream is None:
            raise ValueError("seq needs stream: give both, or event_id instead")
        elif self.stream is not None and self.seq is None:
            raise ValueError("stream needs seq: give both, or event_id instead")
        elif self.stream is None:
            raise ValueError("name the record: give stream and seq, or event_id")
        if (self.replayed_output is None) == (self.replayed_response_b64 is None):
            raise ValueError("give exactly one of replayed_output (text) or "
                             "replayed_response_b64 (base64 bytes)")
        if self.basis == "bijotel" and self.replayed_output is None:
            raise ValueError("basis bijotel compares an output text with the "
                             "bijotel.replay.output_hash claim: give replayed_output, not "
                             "replayed_response_b64")
        if self.replayed_output is not None:
            try:
                self.replayed_output.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("replayed_output contains a lone surrogate and has no UTF-8 "
                                 "encoding; send the text as it was produced") from None
        else:
            try:
                self._response = base64.b64decode(self.replayed_response_b64, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("replayed_response_b64 is not valid base64 (standard "
                                 "alphabet A-Z a-z 0-9 + /, with = padding)") from None
        return self

    @property
    def response_bytes(self) -> bytes | None:
        return self._response

    @property
    def event_uuid(self) -> uuid.UUID | None:
        return self._event_uuid


class BijotelReplayOut(BaseModel):
    """BIJOTEL's own answer (its ``ReplayResult``, field for field) and the claim's verdict."""

    match: bool
    original_hash: str | None = Field(description="the bijotel.replay.output_hash claimed")
    replay_hash: str = Field(description="sha256(utf8(replayed_output)), hex")
    deterministic: bool = Field(description="the bijotel.replay.deterministic claim (false "
                                            "when absent)")
    model_version: str | None = Field(description="the bijotel.replay.model_version claim")
    reason: str | None = Field(description="BIJOTEL's reason; null on a match")
    claim: Literal["bijotel.replay.output_hash"]
    claim_verdict: Literal["VERIFIED", "MISMATCHED", "UNVERIFIABLE"] = Field(description=(
        "the claim's verdict when the span was mapped: VERIFIED when the span carried the "
        "output text and it hashed to the claim, MISMATCHED when it hashed to something else, "
        "UNVERIFIABLE when the span carried no output text (then only BIJOTEL vouches for "
        "the hash)"))


class VerifyResponse(BaseModel):
    match: bool
    original_hash: str | None = Field(description="hex digest sealed in the record (on "
                                                  "BIJOTEL's basis, the output_hash claimed); "
                                                  "null if the record has no digest of that "
                                                  "kind")
    replay_hash: str | None = Field(description="hex digest of the replayed value")
    compared: Literal["output_digest", "response_digest", "bijotel.replay.output_hash"] | None
    deterministic: bool | None = Field(description="true iff the original call sent a seed")
    model_version: str | None = Field(description="the model that answered (response_model, "
                                                  "else the requested model_id)")
    stream: str | None
    seq: int | None
    reason: str | None = Field(description="null on a match; otherwise what differed and "
                                           "what to do (on BIJOTEL's basis, BIJOTEL's reason)")
    bijotel: BijotelReplayOut | None = Field(None, description=(
        "only with basis bijotel: BIJOTEL's own answer and the verdict on its claim"))


from .proof_models import (  # noqa: E402 - the proofs' bodies, importable from here as before
    BundleConsistency, BundleInclusion, BundleLog, ConsistencyProof, CosignatureAccepted,
    EvidenceBundle, HexHash, InclusionProof, LogInclusion,
)


class Provider(BaseModel):
    name: str
    endpoint: str
    api_version: str | None


class Replay(BaseModel):
    seed: int | None = Field(description="the integer seed sent, of any size (it may be "
                                         ">= 2^63); null when none was sent")
    temperature: float | None
    top_p: float | None
    deterministic: bool


class LogPosition(BaseModel):
    partition: int
    offset: int


class TraceOut(BaseModel):
    trace_id: str = Field(description="32 lowercase hex digits")
    span_id: str = Field(description="16 lowercase hex digits")


class TelemetryClaimOut(BaseModel):
    name: str
    value: str
    verdict: Literal["VERIFIED", "MISMATCHED", "UNVERIFIABLE"]


class TelemetryOut(BaseModel):
    dialect: str = Field(description="gen_ai, gen_ai_1_36, openllmetry, openinference, logfire "
                                     "or bijotel")
    scope_name: str
    scope_version: str | None
    source: Literal["SPAN", "LOG_EVENT"]
    otlp_digest: str = Field(description="sha256(0x07 || the OTLP request body as received), hex")
    span_digest: str = Field(description="sha256(0x08 || the span's deterministic protobuf "
                                         "serialization), hex; equal to content_key")
    content_from: list[str]
    rebuilt: bool
    corroborates: str | None = Field(description="the event id of the gateway capture the "
                                                  "span named, which holds the wire bytes")
    claims: list[TelemetryClaimOut]


class RecordOut(BaseModel):
    stream: str
    seq: int
    event_id: str
    schema_version: str
    occurred_at: str
    occurred_at_us: int
    captured_at: str
    outcome: str
    content_key: str
    prev_digest: str
    record_digest: str
    response_digest: str | None
    output_digest: str | None
    input_digest: str | None
    prompt_digest: str | None
    provider: Provider
    model_id: str | None
    response_model: str | None
    fingerprint: str | None
    params: str | None
    http_status: int | None
    response_content_type: str | None
    replay: Replay
    request_policy: str
    streamed: bool
    closed_early: bool
    truncated: bool = Field(description="true when the capture exceeded the gateway's "
                                        "max_verbatim_bytes: its bodies were not kept, its "
                                        "digests and lengths cover the full bytes")
    writer_id: str
    request_length: int = Field(description="length in bytes of the full request body that "
                                            "content_key covers")
    response_length: int | None = Field(description="length in bytes of the full response "
                                                    "body that response_digest covers; null "
                                                    "when there was no response body")
    log: LogPosition
    capture_method: Literal["wire", "mapped from telemetry"] = Field(description=(
        "wire: captured at the wire (the request's and the response's bytes hashed and kept "
        "as sent and received); mapped from telemetry: built from an OpenTelemetry span or "
        "log event (record contract 2.2, see telemetry), not native evidence: no request or "
        "response bytes, its content_key is the span's digest"))
    trace: TraceOut | None = Field(None, description=(
        "the W3C trace context of the span the call ran in (record contract 2.2); null when "
        "none was recorded"))
    telemetry: TelemetryOut | None = Field(None, description=(
        "what a capture mapped from telemetry came from and claimed; null for a capture "
        "made at the wire"))
    content: Literal["plain", "encrypted", "erased"] = Field(description=(
        "plain: the bodies as recorded (masked where the projection's redaction policy "
        "says); encrypted: sealed under a subject's key (the bodies are envelopes, the "
        "digests keyed commitments); erased: that key was destroyed, the content is "
        "unrecoverable (the bodies are never served), the digests, seq and chain stay"))
    key_id: str | None = Field(description="the data key that sealed the content (32 hex); "
                                           "null for a plain record")
    erasure: ErasureOut | None = Field(description="when and under which request the key "
                                                   "was erased; null unless content is erased")
    request_b64: str | None = Field(None, description="only with ?include=bytes")
    response_b64: str | None = Field(None, description="only with ?include=bytes")
    error_b64: str | None = Field(None, description="only with ?include=bytes")
    input_b64: str | None = Field(None, description="the end-user input, when kept; only "
                                                    "with ?include=bytes")
    prompt_b64: str | None = Field(None, description="the rendered prompt, when kept; only "
                                                     "with ?include=bytes")
    record_b64: str | None = Field(None, description="the log message verbatim (single-object "
                                                     "Avro); only with ?include=bytes. Withheld "
                                                     "(null) for a plain record of a stream the "
                                                     "projection's redaction policy covers: the "
                                                     "message holds the unmasked content")
    record_sha256: str | None = Field(None, description=(
        "only with ?include=bytes, when record_b64 is withheld by the redaction policy: "
        "SHA-256 of the log message (hex), to match against the log or an export"))
    record_leaf_hash: str | None = Field(None, description=(
        "only with ?include=bytes, when record_b64 is withheld: the record's Merkle leaf "
        "hash (hex; its leaf input is record_digest and record_sha256, see "
        "evidence_contract.tlog), which folds with /streams/{stream}/proof/inclusion to the "
        "signed checkpoint's root"))
    copies: int | None = Field(None, description=(
        "only by event id: how many other records the key may read carry this event id "
        "(0: none). The record given is the original, the first by the record contract's "
        "order (earliest occurred_at, then log position); each other one is a finding of "
        "its stream (duplicate_event_id; duplicate when it is the same record again)"))
    is_copy: bool | None = Field(None, description=(
        "only by event id: true when the record given is itself a later copy of an event id "
        "sealed before (its stream's duplicate_event_id finding), its original being in a "
        "stream the key may not read"))


class RecordPage(BaseModel):
    stream: str
    records: list[RecordOut]
    next_after_seq: int | None = Field(description="pass as after_seq for the next page; "
                                                   "null on the last page")


class RecordCursor(BaseModel):
    stream: str
    seq: int


class RecordList(BaseModel):
    stream: str = Field(description="the stream pattern listed")
    records: list[RecordOut]
    next_after: RecordCursor | None = Field(description="pass as after_stream and after_seq "
                                                        "for the next page; null on the last")


class TraceRecords(BaseModel):
    trace_id: str
    records: list[RecordOut] = Field(description="the trace's records the key may read, in "
                                                 "the order they were sealed")
    more: bool = Field(description="true when the trace has more records than `limit`")


class StreamSummary(BaseModel):
    stream: str
    head_seq: int
    head_digest: str
    record_count: int
    first_at: str
    last_at: str


class StreamList(BaseModel):
    streams: list[StreamSummary]
    next_after: str | None = Field(description="pass as after for the next page; null on "
                                               "the last page")


class FindingOut(BaseModel):
    id: int
    stream: str | None
    seq: int | None
    kind: str
    detail: str
    log_partition: int | None
    log_offset: int | None
    found_at: str


class StreamDetail(StreamSummary):
    findings_count: int
    findings: list[FindingOut]
