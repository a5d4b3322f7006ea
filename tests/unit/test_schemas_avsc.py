"""The .avsc files themselves: rules they must keep, canonical forms and pinned fingerprints."""

import json
import re

import avro.schema
import pytest

import evidence_contract as schemas
from evidence_contract import DIGEST_FIELDS, SCHEMA_NAMES, fingerprint, parsing_canonical_form
from evidence_contract.files import schema_file
from writer.reasons import Reason

AVRO_DIR = schema_file("avro")
NAMESPACE = "evidence.v2"

# Changing a schema changes these, and with them every message header: do it on purpose.
# Record contract 2.2 (2.1 was dcad4f6e8bfbc7de, 598d7a24f41b9228; 1.0 was 6e9b9f33df6086e6,
# 90d30cf5699b4afc, 5cd190768a8d12ba).
PINNED_FINGERPRINTS = {
    "CaptureEvent": "8361f22a8a039336",
    "EvidenceRecord": "d321f2ab8d47b5d4",
    "WriterHead": "0abef15a90d74c6b",
}

PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def load(name):
    return json.loads((AVRO_DIR / f"{name}.avsc").read_text("utf-8"))


def walk(node):
    """Yield every dict in a schema JSON tree."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item)


def test_schema_files_are_exactly_the_published_names():
    assert sorted(p.stem for p in AVRO_DIR.glob("*.avsc")) == sorted(SCHEMA_NAMES)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_no_avro_map_anywhere(name):
    assert not [n for n in walk(load(name)) if n.get("type") == "map" or "values" in n]


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_no_logical_types(name):
    # fastavro converts logical types on read, which would break exact round-trips.
    assert not [n for n in walk(load(name)) if "logicalType" in n]


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_every_field_has_a_doc(name):
    records = [n for n in walk(load(name)) if n.get("type") == "record"]
    assert records
    for record in records:
        for field in record["fields"]:
            assert isinstance(field.get("doc"), str) and field["doc"].strip(), (record["name"], field["name"])


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_namespace_and_no_fixed_types(name):
    # Digests are plain bytes: a named Sha256 fixed used many times is what made Java and the
    # Python avro package disagree on the canonical form (contract 1.0).
    schema = load(name)
    assert schema["namespace"] == NAMESPACE
    assert not [n for n in walk(schema) if n.get("type") == "fixed"]


def _fields(node, prefix=""):
    """Yield (path, field) for every field, ``name[]`` for the items of an array, ``name?``
    for the record of a ``["null", record]`` union (``digest_fields``' paths)."""
    for field in node["fields"]:
        path = prefix + field["name"]
        yield path, field
        t = field["type"]
        if isinstance(t, list) and len(t) == 2 and t[0] == "null" and isinstance(t[1], dict) \
                and t[1].get("type") == "record":
            yield from _fields(t[1], path + "?.")
        elif isinstance(t, dict) and t.get("type") == "record":
            yield from _fields(t, path + ".")
        elif isinstance(t, dict) and t.get("type") == "array" and isinstance(t["items"], dict):
            yield from _fields(t["items"], path + "[].")


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_digest_fields_are_32_byte_bytes_and_say_so(name):
    fields = dict(_fields(load(name)))
    documented = {p for p, f in fields.items() if "exactly 32 bytes" in f["doc"].lower()}
    assert documented == set(DIGEST_FIELDS[name])
    for path in DIGEST_FIELDS[name]:
        assert fields[path]["type"] in ("bytes", ["null", "bytes"]), path
        if fields[path]["type"] == "bytes":
            assert fields[path]["doc"].startswith("Exactly 32 bytes"), path
        else:
            assert fields[path]["doc"].startswith("Null, or exactly 32 bytes"), path


@pytest.mark.parametrize("path,prefix", [
    ("content_key", "0x00"), ("response_digest", "0x01"), ("input_digest", "0x02"),
    ("input_bytes", "0x02"), ("prompt_digest", "0x03"), ("prompt_bytes", "0x03"),
    ("output_digest", "0x04"), ("retrieval[].chunk_digest", "0x06"),
    ("retrieval[].chunk_bytes", "0x06"), ("telemetry?.otlp_digest", "0x07"),
    ("telemetry?.span_digest", "0x08"),
])
def test_digest_docs_name_their_domain_prefix(path, prefix):
    assert f"sha256({prefix} ||" in dict(_fields(load("CaptureEvent")))[path]["doc"]


def test_every_rejection_reason_is_documented_in_the_capture_schema():
    # A producer in another language writes a valid capture from the schema alone.
    text = (AVRO_DIR / "CaptureEvent.avsc").read_text("utf-8")
    assert [r.value for r in Reason if r.value not in text] == []


# Writer rules (record contract 2.0, section 5) and the fields whose docs must state them.
WRITER_RULES = {
    "schema_version": ["\"2.0\"", "UNSUPPORTED_VERSION"],
    "event_id": ["UUIDv7", "lowercase", "absorbed", "BAD_EVENT_ID"],
    "stream": ["[A-Za-z0-9._:-]{1,128}", "message key", "UTF-8", "KEY_MISMATCH", "BAD_STREAM_ID"],
    "content_key": ["request_bytes", "DIGEST_MISMATCH"],
    "request_bytes": ["VALUE", "truncated", "MISSING_FIELD", "BAD_TRUNCATION", "content_key",
                      "request_length", "LENGTH_MISMATCH"],
    "request_length": ["request_bytes", "LENGTH_MISMATCH", "always set"],
    "input_digest": ["input_bytes", "MISSING_FIELD", "DIGEST_MISMATCH"],
    "input_bytes": ["VALUE", "truncated", "input_digest", "BAD_TRUNCATION", "DIGEST_MISMATCH"],
    "prompt_digest": ["prompt_bytes", "MISSING_FIELD", "DIGEST_MISMATCH"],
    "prompt_bytes": ["VALUE", "truncated", "prompt_digest", "BAD_TRUNCATION", "DIGEST_MISMATCH"],
    "retrieval[].chunk_digest": ["chunk_bytes", "DIGEST_MISMATCH", "BAD_DIGEST"],
    "retrieval[].chunk_bytes": ["VALUE", "truncated", "chunk_digest", "BAD_TRUNCATION"],
    "response_bytes": ["COMMITTED", "truncated", "MISSING_FIELD", "BAD_TRUNCATION",
                       "response_digest", "DIGEST_MISMATCH", "response_length", "LENGTH_MISMATCH"],
    "response_length": ["COMMITTED", "response_digest", "null", "LENGTH_MISMATCH"],
    "response_digest": ["COMMITTED", "response_bytes", "MISSING_FIELD", "DIGEST_MISMATCH"],
    "error_bytes": ["truncated", "65536", "BAD_TRUNCATION"],
    "outcome": ["COMMITTED", "response_digest", "response_length", "response_bytes", "truncated"],
    "replay.seed": ["decimal text", "2^63", "BAD_SEED"],
    "replay.deterministic": ["seed", "BAD_SEED"],
    "capture.truncated": ["max_verbatim_bytes", "request_bytes", "response_bytes", "input_bytes",
                          "prompt_bytes", "chunk_bytes", "65536", "content_key",
                          "response_digest", "output_digest", "length", "BAD_TRUNCATION"],
}


@pytest.mark.parametrize("path", sorted(WRITER_RULES))
def test_field_docs_state_the_writer_rules(path):
    doc = dict(_fields(load("CaptureEvent")))[path]["doc"]
    assert [w for w in WRITER_RULES[path] if w not in doc] == []


def test_capture_event_doc_states_the_record_wide_rules():
    doc = load("CaptureEvent")["doc"]
    for words in ("message key", "UNKNOWN_FINGERPRINT", "1.0", "byte for byte", "canonical",
                  "re-encodes", "record_digest covers the re-encoded bytes", "exactly 32 bytes",
                  "BAD_DIGEST"):
        assert words in doc, words


def test_capture_event_field_order():
    assert [f["name"] for f in load("CaptureEvent")["fields"]] == [
        "schema_version", "event_id", "stream", "captured_at", "content_key", "request_bytes",
        "request_length", "input_digest", "input_bytes", "prompt_digest", "prompt_bytes",
        "retrieval", "provider", "model_id", "params", "fingerprint", "response_model",
        "http_status", "response_content_type", "response_bytes", "response_length",
        "response_digest", "output_digest", "error_bytes", "outcome", "replay", "capture",
        "encryption", "trace", "telemetry",
    ]  # fmt: skip
    fields = dict(_fields(load("CaptureEvent")))
    assert [f["name"] for f in fields["retrieval"]["type"]["items"]["fields"]] == [
        "doc_id", "doc_version", "chunk_digest", "chunk_bytes"]
    assert [f["name"] for f in fields["capture"]["type"]["fields"]] == [
        "library", "host", "request_policy", "streamed", "closed_early", "truncated",
        "started_at", "duration_us"]
    assert fields["replay.seed"]["type"] == ["null", "string"]
    assert fields["request_length"]["type"] == "long"
    assert fields["response_length"]["type"] == ["null", "long"]
    assert fields["capture.truncated"]["type"] == "boolean"


def test_evidence_record_has_body_first():
    # split_record relies on the body being a byte prefix of the record.
    assert [f["name"] for f in load("EvidenceRecord")["fields"]] == ["body", "seal"]


def test_evidence_record_body_is_capture_event_inline():
    # Self-contained: the body's type is CaptureEvent's full definition, not a name to resolve.
    assert load("EvidenceRecord")["fields"][0]["type"] == load("CaptureEvent")


def _named(canonical):
    """(definitions, references) of named types in a canonical form, found independently."""
    defined, referenced = [], []

    def visit(node):
        if isinstance(node, str):
            if node not in PRIMITIVES:
                referenced.append(node)
        elif isinstance(node, list):
            for branch in node:
                visit(branch)
        else:
            if node["type"] in ("record", "enum", "fixed"):
                defined.append(node["name"])
            elif node["type"] == "array":
                visit(node["items"])
            else:
                visit(node["type"])
            for field in node.get("fields", ()):
                visit(field["type"])

    visit(json.loads(canonical))
    return defined, referenced


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_no_named_type_appears_twice_in_the_canonical_form(name):
    pcf = parsing_canonical_form(name)
    defined, referenced = _named(pcf)
    assert defined and referenced == [] and len(set(defined)) == len(defined)
    # And textually: each full name occurs exactly once, at its definition.
    names = re.findall(r'"(evidence\.v2\.[A-Za-z_][A-Za-z0-9_]*)"', pcf)
    assert sorted(names) == sorted(defined)
    assert pcf.count(f'"{NAMESPACE}.') == len(defined)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_apache_avro_computes_the_same_canonical_form_and_fingerprint(name):
    # The Python avro package expands repeated named types, Java/fastavro do not: with no
    # repeats the two agree, which is the point of contract 2.0.
    parsed = avro.schema.parse((AVRO_DIR / f"{name}.avsc").read_text("utf-8"))
    assert parsed.canonical_form == parsing_canonical_form(name)
    assert parsed.fingerprint("CRC-64-AVRO") == fingerprint(name)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_fingerprints_are_pinned(name):
    assert fingerprint(name).hex() == PINNED_FINGERPRINTS[name]


# --- An independent Parsing Canonical Form, written after Java's SchemaNormalization.build:
# a named type is written in full the first time and as its quoted full name after that.


def _fullname(name, namespace):
    return name if "." in name else f"{namespace}.{name}"


def _pcf(node, namespace, seen):
    if isinstance(node, list):
        return "[" + ",".join(_pcf(n, namespace, seen) for n in node) + "]"
    if isinstance(node, str):
        if node in PRIMITIVES:
            return f'"{node}"'
        full = _fullname(node, namespace)
        assert full in seen, f"{full} is not defined in this file"
        return f'"{full}"'
    kind = node["type"]
    if isinstance(kind, (dict, list)):
        return _pcf(kind, namespace, seen)
    if kind in PRIMITIVES:
        return f'"{kind}"'
    if kind == "array":
        return '{"type":"array","items":' + _pcf(node["items"], namespace, seen) + "}"
    namespace = node.get("namespace", namespace)
    full = _fullname(node["name"], namespace)
    namespace = full.rsplit(".", 1)[0]
    seen.add(full)
    head = f'{{"name":"{full}","type":"{kind}"'
    if kind == "enum":
        return head + ',"symbols":[' + ",".join(f'"{s}"' for s in node["symbols"]) + "]}"
    if kind == "fixed":
        return head + f',"size":{node["size"]}}}'
    fields = ",".join(
        f'{{"name":"{f["name"]}","type":' + _pcf(f["type"], namespace, seen) + "}" for f in node["fields"]
    )
    return head + ',"fields":[' + fields + "]}"


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_canonical_form_matches_an_independent_implementation(name):
    # Each file alone: no definitions from other files are needed (or allowed).
    assert parsing_canonical_form(name) == _pcf(load(name), None, set())


def test_evidence_record_canonical_form_embeds_capture_event():
    pcf = parsing_canonical_form("EvidenceRecord")
    assert pcf.startswith('{"name":"evidence.v2.EvidenceRecord","type":"record","fields":[{"name":"body","type":')
    assert parsing_canonical_form("CaptureEvent") in pcf


# --- Rabin CRC-64-AVRO exactly as the Avro specification gives it.

EMPTY64 = 0xC15D213AA4D7A795


def _fp_table():
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (EMPTY64 & -(fp & 1))
        table.append(fp)
    return table


FP_TABLE = _fp_table()


def fingerprint64(data: bytes) -> int:
    fp = EMPTY64
    for byte in data:
        fp = (fp >> 8) ^ FP_TABLE[(fp ^ byte) & 0xFF]
    return fp


def test_rabin_of_empty_is_the_spec_constant():
    assert fingerprint64(b"") == EMPTY64


# From Avro's share/test/data/schema-tests.txt (signed Java longs), checked there against Java.
@pytest.mark.parametrize(
    "canonical,signed_fp",
    [
        ('"null"', 7195948357588979594),
        ('"int"', 8247732601305521295),
        ('"string"', -8142146995180207161),
        ('{"name":"x.y.foo","type":"record","fields":[]}', 5916914534497305771),
        ('{"name":"x.y.z.foo","type":"fixed","size":32}', -3064184465700546786),
    ],
)
def test_rabin_matches_avro_test_data(canonical, signed_fp):
    assert fingerprint64(canonical.encode()) == signed_fp & (2**64 - 1)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_codec_fingerprint_is_little_endian_rabin_of_canonical_form(name):
    fp = fingerprint64(parsing_canonical_form(name).encode("utf-8"))
    assert fingerprint(name) == fp.to_bytes(8, "little")
