"""The .avsc files themselves: rules they must keep, canonical forms and pinned fingerprints."""

import json
from pathlib import Path

import pytest

import evidence_contract as schemas
from evidence_contract import SCHEMA_NAMES, fingerprint, parsing_canonical_form

AVRO_DIR = Path(schemas.__file__).parent / "avro"
NAMESPACE = "evidence.v1"

# Changing a schema changes these, and with them every message header: do it on purpose.
PINNED_FINGERPRINTS = {
    "CaptureEvent": "6e9b9f33df6086e6",
    "EvidenceRecord": "90d30cf5699b4afc",
    "WriterHead": "5cd190768a8d12ba",
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
def test_namespace_and_digest_type(name):
    schema = load(name)
    assert schema["namespace"] == NAMESPACE
    for fixed in (n for n in walk(schema) if n.get("type") == "fixed"):
        assert (fixed["name"], fixed["size"]) == ("Sha256", 32)


def test_capture_event_field_order():
    assert [f["name"] for f in load("CaptureEvent")["fields"]] == [
        "schema_version", "event_id", "stream", "captured_at", "content_key", "request_bytes",
        "input_digest", "prompt_digest", "retrieval", "provider", "model_id", "params",
        "fingerprint", "response_model", "http_status", "response_content_type",
        "response_bytes", "response_digest", "output_digest", "error_bytes", "outcome",
        "replay", "capture",
    ]  # fmt: skip


def test_evidence_record_has_body_first():
    # split_record relies on the body being a byte prefix of the record.
    assert [f["name"] for f in load("EvidenceRecord")["fields"]] == ["body", "seal"]


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_fingerprints_are_pinned(name):
    assert fingerprint(name).hex() == PINNED_FINGERPRINTS[name]


# --- An independent Parsing Canonical Form, written after Java's SchemaNormalization.build:
# a named type is written in full the first time and as its quoted full name after that.


def _fullname(name, namespace):
    return name if "." in name else f"{namespace}.{name}"


def _pcf(node, namespace, seen, defs):
    if isinstance(node, list):
        return "[" + ",".join(_pcf(n, namespace, seen, defs) for n in node) + "]"
    if isinstance(node, str):
        if node in PRIMITIVES:
            return f'"{node}"'
        full = _fullname(node, namespace)
        if full in seen:
            return f'"{full}"'
        return _pcf(defs[full], namespace, seen, defs)  # a reference to another file's schema
    kind = node["type"]
    if kind in PRIMITIVES:
        return f'"{kind}"'
    if kind == "array":
        return '{"type":"array","items":' + _pcf(node["items"], namespace, seen, defs) + "}"
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
        f'{{"name":"{f["name"]}","type":' + _pcf(f["type"], namespace, seen, defs) + "}" for f in node["fields"]
    )
    return head + ',"fields":[' + fields + "]}"


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_canonical_form_matches_an_independent_implementation(name):
    defs = {f"{NAMESPACE}.{n}": load(n) for n in SCHEMA_NAMES}
    assert parsing_canonical_form(name) == _pcf(load(name), None, set(), defs)


def test_evidence_record_canonical_form_embeds_capture_event():
    pcf = parsing_canonical_form("EvidenceRecord")
    assert pcf.startswith('{"name":"evidence.v1.EvidenceRecord","type":"record","fields":[{"name":"body","type":')
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
