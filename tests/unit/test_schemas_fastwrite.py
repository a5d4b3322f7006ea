"""schemas._fastwrite: the generated writer writes what fastavro writes, byte for byte, for
every valid record it accepts, and ``encode`` keeps fastavro's answer and wording for the
rest (the writer is only a fast path: its bytes are kept after the strict read-back)."""

import copy
import io
import random

import fastavro
import pytest

from evidence_contract import EncodeError, encode
from evidence_contract._avro import SCHEMAS
from evidence_contract._fastwrite import compile_writer
from evidence_contract.codec import _FAST_WRITE, _HEADER_SIZE as HEADER
from evidence_contract.vectors import committed_event, failed_event, sealed_records


def fastavro_bytes(name, record):
    out = io.BytesIO()
    fastavro.schemaless_writer(out, SCHEMAS[name].parsed, record, strict_allow_default=True)
    return out.getvalue()


def test_every_current_schema_has_a_generated_writer():
    assert all(_FAST_WRITE[name] is not None for name in ("CaptureEvent", "EvidenceRecord",
                                                           "WriterHead"))


def _nullable_paths(schema, record, path=()):
    """Every (path, value) of ``record`` whose field is a union with null."""
    for f in schema["fields"]:
        t, v = f["type"], record.get(f["name"])
        if isinstance(t, list) and "null" in t:
            yield path + (f["name"],), v
        if isinstance(t, dict) and t.get("type") == "record" and isinstance(v, dict):
            yield from _nullable_paths(t, v, path + (f["name"],))


def _set(record, path, value):
    for p in path[:-1]:
        record = record[p]
    record[path[-1]] = value


def _variants(seed):
    rng = random.Random(seed)
    schema = SCHEMAS["CaptureEvent"].parsed
    for base in (committed_event(), failed_event()):
        yield base
        for _ in range(40):
            e = copy.deepcopy(base)
            for path, v in list(_nullable_paths(schema, e)):
                if v is not None and rng.random() < 0.3:
                    _set(e, path, None)
            e["stream"] = rng.choice(["a:b", "ten-ä:chat", "x" * 200, "s:" + "ü" * 30])
            e["request_length"] = rng.choice([0, 1, 63, 64, 127, 128, 2**31 - 1, 2**40])
            e["http_status"] = rng.choice([200, 0, 599, 2**31 - 1, -1])
            e["request_bytes"] = rng.randbytes(rng.choice([0, 1, 127, 128, 5000]))
            yield e


@pytest.mark.parametrize("seed", range(3))
def test_the_generated_writer_writes_fastavros_bytes(seed):
    write = _FAST_WRITE["CaptureEvent"]
    n = 0
    for e in _variants(seed):
        try:
            want = fastavro_bytes("CaptureEvent", e)
        except Exception:  # noqa: BLE001 - fastavro refuses it: nothing to compare
            continue
        assert write(e) == want
        n += 1
    assert n >= 60


def test_sealed_records_and_heads_write_alike():
    from evidence_contract import decode

    for rec in sealed_records():
        assert _FAST_WRITE["EvidenceRecord"](rec) == fastavro_bytes("EvidenceRecord", rec)
        assert encode("EvidenceRecord", rec)[HEADER:] == fastavro_bytes("EvidenceRecord", rec)
        name, back = decode(encode("EvidenceRecord", rec))
        assert name == "EvidenceRecord" and _FAST_WRITE["EvidenceRecord"](back) == \
            fastavro_bytes("EvidenceRecord", back)


@pytest.mark.parametrize("change", [
    {"http_status": True}, {"http_status": 2**31}, {"request_length": 1.5},
    {"outcome": "MAYBE"}, {"request_bytes": "text"}, {"stream": 5}, {"unexpected": 1},
    {"content_key": bytes(31)},
])
def test_what_the_writer_would_get_wrong_is_refused_as_before(change):
    """The generated writer writes some of these (a bool as 1, an int past 32 bits as a
    long varint); the read-back refuses them and fastavro's path words the error."""
    e = {**committed_event(), **change}
    with pytest.raises(EncodeError, match="CaptureEvent record does not match its schema"):
        encode("CaptureEvent", e)


def test_a_missing_field_with_a_default_is_written_as_the_default():
    e = committed_event()
    e.pop("encryption", None)
    assert encode("CaptureEvent", e)[HEADER:] == fastavro_bytes("CaptureEvent", e)


def test_a_schema_with_a_map_gets_no_writer():
    schema = fastavro.parse_schema({"type": "record", "name": "M", "fields": [
        {"name": "m", "type": {"type": "map", "values": "string"}}]})
    assert compile_writer(schema) is None
    two = fastavro.parse_schema({"type": "record", "name": "U", "fields": [
        {"name": "u", "type": ["null", "int", "long"]}]})
    assert compile_writer(two) is None
