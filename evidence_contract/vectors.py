"""Published test vectors for implementers of the record contract in other languages.

``python -m evidence_contract.vectors`` rewrites ``schemas/vectors.json``; ``--check`` exits 1 if the
file differs from what the code computes now. Everything is fixed (ids, times, bytes), so
the output is byte-for-byte deterministic. In the JSON, bytes values are lowercase hex
strings; which fields are bytes follows from the schemas.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import codec, digests
from .files import schema_file
from .model import SCHEMA_VERSION, seal
from .otlp_vectors import (
    INPUT_MESSAGES, OUTPUT_HASH, OUTPUT_TEXT, SCOPE, SPAN_ID, TRACE_ID, mapped_otlp_request,
    mapped_span_bytes,
)

PATH = schema_file("vectors.json")

_T0 = 1_645_557_742_000_000  # 2022-02-22T19:22:22Z, the time in RFC 9562's UUIDv7 example

_BYTE_INPUTS = [
    b"",
    b"abc",
    bytes(range(256)),
    b'{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hi"}]}',
]
_TEXT_INPUTS = ["", "Hi!", "h\u00e9llo w\u00f6rld \u2014 \u4f60\u597d \U0001f642", "line1\nline2\r\n\t\u0000"]

_REQUEST_1 = (
    b'{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hi"}],'
    b'"seed":42,"temperature":0}'
)
_RESPONSE_1 = (
    b'{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini-2024-07-18",'
    b'"system_fingerprint":"fp_0123456789","choices":[{"index":0,"message":'
    b'{"role":"assistant","content":"Hi!"},"finish_reason":"stop"}]}'
)
_REQUEST_2 = b'{"model":"claude-3-5-haiku-latest","max_tokens":64,"messages":[{"role":"user","content":"Say hi"}]}'
_ERROR_2 = b'{"type":"error","error":{"type":"rate_limit_error","message":"Rate limited"}}'
_REQUEST_3 = (
    b'{"model":"gpt-4o-mini","messages":[{"role":"user","content":"' + b"x" * 64 + b'"}],'
    b'"seed":18446744073709551615}'
)
_RESPONSE_3 = (
    b'{"id":"chatcmpl-3","object":"chat.completion","model":"gpt-4o-mini-2024-07-18",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]}'
)

_WRITER = {"writer_id": "writer-0", "transactional_id": "evidence-writer-0", "version": "0.1.0"}


def committed_event() -> dict[str, Any]:
    """A COMMITTED capture that kept its request bytes (policy VALUE)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "event_id": "017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
        "stream": "tenant-a:support.chat",
        "captured_at": _T0 + 812_345,
        "content_key": digests.content_key(_REQUEST_1),
        "request_bytes": _REQUEST_1,
        "request_length": len(_REQUEST_1),
        "input_digest": digests.input_digest(b"Say hi"),
        "input_bytes": b"Say hi",
        "prompt_digest": digests.prompt_digest(b"Say hi"),
        "prompt_bytes": b"Say hi",
        "retrieval": [
            {"doc_id": "kb/greetings.md", "doc_version": "3",
             "chunk_digest": digests.chunk_digest(b"Greet warmly."), "chunk_bytes": b"Greet warmly."},
        ],
        "provider": {"name": "openai", "endpoint": "https://api.openai.com/v1/chat/completions", "api_version": None},
        "model_id": "gpt-4o-mini",
        "params": '{"seed":42,"temperature":0}',
        "fingerprint": "fp_0123456789",
        "response_model": "gpt-4o-mini-2024-07-18",
        "http_status": 200,
        "response_content_type": "application/json",
        "response_bytes": _RESPONSE_1,
        "response_length": len(_RESPONSE_1),
        "response_digest": digests.response_digest(_RESPONSE_1),
        "output_digest": digests.output_digest("Hi!"),
        "error_bytes": None,
        "outcome": "COMMITTED",
        "replay": {"seed": "42", "temperature": 0.0, "top_p": None, "deterministic": True},
        "capture": {
            "library": "evidence-store-gateway/0.1.0",
            "host": "app-1",
            "request_policy": "VALUE",
            "streamed": False,
            "closed_early": False,
            "truncated": False,
            "started_at": _T0,
            "duration_us": 812_345,
        },
        "encryption": None,
        "trace": None,
        "telemetry": None,
    }


def failed_event() -> dict[str, Any]:
    """A FAILED capture under policy HASH_ONLY: no request bytes, a verbatim error body."""
    return {
        "schema_version": SCHEMA_VERSION,
        "event_id": "017f22e2-79b1-7000-8000-000000000002",
        "stream": "tenant-a:support.chat",
        "captured_at": _T0 + 1_250_000,
        "content_key": digests.content_key(_REQUEST_2),
        "request_bytes": None,
        "request_length": len(_REQUEST_2),
        "input_digest": None,
        "input_bytes": None,
        "prompt_digest": None,
        "prompt_bytes": None,
        "retrieval": [],
        "provider": {
            "name": "anthropic",
            "endpoint": "https://api.anthropic.com/v1/messages",
            "api_version": "2023-06-01",
        },
        "model_id": "claude-3-5-haiku-latest",
        "params": '{"max_tokens":64}',
        "fingerprint": None,
        "response_model": None,
        "http_status": 429,
        "response_content_type": "application/json",
        "response_bytes": None,
        "response_length": None,
        "response_digest": None,
        "output_digest": None,
        "error_bytes": _ERROR_2,
        "outcome": "FAILED",
        "replay": {"seed": None, "temperature": 0.7, "top_p": 0.9, "deterministic": False},
        "capture": {
            "library": "evidence-store-gateway/0.1.0",
            "host": None,
            "request_policy": "HASH_ONLY",
            "streamed": True,
            "closed_early": False,
            "truncated": False,
            "started_at": _T0 + 1_000_000,
            "duration_us": 250_000,
        },
        "encryption": None,
        "trace": None,
        "telemetry": None,
    }


def truncated_event() -> dict[str, Any]:
    """A COMMITTED capture under policy VALUE whose bodies exceeded max_verbatim_bytes.

    No request or response bytes, yet content_key, response_digest, output_digest and both
    lengths cover the full bodies; the seed (2^64 - 1) does not fit an Avro long and is kept
    as decimal text.
    """
    return {
        "schema_version": SCHEMA_VERSION,
        "event_id": "017f22e2-79b2-7000-8000-000000000003",
        "stream": "tenant-b:batch",
        "captured_at": _T0 + 2_400_000,
        "content_key": digests.content_key(_REQUEST_3),
        "request_bytes": None,
        "request_length": len(_REQUEST_3),
        "input_digest": digests.input_digest(b"x" * 64),
        "input_bytes": None,
        "prompt_digest": None,
        "prompt_bytes": None,
        "retrieval": [
            {"doc_id": "kb/long.md", "doc_version": None,
             "chunk_digest": digests.chunk_digest(b"x" * 64), "chunk_bytes": None},
        ],
        "provider": {"name": "openai", "endpoint": "https://api.openai.com/v1/chat/completions", "api_version": None},
        "model_id": "gpt-4o-mini",
        "params": '{"seed":18446744073709551615}',
        "fingerprint": None,
        "response_model": "gpt-4o-mini-2024-07-18",
        "http_status": 200,
        "response_content_type": "application/json",
        "response_bytes": None,
        "response_length": len(_RESPONSE_3),
        "response_digest": digests.response_digest(_RESPONSE_3),
        "output_digest": digests.output_digest("Done."),
        "error_bytes": None,
        "outcome": "COMMITTED",
        "replay": {"seed": "18446744073709551615", "temperature": None, "top_p": None, "deterministic": True},
        "capture": {
            "library": "evidence-store-gateway/0.1.0",
            "host": None,
            "request_policy": "VALUE",
            "streamed": False,
            "closed_early": False,
            "truncated": True,
            "started_at": _T0 + 2_000_000,
            "duration_us": 400_000,
        },
        "encryption": None,
        "trace": None,
        "telemetry": None,
    }


def traced_event() -> dict[str, Any]:
    """committed_event() made in a recorded span: the trace context sealed with it (2.2)."""
    return {**committed_event(), "event_id": "017f22e2-79b3-7000-8000-000000000004",
            "trace": {"trace_id": TRACE_ID, "span_id": SPAN_ID}}


def mapped_event() -> dict[str, Any]:
    """A COMMITTED capture mapped from telemetry (2.2): the GenAI span of mapped_span_bytes(_T0),
    with content on the span, as BIJOTEL's processor exports it (its replay claims kept as
    claims: the output hash recomputed from the output text, the model version not). No request or
    response bytes; content_key equals span_digest; the input messages kept as the span carried
    them; the span named committed_event()'s capture in evidence.event_id, which it
    corroborates."""
    span = mapped_span_bytes(_T0)
    return {
        **committed_event(),
        "event_id": "017f22e2-79b4-7000-8000-000000000005",
        "captured_at": _T0 + 4_600_000,
        "content_key": digests.span_digest(span),
        "request_bytes": None,
        "request_length": len(span),
        "input_digest": digests.input_digest(INPUT_MESSAGES),
        "input_bytes": INPUT_MESSAGES,
        "prompt_digest": None,
        "prompt_bytes": None,
        "retrieval": [],
        "provider": {"name": "openai", "endpoint": "", "api_version": None},
        "params": None,
        "fingerprint": None,
        "response_model": None,
        "http_status": None,
        "response_content_type": None,
        "response_bytes": None,
        "response_length": None,
        "response_digest": None,
        "output_digest": digests.output_digest(OUTPUT_TEXT),
        "replay": {"seed": None, "temperature": None, "top_p": None, "deterministic": False},
        "capture": {
            "library": "evidence-store-otlp/0.1.0",
            "host": None,
            "request_policy": "HASH_ONLY",
            "streamed": False,
            "closed_early": False,
            "truncated": False,
            "started_at": _T0 + 4_000_000,
            "duration_us": 600_000,
        },
        "trace": {"trace_id": TRACE_ID, "span_id": SPAN_ID},
        "telemetry": {
            "dialect": "bijotel",
            "scope_name": SCOPE[0],
            "scope_version": SCOPE[1],
            "source": "SPAN",
            "otlp_digest": digests.otlp_digest(mapped_otlp_request(_T0)),
            "span_digest": digests.span_digest(span),
            "content_from": ["gen_ai.input.messages", "gen_ai.output.messages"],
            "rebuilt": False,
            "corroborates": "017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
            "claims": [
                {"name": "bijotel.replay.output_hash", "value": OUTPUT_HASH,
                 "verdict": "VERIFIED"},
                {"name": "bijotel.replay.model_version", "value": "gpt-4o-mini-2024-07-18",
                 "verdict": "UNVERIFIABLE"},
            ],
        },
    }


def sealed_records() -> tuple[dict[str, Any], dict[str, Any]]:
    """Seq 1 (committed_event, chained from GENESIS) and seq 2 (failed_event, chained from 1)."""
    first = seal(committed_event(), 0, digests.GENESIS, _T0 + 900_000, _WRITER, 0, 0)
    second = seal(failed_event(), 1, first["seal"]["record_digest"], _T0 + 1_300_000, _WRITER, 0, 1)
    return first, second


# Fixed key material of the sealed-content vectors (record contract 2.1): never use outside tests.
SEALED_DATA_KEY = bytes(range(32))
SEALED_KEY_ID = "00112233445566778899aabbccddeeff"
SEALED_KEK = bytes(range(0x20, 0x40))


def _counting_nonces() -> Any:
    n = iter(range(1, 1 << 32))
    return lambda: next(n).to_bytes(12, "big")


def encrypted_event() -> dict[str, Any]:
    """committed_event() sealed under SEALED_DATA_KEY: keyed commitments over the same
    plaintexts, each content field an envelope, nonces 1, 2, 3, ... (never do that with a
    real key: a nonce must never repeat under one key)."""
    from .sealing import SubjectKeys, seal_body

    keys = SubjectKeys(SEALED_KEY_ID, SEALED_DATA_KEY)
    plain = committed_event()
    keyed = {**plain,
             "content_key": keys.content_key(plain["request_bytes"]),
             "response_digest": keys.response_digest(plain["response_bytes"]),
             "input_digest": keys.input_digest(plain["input_bytes"]),
             "prompt_digest": keys.prompt_digest(plain["prompt_bytes"]),
             "retrieval": [{**c, "chunk_digest": keys.chunk_digest(c["chunk_bytes"])}
                           for c in plain["retrieval"]],
             "output_digest": keys.output_digest("Hi!")}
    return seal_body(keyed, keys, _counting_nonces())


def _sealed_vectors() -> dict[str, Any]:
    from . import envelope
    from .sealing import SubjectKeys, derive, wrap_key

    keys = SubjectKeys(SEALED_KEY_ID, SEALED_DATA_KEY)
    commitments = {
        kind: [{"input_hex": b.hex(), "commitment_hex": getattr(keys, kind)(b).hex()}
               for b in _BYTE_INPUTS]
        for kind in ("content_key", "response_digest", "input_digest", "prompt_digest",
                     "chunk_digest")}
    commitments["output_digest"] = [
        {"input_text": s, "commitment_hex": keys.output_digest(s).hex()} for s in _TEXT_INPUTS]
    nonce = bytes(range(12))
    env = keys.seal(_RESPONSE_1, "tenant-a:support.chat", "017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
                    "response_bytes", nonce)
    sealed = encrypted_event()
    return {
        "description": (
            "Sealed content (contract 2.1, scheme " + envelope.SCHEME + "). aead_key and "
            "commitment_key are HKDF-SHA-256(data_key, salt empty, info) with the infos given; "
            "a commitment is HMAC-SHA-256(commitment_key, prefix || input); an envelope is "
            "01 || key_id || nonce || AES-256-GCM(aead_key, nonce, plaintext, aad); "
            "wrapped_data_key is AES key wrap (RFC 3394) of data_key under kek."),
        "data_key_hex": SEALED_DATA_KEY.hex(),
        "key_id": SEALED_KEY_ID,
        "aead_info": envelope.AEAD_INFO.decode(),
        "aead_key_hex": derive(SEALED_DATA_KEY, envelope.AEAD_INFO).hex(),
        "commitment_info": envelope.COMMITMENT_INFO.decode(),
        "commitment_key_hex": derive(SEALED_DATA_KEY, envelope.COMMITMENT_INFO).hex(),
        "commitment_prefixes_hex": {k: v.hex() for k, v in envelope.COMMITMENT_PREFIXES.items()},
        "commitments": commitments,
        "envelope": {
            "plaintext_hex": _RESPONSE_1.hex(), "stream": "tenant-a:support.chat",
            "event_id": "017f22e2-79b0-7cc3-98c4-dc0c0c07398f", "field": "response_bytes",
            "nonce_hex": nonce.hex(),
            "aad_hex": envelope.associated_data(env[:envelope.HEADER_SIZE], "tenant-a:support.chat",
                                                "017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
                                                "response_bytes").hex(),
            "envelope_hex": env.hex(),
        },
        "kek_hex": SEALED_KEK.hex(),
        "wrapped_data_key_hex": wrap_key(SEALED_KEK, SEALED_DATA_KEY).hex(),
        "capture": _record_vector("capture_committed_encrypted", "CaptureEvent", sealed),
    }


def to_jsonable(value: Any) -> Any:
    """Return ``value`` with every bytes value replaced by its lowercase hex."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_jsonable(v) for v in value]
    return value


def _digest_vectors() -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for fn in (digests.content_key, digests.response_digest, digests.input_digest, digests.prompt_digest,
               digests.chunk_digest, digests.otlp_digest, digests.span_digest):
        out[fn.__name__] = [{"input_hex": b.hex(), "digest_hex": fn(b).hex()} for b in _BYTE_INPUTS]
    out["output_digest"] = [
        {"input_text": t, "input_hex": t.encode("utf-8").hex(), "digest_hex": digests.output_digest(t).hex()}
        for t in _TEXT_INPUTS
    ]
    body = codec.body_bytes(committed_event())
    cases = [(digests.GENESIS, 1, 0, b""), (digests.GENESIS, 1, _T0, body), (bytes(range(32)), 2**63, 2**64 - 1, b"x")]
    out["record_digest"] = [
        {
            "prev_hex": prev.hex(),
            "seq": seq,
            "occurred_at_micros": at,
            "body_hex": b.hex(),
            "digest_hex": digests.record_digest(prev, seq, at, b).hex(),
        }
        for prev, seq, at, b in cases
    ]
    return out


def _record_vector(name: str, schema_name: str, record: dict[str, Any]) -> dict[str, Any]:
    vector: dict[str, Any] = {"name": name, "schema": schema_name, "record": to_jsonable(record)}
    if schema_name == "EvidenceRecord":
        vector["body_hex"] = codec.body_bytes(record["body"]).hex()
        vector["record_digest_hex"] = record["seal"]["record_digest"].hex()
    else:
        vector["body_hex"] = codec.body_bytes(record).hex()
    vector["encoded_hex"] = codec.encode(schema_name, record).hex()
    return vector


def build() -> dict[str, Any]:
    """Return the vectors document as a JSON-ready dict."""
    first, second = sealed_records()
    return {
        "description": (
            "evidence-store record contract 2.2 test vectors. Digests are sha256(prefix || input), "
            "exactly 32 bytes; encodings are Avro single-object (c3 01, 8-byte little-endian "
            "CRC-64-AVRO fingerprint, Avro binary). Bytes values are lowercase hex. "
            "capture_mapped_from_telemetry's content_key is span_digest over "
            "mapped_span_hex, its otlp_digest over mapped_otlp_request_hex."
        ),
        "digests": _digest_vectors(),
        "schemas": {
            name: {
                "parsing_canonical_form": codec.parsing_canonical_form(name),
                "fingerprint_hex": codec.fingerprint(name).hex(),
            }
            for name in codec.SCHEMA_NAMES
        },
        "records": [
            _record_vector("capture_committed_value", "CaptureEvent", committed_event()),
            _record_vector("capture_failed_hash_only", "CaptureEvent", failed_event()),
            _record_vector("capture_truncated_big_seed", "CaptureEvent", truncated_event()),
            _record_vector("capture_committed_traced", "CaptureEvent", traced_event()),
            _record_vector("capture_mapped_from_telemetry", "CaptureEvent", mapped_event()),
            _record_vector("evidence_seq1_from_genesis", "EvidenceRecord", first),
            _record_vector("evidence_seq2_chained", "EvidenceRecord", second),
        ],
        "sealed": _sealed_vectors(),
        "mapped_span_hex": mapped_span_bytes(_T0).hex(),
        "mapped_otlp_request_hex": mapped_otlp_request(_T0).hex(),
    }


def render() -> str:
    """Return the exact text of ``vectors.json``."""
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write ``vectors.json``, or with ``--check`` report whether it is up to date."""
    parser = argparse.ArgumentParser(prog="python -m evidence_contract.vectors", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if vectors.json is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = PATH.read_text("utf-8") if PATH.exists() else ""
        if current != text:
            print(f"{PATH} is stale; run python -m evidence_contract.vectors", file=sys.stderr)
            return 1
        return 0
    PATH.write_text(text, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
