"""The contract's two canonical Avro writers, held to each other: the generated one
(``evidence_contract._fastwrite``, the reference for what a writer may accept) and its
compiled twin (``evidence_seal_native.AvroWriter``, built from native/seal/ by ``make unit``),
which ``encode`` takes first when it is built.

The twin must write exactly the generated writer's bytes for every record it writes, and
write nothing (None) for every record the generated writer refuses: the same values of every
kind in every field, the same variants and vectors. The module is always built
(native/toolchain.sh installs Rust where there is none): these tests fail, never skip, when
it is missing.
"""

from __future__ import annotations

import builtins
import copy
from typing import Any

import fastavro
import pytest

from evidence_contract import EncodeError, encode
from evidence_contract import codec
from evidence_contract._avro import SCHEMAS
from evidence_contract.codec import _FAST_WRITE, _HEADER_SIZE as HEADER, native_writers
from evidence_contract.vectors import (
    committed_event,
    encrypted_event,
    failed_event,
    mapped_event,
    sealed_records,
    traced_event,
    truncated_event,
)
from tests.unit.test_schemas_fastwrite import _ODD, _paths, _set, _variants, fastavro_bytes

NAMES = ("CaptureEvent", "EvidenceRecord", "WriterHead")
HEAD = {"stream": "s", "seq": 7, "record_digest": bytes(range(32)),
        "occurred_at": 1_645_557_742_000_000, "event_id": "017f22e2-79b0-7cc3-98c4",
        "log_partition": 3, "log_offset": None, "tree_size": 7,
        "tree_nodes": [bytes(32), bytes(range(32)), b"\x01" * 32], "checkpoint_size": 4}


@pytest.fixture(scope="module")
def native() -> Any:
    try:
        from evidence_seal_native import AvroWriter
    except ImportError:
        pytest.fail("evidence_seal_native (with its AvroWriter) is not built: `make unit` (or "
                    "native/seal/build.sh .venv/bin/python) builds it")
    return {name: AvroWriter(SCHEMAS[name].parsed) for name in NAMES}


def generated(name: str, record: Any) -> bytes | None:
    """The generated writer's answer: its bytes, or None where it refuses."""
    try:
        return _FAST_WRITE[name](record)
    except Exception:  # noqa: BLE001 - any refusal: the twin must write nothing either
        return None


def bases(name: str) -> list[dict[str, Any]]:
    short = {k: v for k, v in HEAD.items() if k not in ("tree_size", "tree_nodes")}
    return {"CaptureEvent": [committed_event(), failed_event(), encrypted_event(),
                             traced_event(), mapped_event(), truncated_event()],
            "EvidenceRecord": list(sealed_records()),
            "WriterHead": [HEAD, short]}[name]


def test_encode_takes_the_compiled_writer_for_every_current_schema(native):
    assert set(codec._NATIVE_WRITE) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_vectors_write_alike(native, name):
    for record in bases(name):
        want = _FAST_WRITE[name](record)
        assert native[name].write(record) == want == fastavro_bytes(name, record)


@pytest.mark.parametrize("seed", range(3))
def test_the_variants_write_alike(native, seed):
    n = 0
    for e in _variants(seed):
        want = generated("CaptureEvent", e)
        assert native["CaptureEvent"].write(e) == want
        n += want is not None
    assert n >= 60


@pytest.mark.parametrize("name", NAMES)
def test_every_odd_value_in_every_field_is_written_or_refused_alike(native, name):
    """Every field (nested ones and list items too) set to each value of every kind, and an
    unknown field added to every record: the twin writes the generated writer's bytes where
    it writes, and nothing where it refuses."""
    written = refused = 0
    for base in bases(name):
        for path in list(_paths(base)):
            for odd in _ODD:
                e = copy.deepcopy(base)
                _set(e, path, odd)
                want = generated(name, e)
                assert native[name].write(e) == want, (path, odd)
                written += want is not None
                refused += want is None
    assert written > 50 and refused > 500


@pytest.mark.parametrize("name", NAMES)
def test_a_left_out_field_is_its_default_or_a_refusal_alike(native, name):
    for base in bases(name):
        for key in list(base):
            e = {k: v for k, v in base.items() if k != key}
            assert native[name].write(e) == generated(name, e), key


def test_lookalike_types_are_refused_as_the_generated_writer_refuses_them(native):
    """Subclasses of the types that pick a branch (a bool is an int, an OrderedDict a dict)
    and a tuple where a union wants a list: the exact type decides, in both writers."""
    from collections import OrderedDict

    class Text(str):
        pass

    class Blob(bytes):
        pass

    class Number(int):
        pass

    e = committed_event()
    for field, value in [("stream", Text("a:b")), ("content_key", Blob(bytes(32))),
                         ("request_length", Number(3)), ("http_status", Number(200)),
                         ("model_id", Text("m")), ("response_bytes", Blob(b"x"))]:
        odd = {**e, field: value}
        assert native["CaptureEvent"].write(odd) is None is generated("CaptureEvent", odd), field
    as_ordered = OrderedDict(e)
    assert native["CaptureEvent"].write(as_ordered) is None is generated("CaptureEvent",
                                                                         as_ordered)
    rec = next(iter(sealed_records()))
    assert native["EvidenceRecord"].write(rec) == generated("EvidenceRecord", rec)


def test_a_key_whose_comparison_raises_is_left_to_the_pure_path(native):
    class Clash:  # hashes as a field's name, so looking that field up compares with it
        armed = False

        def __hash__(self) -> int:
            return hash("stream")

        def __eq__(self, other: object) -> bool:
            if Clash.armed:
                raise RuntimeError("no comparison")
            return self is other

    e = {Clash(): 1, **committed_event()}
    Clash.armed = True
    assert native["CaptureEvent"].write(e) is None
    with pytest.raises(EncodeError):
        encode("CaptureEvent", e)


def _schema(fields: list[dict[str, Any]]) -> Any:
    return fastavro.parse_schema({"type": "record", "name": "T", "fields": fields})


@pytest.mark.parametrize("field_type", [
    {"type": "map", "values": "string"},
    ["null", "int", "long"],
    "float",
    {"type": "long", "logicalType": "timestamp-micros"},
    ["null", "string", {"type": "enum", "name": "E", "symbols": ["A"]}],
])
def test_a_schema_the_generated_writer_does_not_handle_is_refused(native, field_type):
    from evidence_contract._fastwrite import compile_writer
    from evidence_seal_native import AvroWriter

    schema = _schema([{"name": "f", "type": field_type}])
    assert compile_writer(schema) is None
    with pytest.raises(ValueError, match="not a schema this writer handles"):
        AvroWriter(schema)


def test_a_schema_of_every_handled_kind_writes_alike(native):
    from evidence_contract._fastwrite import compile_writer
    from evidence_seal_native import AvroWriter

    schema = _schema([
        {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"},
        {"name": "d", "type": "double"}, {"name": "x", "type": {"type": "fixed", "name": "F",
                                                                "size": 4}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "again", "type": ["null", "E"], "default": None},
        {"name": "a", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "r", "type": ["null", {"type": "record", "name": "Inner", "fields": [
            {"name": "n", "type": "long"}, {"name": "u", "type": ["null", "bytes", "double"]}]}]},
        {"name": "more", "type": {"type": "array", "items": "Inner"}, "default": []},
    ])
    write, twin = compile_writer(schema), AvroWriter(schema)
    base = {"b": True, "i": -5, "d": 2.5, "x": b"abcd", "e": "C", "again": "B",
            "a": ["s", None, "t"], "r": {"n": 2**40, "u": 1.0}, "more": [{"n": -1, "u": b"z"}]}
    cases = [base, {**base, "a": ("s",)}, {**base, "a": []}, {**base, "d": 7},
             {**base, "d": 2**53 + 1}, {**base, "d": True}, {**base, "i": 2**31},
             {**base, "x": b"abc"}, {**base, "e": "D"}, {**base, "again": None},
             {**base, "r": None}, {**base, "r": {"n": 1, "u": None}},
             {**base, "r": {"n": 1, "u": "text"}}, {**base, "more": ({"n": 1, "u": None},)},
             {k: v for k, v in base.items() if k != "more"},
             {k: v for k, v in base.items() if k != "again"}, {**base, "b": 1},
             {**base, "r": ["not", "a", "record"]}, {**base, "a": [1]}]
    for case in cases:
        try:
            want = write(case)
        except Exception:  # noqa: BLE001 - refused
            want = None
        assert twin.write(case) == want, case
    assert sum(twin.write(c) is not None for c in cases) >= 8


def test_encode_writes_with_the_compiled_writer_and_checks_its_digests(native, monkeypatch):
    calls = []

    class Spy:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def write(self, record: Any) -> Any:
            calls.append(record)
            return self.inner.write(record)

    monkeypatch.setitem(codec._NATIVE_WRITE, "CaptureEvent", Spy(native["CaptureEvent"]))
    e = committed_event()
    assert encode("CaptureEvent", e)[HEADER:] == fastavro_bytes("CaptureEvent", e)
    assert calls == [e]
    # Valid Avro the contract refuses: the digest check still runs after the compiled writer.
    with pytest.raises(EncodeError, match="must be exactly 32 bytes"):
        encode("CaptureEvent", {**e, "content_key": bytes(31)})


def test_the_setting_chooses_the_writer(native, monkeypatch):
    assert native_writers("0") == {}
    assert set(native_writers("auto")) == set(NAMES) == set(native_writers("1"))
    real_import = builtins.__import__

    def missing(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "evidence_seal_native":
            raise ImportError("not built")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", missing)
    assert native_writers("auto") == {}
    with pytest.raises(ImportError, match="EVIDENCE_NATIVE=1 but evidence_seal_native"):
        native_writers("1")
