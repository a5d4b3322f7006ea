"""schemas._fastwrite: the generated writer writes what fastavro writes, byte for byte, for
every valid record it accepts; it accepts nothing the schema does not allow (``encode``
keeps its bytes without reading them back), and ``encode`` keeps fastavro's answer and
wording for the rest."""

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
            # lengths either side of 64, where a length's varint grows a second byte
            e["stream"] = rng.choice(["a:b", "ten-ä:chat", "x" * 200, "s:" + "ü" * 30,
                                      "y" * 63, "y" * 64, "s:" + "ü" * 31])
            e["request_length"] = rng.choice([0, 1, 63, 64, 127, 128, 2**31 - 1, 2**40])
            e["http_status"] = rng.choice([200, 0, 599, 2**31 - 1, -1])
            e["request_bytes"] = rng.randbytes(rng.choice([0, 1, 63, 64, 127, 128, 5000]))
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
    """The generated writer refuses each Avro misfit itself (a loose writer would write a
    bool as 1, an int past 32 bits as a long varint); a digest of the wrong size is valid
    Avro (``bytes``), refused by encode's contract check. fastavro's path words the error."""
    e = {**committed_event(), **change}
    if "content_key" not in change:
        with pytest.raises(Exception):
            _FAST_WRITE["CaptureEvent"](e)
    with pytest.raises(EncodeError, match="CaptureEvent record does not match its schema"):
        encode("CaptureEvent", e)


# Values of every kind, right and wrong for some field: what a careless caller passes.
_ODD = [None, True, False, 0, 1, -1, 63, 64, 2**31 - 1, 2**31, -2**31 - 1, 2**53, 2**53 + 1,
        2**63 - 1, 2**63, -2**63, -2**63 - 1, 1.5, 0.0, float("nan"), float("inf"), "", "x",
        "\ud800", "MAYBE", "committed", b"", bytes(31), bytes(32), bytes(33), [], [b"x"],
        ["x"], (b"x",), {}, {"a": 1}, bytearray(b"x")]


def _paths(record, path=()):
    """Every path to a value inside ``record`` (dict fields and list items), and one new key
    per dict."""
    if isinstance(record, dict):
        yield path + ("an_unknown_field",)
        for k, v in record.items():
            yield path + (k,)
            yield from _paths(v, path + (k,))
    elif isinstance(record, list):
        for i, v in enumerate(record):
            yield path + (i,)
            yield from _paths(v, path + (i,))


@pytest.mark.parametrize("name", ["CaptureEvent", "EvidenceRecord", "WriterHead"])
def test_what_the_generated_writer_accepts_is_exactly_what_was_given(name):
    """Every field (nested ones and list items too) set to each odd value in turn: whatever
    the strict writer accepts is valid for fastavro, which writes the same bytes, and reads
    back (where the strict reader takes it) to exactly the values given, so encode may keep
    the bytes unread; whatever it refuses, encode either refuses with fastavro's wording or
    returns fastavro's bytes."""
    from evidence_contract.codec import _FAST, _same

    head = {"stream": "s", "seq": 7, "record_digest": bytes(range(32)),
            "occurred_at": 1_645_557_742_000_000, "event_id": "017f22e2-79b0-7cc3-98c4",
            "log_partition": 3, "log_offset": None, "tree_size": 7,
            "tree_nodes": [bytes(32), bytes(range(32)), b"\x01" * 32], "checkpoint_size": 4}
    short = {k: v for k, v in head.items() if k not in ("tree_size", "tree_nodes")}
    bases = {"CaptureEvent": [committed_event(), failed_event()],
             "EvidenceRecord": list(sealed_records()), "WriterHead": [head, short]}[name]
    write, read = _FAST_WRITE[name], _FAST[name]
    accepted = refused = 0
    for base in bases:
        for path in list(_paths(base)):
            for odd in _ODD:
                e = copy.deepcopy(base)
                _set(e, path, odd)
                try:
                    data = write(e)
                except Exception:  # noqa: BLE001 - refused: encode decides below
                    refused += 1
                    try:
                        got = encode(name, e)[HEADER:]
                    except EncodeError:
                        continue
                    assert got == fastavro_bytes(name, e)
                    continue
                accepted += 1
                assert fastavro.validate(e, SCHEMAS[name].parsed, raise_errors=False), (path, odd)
                assert data == fastavro_bytes(name, e), (path, odd)
                back = read(data, 0)  # None: a value the strict reader leaves to fastavro's
                given = {**{f["name"]: f["default"] for f in SCHEMAS[name].parsed["fields"]
                            if "default" in f}, **e}  # a field left out reads as its default
                assert back is None or (back[1] == len(data) and _same(back[0], given)), \
                    (path, odd)
    assert accepted > 50 and refused > 500


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
