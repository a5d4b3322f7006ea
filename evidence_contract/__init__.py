"""The evidence-store record contract: schemas, codec, digests and record model.

Imported as ``evidence_contract`` (distribution ``evidence-store-contract``, built from the
repository's ``evidence_contract/`` folder by ``packaging/contract``). The language-neutral
files (``.avsc``, JSON Schema, test vectors) are in the repository's ``schemas/`` folder and
ship inside the wheel; ``evidence_contract.files`` finds them in either place.

Pure code; the only I/O is reading ``avro/*.avsc`` once at import.

Schemas (``avro/*.avsc``, record contract 2.2, namespace ``evidence.v2``), named in
``SCHEMA_NAMES``; each file is self-contained (EvidenceRecord carries CaptureEvent inline) and
defines every named type once, so every Avro implementation computes the same fingerprint.
A 1.0 capture has another fingerprint and the writer rejects it (UNKNOWN_FINGERPRINT); a 2.0
or 2.1 one (``avro/history/``) is read with its own schema and sealed as a record of its own
version. Every record
ever sealed, 1.0 included, decodes with the EvidenceRecord schema it was sealed with:
    CaptureEvent     what services send to evidence.intake; the record ``body``
    EvidenceRecord   ``body`` + the writer's ``seal``, on evidence.log
    WriterHead       the writer's restart state per stream

Codec (Avro single-object encoding, no registry needed):
    encode, decode, body_bytes, split_record, fingerprint, parsing_canonical_form,
    DIGEST_FIELDS, wrong_size_digest (every digest field is bytes of exactly 32)
    writer fast paths: HEADER_SIZE, schema_name_for, read_canonical_body, read_body,
    canonical_body_bytes, encode_sealed, peek_ids, record_fingerprint_for

Digests (SHA-256 over a one-byte domain prefix, 32 raw bytes):
    content_key (0x00), response_digest (0x01), input_digest (0x02),
    prompt_digest (0x03), output_digest (0x04), record_digest (0x05), chunk_digest (0x06),
    otlp_digest (0x07), span_digest (0x08) (a capture mapped from telemetry's), GENESIS

Record model:
    new_event_id, now_micros, iso_micros, valid_event_id, valid_stream_id, STREAM_ID_RE,
    seed_text, valid_seed, SEED_RE, MAX_SEED_DIGITS, TRUNCATED_ERROR_BYTES,
    SCHEMA_VERSION, SUPPORTED_SCHEMA_VERSIONS, seal,
    TRACE_ID_SIZE, SPAN_ID_SIZE, TELEMETRY_DIALECTS (record contract 2.2: trace, telemetry)

Sealed content (record contract 2.1, ``docs/erasure.md``), modules imported by name:
    envelope   the envelope format, associated data, commitment prefixes, the writer's
               shape check of an encrypted capture (stdlib only)
    sealing    SubjectKeys (AES-256-GCM + HMAC-SHA-256 commitments, HKDF), seal_body,
               open_body, AES key wrap, LocalKek (needs the ``[encrypt]`` extra)
    keys       the KeyStore and KeyWrapper ports, DataKey, SubjectState, KeyErased
    erasure    erasure requests (intake control messages) and the log's signed receipts

Topic names (the wire contract's addresses):
    TopicNames

Errors:
    EvidenceError (the project's root), EncodeError, DecodeError, TruncatedError
"""

from .codec import (
    DIGEST_FIELDS,
    HEADER_SIZE,
    SCHEMA_NAMES,
    body_bytes,
    canonical_body_bytes,
    decode,
    encode,
    encode_sealed,
    fingerprint,
    parsing_canonical_form,
    peek_ids,
    read_body,
    read_canonical_body,
    record_fingerprint_for,
    schema_name_for,
    split_record,
    wrong_size_digest,
)
from .digests import (
    GENESIS,
    chunk_digest,
    content_key,
    input_digest,
    otlp_digest,
    output_digest,
    prompt_digest,
    record_digest,
    response_digest,
    span_digest,
)
from .errors import DecodeError, EncodeError, EvidenceError, TruncatedError
from .topics import TopicNames
from .model import (
    MAX_SEED_DIGITS,
    SCHEMA_VERSION,
    SEED_RE,
    SPAN_ID_SIZE,
    STREAM_ID_RE,
    SUPPORTED_SCHEMA_VERSIONS,
    TELEMETRY_DIALECTS,
    TRACE_ID_SIZE,
    TRUNCATED_ERROR_BYTES,
    iso_micros,
    new_event_id,
    now_micros,
    seal,
    seed_text,
    valid_event_id,
    valid_seed,
    valid_stream_id,
)

__all__ = [
    "DIGEST_FIELDS",
    "DecodeError",
    "EncodeError",
    "EvidenceError",
    "GENESIS",
    "HEADER_SIZE",
    "MAX_SEED_DIGITS",
    "SCHEMA_NAMES",
    "SCHEMA_VERSION",
    "SEED_RE",
    "SPAN_ID_SIZE",
    "STREAM_ID_RE",
    "SUPPORTED_SCHEMA_VERSIONS",
    "TELEMETRY_DIALECTS",
    "TRACE_ID_SIZE",
    "TRUNCATED_ERROR_BYTES",
    "TopicNames",
    "TruncatedError",
    "body_bytes",
    "canonical_body_bytes",
    "chunk_digest",
    "content_key",
    "decode",
    "encode",
    "encode_sealed",
    "fingerprint",
    "input_digest",
    "iso_micros",
    "new_event_id",
    "now_micros",
    "otlp_digest",
    "output_digest",
    "parsing_canonical_form",
    "peek_ids",
    "prompt_digest",
    "read_body",
    "read_canonical_body",
    "record_digest",
    "record_fingerprint_for",
    "response_digest",
    "schema_name_for",
    "seal",
    "seed_text",
    "span_digest",
    "split_record",
    "valid_event_id",
    "valid_seed",
    "valid_stream_id",
    "wrong_size_digest",
]
