"""Load, parse and fingerprint the ``avro/*.avsc`` files, once, at import.

Internal: the public face is ``evidence_contract.codec``. The files are found by
``evidence_contract.files`` (the repository's ``schemas/`` folder, or the wheel's copy).

Each file is self-contained and parsed alone (record contract 2.2): EvidenceRecord carries
CaptureEvent's full definition inline, and every named type is defined exactly once and never
referenced by name again. Implementations disagree on the Parsing Canonical Form of a schema
that repeats a named type (Java and fastavro write the name, the Python ``avro`` package and
Ruby expand the definition again); with no repeats, there is only one canonical form, so every
implementation computes the same CRC-64-AVRO fingerprint. ``_load`` refuses a schema that
breaks this, so a schema edit cannot reintroduce the ambiguity unnoticed.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import fastavro
from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form

from .files import schema_file

NAMESPACE = "evidence.v2"

SCHEMA_NAMES: tuple[str, ...] = ("CaptureEvent", "EvidenceRecord", "WriterHead")

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def _read_json(name: str) -> dict[str, Any]:
    text = schema_file("avro", f"{name}.avsc").read_text("utf-8")
    return json.loads(text)


def named_types(canonical: str) -> tuple[list[str], list[str]]:
    """Return (definitions, references) of named types in a Parsing Canonical Form.

    In canonical form every name is a full name, a definition is an object with a ``name``
    and a reference is a type given as a string that is not a primitive.
    """
    defined: list[str] = []
    referenced: list[str] = []

    def walk(schema: Any) -> None:
        if isinstance(schema, str):
            if schema not in _PRIMITIVES:
                referenced.append(schema)
        elif isinstance(schema, list):  # a union: each branch is a schema
            for branch in schema:
                walk(branch)
        elif isinstance(schema, dict):
            kind = schema["type"]
            if kind in ("record", "error", "enum", "fixed"):
                defined.append(schema["name"])
            elif kind not in ("array", "map"):
                walk(kind)  # {"type": "long"} or {"type": "SomeName"}
            for key in ("items", "values"):
                if key in schema:
                    walk(schema[key])
            for field in schema.get("fields", ()):
                walk(field["type"])

    walk(json.loads(canonical))
    return defined, referenced


class _Loaded:
    """Everything derived from one schema file."""

    __slots__ = ("name", "json", "parsed", "canonical", "fingerprint", "reader", "current",
                 "body_parsed")

    def __init__(self, name: str, schema_json: dict[str, Any],
                 reader: "_Loaded | None" = None, current: bool = True) -> None:
        self.name = name
        self.json = schema_json
        self.current = current
        """False for an earlier version (avro/history/)."""
        # An earlier version of a schema (avro/history/) is read with Avro schema
        # resolution into the current one, ``reader``: fields added since take their
        # defaults. None for the current schemas.
        self.reader = reader
        # No shared named_schemas: each schema is parsed standalone, so a reference to a
        # type defined in another file fails here.
        self.parsed = fastavro.parse_schema(copy.deepcopy(schema_json))
        self.canonical: str = to_parsing_canonical_form(self.parsed)
        defined, referenced = named_types(self.canonical)
        # An earlier version is what it was: contract 1.0 defined Sha256 once and referred to
        # it by name after that (it parses alone all the same, or fastavro says so above).
        if (referenced and current) or len(set(defined)) != len(defined):
            raise RuntimeError(f"{name}.avsc must define each named type once and never refer "
                               f"to one by name (defined {defined}, referenced {referenced})")
        # fastavro returns the hex of the 8 little-endian bytes, which is exactly the
        # single-object header (the Java long written little-endian).
        self.fingerprint: bytes = bytes.fromhex(_fastavro_fingerprint(self.canonical, "CRC-64-AVRO"))
        # An EvidenceRecord's body (its first field) is the CaptureEvent of the same version.
        self.body_parsed = (fastavro.parse_schema(copy.deepcopy(schema_json["fields"][0]["type"]))
                            if name == "EvidenceRecord" else None)


def _load_all() -> dict[str, _Loaded]:
    return {name: _Loaded(name, _read_json(name)) for name in SCHEMA_NAMES}


READABLE_HISTORY = ("WriterHead",)
"""Schemas whose earlier versions are still read (``avro/history/<Name>.<fingerprint>.avsc``),
resolved into the current version. Only the writer's own state: a compacted topic that
holds heads written by the writer before an upgrade. EvidenceRecord and CaptureEvent are
not resolved: a record's digests cover its body bytes under the schema it was sealed with,
so a later version of the record contract reads each record with its own schema."""

SEALED_HISTORY = ("CaptureEvent", "EvidenceRecord")
"""Schemas whose earlier versions are read with their own schema, never resolved: a 2.0
capture is sealed as a 2.0 EvidenceRecord (a 2.1 one as a 2.1 record), byte for byte, and
decodes as a dict without the fields added since (2.1: ``encryption``; 2.2: ``trace``,
``telemetry``). Every EvidenceRecord ever sealed is here, 1.0 included
(``EvidenceRecord.90d30cf5699b4afc``, CaptureEvent 1.0 inline, digests as the ``Sha256``
fixed type, none of the fields 2.0 added): a sealed record is read by every later version.
The 1.0 CaptureEvent is not, so intake still refuses a 1.0 capture by its fingerprint."""


def _load_history(current: dict[str, _Loaded]) -> list[_Loaded]:
    folder = schema_file("avro", "history")
    out = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name) if folder.is_dir() else ():
        name, _, rest = entry.name.partition(".")
        if not entry.name.endswith(".avsc") or name not in READABLE_HISTORY + SEALED_HISTORY:
            continue
        old = _Loaded(name, json.loads(entry.read_text("utf-8")),
                      reader=current[name] if name in READABLE_HISTORY else None, current=False)
        if old.fingerprint.hex() != rest.removesuffix(".avsc"):
            raise RuntimeError(f"avro/history/{entry.name}: its fingerprint is "
                               f"{old.fingerprint.hex()}, not the one its name says")
        out.append(old)
    return out


SCHEMAS: dict[str, _Loaded] = _load_all()
HISTORY: list[_Loaded] = _load_history(SCHEMAS)
BY_FINGERPRINT: dict[bytes, _Loaded] = {s.fingerprint: s for s in (*SCHEMAS.values(), *HISTORY)}
if len(BY_FINGERPRINT) != len(SCHEMAS) + len(HISTORY):  # pragma: no cover - a CRC-64 collision
    raise RuntimeError("two schemas share a CRC-64-AVRO fingerprint")


def _record_for_capture() -> dict[bytes, bytes]:
    # A capture of each version is sealed into the EvidenceRecord of the same version: the
    # one whose inline body has the capture's canonical form.
    records = {to_parsing_canonical_form(s.body_parsed): s.fingerprint
               for s in BY_FINGERPRINT.values() if s.name == "EvidenceRecord"}
    return {s.fingerprint: records[s.canonical]
            for s in BY_FINGERPRINT.values() if s.name == "CaptureEvent"}


RECORD_FOR_CAPTURE: dict[bytes, bytes] = _record_for_capture()
"""CaptureEvent fingerprint -> the EvidenceRecord fingerprint it is sealed under."""
