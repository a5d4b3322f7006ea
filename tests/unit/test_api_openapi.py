"""The OpenAPI document is part of the API's contract: its operations and schemas are pinned.

The pins were taken from the app before its routes moved into one router per resource
(api/routers/), so the move is shown to change nothing a client or a generated client sees.
The deliberate changes since: ``GET /streams/{stream}/records`` takes ``?include=bytes``
like the other record routes (it was ignored before); and the hostile-input tightening: the
two body routes document 408 and 413 (api.limits), the verify body's ids and seq are strict
(patterns, minimum, no null-or-anything) with its two either/or rules as ``oneOf``, and the
event and content-key path parameters carry their patterns. Issue 12 added the verifiable
log's routes (checkpoint, proofs, log key, cosignatures) and their three schemas. Issue 14
added the long poll on a stream's head: ``GET /streams/{stream}`` takes ``?after_seq`` and
``?wait_ms``. Trust by default: the single-record routes serve an erased record as a page does
(no 410), a record by event id says ``copies`` and ``is_copy``, and the stream audit is
bounded per key (429 ``TooManyBody``); the evidence bundles (a record with its checkpoint and
proofs, for readers that verify) and their three schemas. Issue 24 added the public
tlog-tiles read of the deployment log and of each stream's tree (``/log/checkpoint``,
``/log/tile/...``, ``/log/streams/{stream}/checkpoint`` and ``.../tile/...``, no API key),
and the bundles' path to a witnessed deployment checkpoint (``log``, ``log_reason``; its two
schemas ``BundleLog`` and ``LogInclusion``). Issue 26 added the verify body's ``basis``
(``bijotel``: a mapped record's BIJOTEL claim) and BIJOTEL's answer, ``BijotelReplayOut``.
Issue 27 added the record listings' filters (``model``, ``outcome``, ``fingerprint``,
``since``, ``until``, ``erased``, ``encrypted``) and ``GET /records`` (a stream pattern, paged
by (stream, seq); ``RecordList``, ``RecordCursor``).
"""

import pytest

from api import Keyring, Settings, create_app

E = "ErrorBody"
GUARDED = {"401": E, "404": E, "422": E, "503": E}
WITH_BODY = {**GUARDED, "408": E, "413": E}
ERASED = {"410": "ErasedBody"}
BUSY = {"429": "TooManyBody"}
TILE_ERRORS = {"400": E, "404": E, "422": E, "503": E}  # 400: not a tlog-tiles path

# (method, path, operationId, tags, parameters as "in:name", response status -> schema or
# media type, needs the API key). In the order of the document, which is the match order.
OPERATIONS = [
    ("POST", "/replay/verify", "replay_verify_replay_verify_post", ["replay"], (),
     {"200": "VerifyResponse", **WITH_BODY, **ERASED}, True),
    ("GET", "/replay/{content_key_hex}", "replay_serve_replay__content_key_hex__get",
     ["replay"], ("path:content_key_hex", "query:seq", "query:stream"),
     {"200": "application/octet-stream", **GUARDED, **ERASED}, True),
    ("GET", "/replay/{content_key_hex}/bundle",
     "replay_bundle_replay__content_key_hex__bundle_get", ["verifiable log"],
     ("path:content_key_hex", "query:known_size", "query:stream"),
     {"200": "EvidenceBundle", **GUARDED, **ERASED}, True),
    ("GET", "/streams/{stream}/records/{seq}/bundle",
     "record_bundle_streams__stream__records__seq__bundle_get", ["verifiable log"],
     ("path:seq", "path:stream", "query:known_size"),
     {"200": "EvidenceBundle", **GUARDED, **ERASED}, True),
    ("GET", "/streams", "list_streams_streams_get", ["records"], ("query:after", "query:limit"),
     {"200": "StreamList", **GUARDED}, True),
    ("GET", "/streams/{stream}", "get_stream_streams__stream__get", ["records"],
     ("path:stream", "query:after_seq", "query:wait_ms"), {"200": "StreamDetail", **GUARDED},
     True),
    ("GET", "/streams/{stream}/records", "list_records_streams__stream__records_get",
     ["records"], ("path:stream", "query:after_seq", "query:encrypted", "query:erased",
                   "query:fingerprint", "query:include", "query:limit", "query:model",
                   "query:outcome", "query:since", "query:until"),
     {"200": "RecordPage", **GUARDED}, True),
    ("GET", "/records", "list_all_records_records_get", ["records"],
     ("query:after_seq", "query:after_stream", "query:encrypted", "query:erased",
      "query:fingerprint", "query:include", "query:limit", "query:model", "query:outcome",
      "query:since", "query:stream", "query:until"),
     {"200": "RecordList", **GUARDED}, True),
    ("GET", "/streams/{stream}/records/{seq}", "get_record_streams__stream__records__seq__get",
     ["records"], ("path:seq", "path:stream", "query:include"),
     {"200": "RecordOut", **GUARDED}, True),
    ("GET", "/events/{event_id}", "get_event_events__event_id__get", ["records"],
     ("path:event_id", "query:include"), {"200": "RecordOut", **GUARDED}, True),
    ("GET", "/traces/{trace_id}/records", "trace_records_traces__trace_id__records_get",
     ["records"], ("path:trace_id", "query:limit"), {"200": "TraceRecords", **GUARDED}, True),
    ("GET", "/streams/{stream}/audit", "audit_stream_streams__stream__audit_get",
     ["verification"], ("path:stream",), {"200": "application/json", **GUARDED, **BUSY},
     True),
    ("GET", "/streams/{stream}/records/{seq}/fidelity",
     "record_fidelity_streams__stream__records__seq__fidelity_get", ["verification"],
     ("path:seq", "path:stream"), {"200": "application/json", **GUARDED}, True),
    ("POST", "/fidelity/analyze", "fidelity_analyze_fidelity_analyze_post", ["verification"],
     (), {"200": "application/json", **WITH_BODY}, True),
    ("GET", "/streams/{stream}/checkpoint", "get_checkpoint_streams__stream__checkpoint_get",
     ["verifiable log"], ("path:stream", "query:tree_size"), {"200": "text/plain", **GUARDED},
     True),
    ("GET", "/streams/{stream}/proof/inclusion",
     "prove_inclusion_streams__stream__proof_inclusion_get", ["verifiable log"],
     ("path:stream", "query:seq", "query:tree_size"), {"200": "InclusionProof", **GUARDED}, True),
    ("GET", "/streams/{stream}/proof/consistency",
     "prove_consistency_streams__stream__proof_consistency_get", ["verifiable log"],
     ("path:stream", "query:first", "query:second"), {"200": "ConsistencyProof", **GUARDED},
     True),
    ("GET", "/log/key", "get_log_key_log_key_get", ["verifiable log"], (),
     {"200": "text/plain", "404": E, "503": E}, False),
    ("POST", "/streams/{stream}/checkpoint/cosignatures",
     "post_cosignature_streams__stream__checkpoint_cosignatures_post", ["verifiable log"],
     ("path:stream",), {"202": "CosignatureAccepted", **WITH_BODY, "403": E, "409": E,
                        "415": E}, True),
    ("GET", "/log/checkpoint", "get_log_checkpoint_log_checkpoint_get", ["public log"], (),
     {"200": "text/plain", "404": E, "503": E}, False),
    ("GET", "/log/tile/{path}", "get_log_tile_log_tile__path__get", ["public log"],
     ("path:path",), {"200": "application/octet-stream", **TILE_ERRORS}, False),
    ("GET", "/log/streams/{stream}/checkpoint",
     "get_stream_checkpoint_log_streams__stream__checkpoint_get", ["public log"],
     ("path:stream",), {"200": "text/plain", "404": E, "422": E, "503": E}, False),
    ("GET", "/log/streams/{stream}/tile/{path}",
     "get_stream_tile_log_streams__stream__tile__path__get", ["public log"],
     ("path:path", "path:stream"), {"200": "application/octet-stream", **TILE_ERRORS}, False),
    ("POST", "/admin/erasures", "post_erasure_admin_erasures_post", ["administration"], (),
     {"202": "ErasureAccepted", **WITH_BODY, "403": E, "409": E}, True),
    ("GET", "/healthz", "healthz_healthz_get", ["operations"], (),
     {"200": "application/json"}, False),
    ("GET", "/readyz", "readyz_readyz_get", ["operations"], (),
     {"200": "application/json", "503": E}, False),
    ("GET", "/metrics", "metrics_text_metrics_get", ["operations"], (), {"200": None}, False),
]

SCHEMAS = {
    "BundleConsistency": ("first", "second", "hashes"),
    "BundleInclusion": ("leaf_index", "tree_size", "hashes"),
    "BundleLog": ("entry_index", "entry", "record_inclusion", "checkpoint", "entry_inclusion"),
    "ConsistencyProof": ("first", "second", "tree_size", "hashes"),
    "CosignatureAccepted": ("stream", "tree_size", "witnesses"),
    "ErasedBody": ("error", "message", "erased_at", "request_id"),
    "EvidenceBundle": ("stream", "seq", "event_id", "content_type", "content", "record_b64",
                       "leaf_hash", "source", "finding", "checkpoint", "inclusion",
                       "consistency", "log", "log_reason"),
    "ErasureOut": ("erased_at", "erased_at_us", "request_id"),
    "ErasureAccepted": ("request_id", "key_ids", "erased_at", "status"),
    "ErrorBody": ("error", "message"),
    "FindingOut": ("id", "stream", "seq", "kind", "detail", "log_partition", "log_offset",
                   "found_at"),
    "InclusionProof": ("leaf_index", "tree_size", "leaf_hash", "hashes"),
    "LogInclusion": ("leaf_index", "tree_size", "hashes"),
    "LogPosition": ("partition", "offset"),
    "Provider": ("name", "endpoint", "api_version"),
    "RecordOut": ("stream", "seq", "event_id", "schema_version", "occurred_at",
                  "occurred_at_us", "captured_at", "outcome", "content_key", "prev_digest",
                  "record_digest", "response_digest", "output_digest", "input_digest",
                  "prompt_digest", "provider", "model_id", "response_model", "fingerprint",
                  "params", "http_status", "response_content_type", "replay",
                  "request_policy", "streamed", "closed_early", "truncated", "writer_id",
                  "request_length", "response_length", "log", "capture_method", "trace",
                  "telemetry", "content", "key_id", "erasure",
                  "request_b64", "response_b64",
                  "error_b64", "input_b64", "prompt_b64", "record_b64", "record_sha256",
                  "record_leaf_hash", "copies", "is_copy"),
    "RecordPage": ("stream", "records", "next_after_seq"),
    "Replay": ("seed", "temperature", "top_p", "deterministic"),
    "StreamDetail": ("stream", "head_seq", "head_digest", "record_count", "first_at",
                     "last_at", "findings_count", "findings"),
    "StreamList": ("streams", "next_after"),
    "StreamSummary": ("stream", "head_seq", "head_digest", "record_count", "first_at",
                      "last_at"),
    "TelemetryClaimOut": ("name", "value", "verdict"),
    "TelemetryOut": ("dialect", "scope_name", "scope_version", "source", "otlp_digest",
                     "span_digest", "content_from", "rebuilt", "corroborates", "claims"),
    "TooManyBody": ("error", "message", "limit", "setting"),
    "TraceOut": ("trace_id", "span_id"),
    "RecordCursor": ("stream", "seq"),
    "RecordList": ("stream", "records", "next_after"),
    "TraceRecords": ("trace_id", "records", "more"),
    "VerifyResponse": ("match", "original_hash", "replay_hash", "compared", "deterministic",
                       "model_version", "stream", "seq", "reason", "bijotel"),
    "BijotelReplayOut": ("match", "original_hash", "replay_hash", "deterministic",
                         "model_version", "reason", "claim", "claim_verdict"),
}


@pytest.fixture(scope="module")
def spec():
    # create_app connects to nothing: the pool opens in the lifespan, which never runs here.
    settings = Settings("postgresql://unused/unused", Keyring([("k", "k-0123456789abcdef0123456789abcdef", ["*"])]))
    return create_app(settings).openapi()


def _schema_or_media(response):
    for media, body in response.get("content", {}).items():
        return body.get("schema", {}).get("$ref", "").rsplit("/", 1)[-1] or media
    return None


def test_operations_are_pinned(spec):
    found = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            params = tuple(sorted(f"{p['in']}:{p['name']}" for p in op.get("parameters", [])))
            responses = {code: _schema_or_media(r) for code, r in op["responses"].items()}
            found.append((method.upper(), path, op["operationId"], op["tags"], params,
                          responses, bool(op.get("security"))))
    assert found == OPERATIONS


def test_component_schemas_are_pinned(spec):
    schemas = spec["components"]["schemas"]
    assert {name: tuple(s.get("properties", {})) for name, s in schemas.items()} == SCHEMAS
    assert spec["components"]["securitySchemes"] == {"ApiKey": {
        "type": "http", "description": "`Authorization: Bearer <API key>`", "scheme": "bearer"}}


def test_request_bodies_are_pinned(spec):
    verify = spec["paths"]["/replay/verify"]["post"]["requestBody"]
    assert verify["required"] is True
    assert list(verify["content"]["application/json"]["schema"]["properties"]) == [
        "stream", "seq", "event_id", "replayed_output", "replayed_response_b64", "basis"]
    manifest = spec["paths"]["/fidelity/analyze"]["post"]["requestBody"]
    assert manifest["content"]["application/json"]["schema"]["type"] == "object"


def test_verify_body_is_strict_in_the_schema(spec):
    schema = spec["paths"]["/replay/verify"]["post"]["requestBody"]["content"][
        "application/json"]["schema"]
    props = schema["properties"]

    def branch(name, kind):
        return next(b for b in props[name]["anyOf"] if b.get("type") == kind)

    assert branch("seq", "integer") == {"type": "integer", "minimum": 1,
                                        "maximum": (1 << 63) - 1}
    assert branch("stream", "string")["pattern"] == "^[A-Za-z0-9._:-]{1,128}$"
    assert branch("event_id", "string")["pattern"] == (
        "^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
    assert "pattern" in branch("replayed_response_b64", "string")
    assert schema["additionalProperties"] is False
    record, replayed = schema["allOf"]
    assert [b["required"] for b in record["oneOf"]] == [["stream", "seq"], ["event_id"]]
    assert [b["required"] for b in replayed["oneOf"]] == [["replayed_output"],
                                                         ["replayed_response_b64"]]


def test_id_path_parameters_carry_their_patterns(spec):
    def param(path, name):
        op = next(iter(spec["paths"][path].values()))
        return next(p for p in op["parameters"] if p["name"] == name)["schema"]

    assert param("/events/{event_id}", "event_id")["pattern"].startswith("^[0-9a-f]{8}-")
    assert param("/traces/{trace_id}/records", "trace_id")["pattern"] == "^[0-9a-f]{32}$"
    assert param("/replay/{content_key_hex}", "content_key_hex")["pattern"] == \
        "^[0-9a-fA-F]{64}$"
    assert param("/streams/{stream}", "stream")["pattern"] == "^[A-Za-z0-9._:-]{1,128}$"
    assert param("/streams/{stream}/records/{seq}", "seq")["minimum"] == 1


def test_the_audit_documents_its_per_key_bound(spec):
    busy = spec["paths"]["/streams/{stream}/audit"]["get"]["responses"]["429"]
    assert "Retry-After" in busy["headers"]
    assert "EVIDENCE_API_MAX_AUDITS_PER_KEY" in \
        spec["paths"]["/streams/{stream}/audit"]["get"]["description"]
