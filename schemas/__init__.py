"""The evidence-store record contract: schemas, codec, digests and record model.

Imported as ``evidence_contract`` (distribution ``evidence-store-contract``, built from the
repository's ``schemas/`` folder by ``packaging/contract``).

Pure code; the only I/O is reading ``avro/*.avsc`` once at import.

Schemas (``avro/*.avsc``, namespace ``evidence.v1``), named in ``SCHEMA_NAMES``:
    CaptureEvent     what services send to evidence.intake; the record ``body``
    EvidenceRecord   ``body`` + the writer's ``seal``, on evidence.log
    WriterHead       the writer's restart state per stream

Codec (Avro single-object encoding, no registry needed):
    encode, decode, body_bytes, split_record, fingerprint, parsing_canonical_form
    writer fast paths: HEADER_SIZE, schema_name_for, read_canonical_body, read_body,
    canonical_body_bytes, encode_sealed, peek_ids

Digests (SHA-256 over a one-byte domain prefix, 32 raw bytes):
    content_key (0x00), response_digest (0x01), input_digest (0x02),
    prompt_digest (0x03), output_digest (0x04), record_digest (0x05), GENESIS

Record model:
    new_event_id, now_micros, valid_event_id, valid_stream_id, STREAM_ID_RE,
    SCHEMA_VERSION, SUPPORTED_SCHEMA_VERSIONS, seal

Topic names (the wire contract's addresses):
    TopicNames

Errors:
    EvidenceError (the project's root), EncodeError, DecodeError, TruncatedError
"""

from .codec import (
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
    schema_name_for,
    split_record,
)
from .digests import (
    GENESIS,
    content_key,
    input_digest,
    output_digest,
    prompt_digest,
    record_digest,
    response_digest,
)
from .errors import DecodeError, EncodeError, EvidenceError, TruncatedError
from .topics import TopicNames
from .model import (
    SCHEMA_VERSION,
    STREAM_ID_RE,
    SUPPORTED_SCHEMA_VERSIONS,
    new_event_id,
    now_micros,
    seal,
    valid_event_id,
    valid_stream_id,
)

__all__ = [
    "DecodeError",
    "EncodeError",
    "EvidenceError",
    "GENESIS",
    "HEADER_SIZE",
    "SCHEMA_NAMES",
    "SCHEMA_VERSION",
    "STREAM_ID_RE",
    "SUPPORTED_SCHEMA_VERSIONS",
    "TopicNames",
    "TruncatedError",
    "body_bytes",
    "canonical_body_bytes",
    "content_key",
    "decode",
    "encode",
    "encode_sealed",
    "fingerprint",
    "input_digest",
    "new_event_id",
    "now_micros",
    "output_digest",
    "parsing_canonical_form",
    "peek_ids",
    "prompt_digest",
    "read_body",
    "read_canonical_body",
    "record_digest",
    "response_digest",
    "schema_name_for",
    "seal",
    "split_record",
    "valid_event_id",
    "valid_stream_id",
]
