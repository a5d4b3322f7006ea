"""Load, parse and fingerprint the ``avro/*.avsc`` files, once, at import.

Internal: the public face is ``schemas.codec``.

Each file is self-contained and parsed alone (record contract 2.0): EvidenceRecord carries
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
from importlib import resources
from typing import Any

import fastavro
from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form

NAMESPACE = "evidence.v2"

SCHEMA_NAMES: tuple[str, ...] = ("CaptureEvent", "EvidenceRecord", "WriterHead")

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def _read_json(name: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath("avro", f"{name}.avsc").read_text("utf-8")
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

    __slots__ = ("name", "json", "parsed", "canonical", "fingerprint")

    def __init__(self, name: str, schema_json: dict[str, Any]) -> None:
        self.name = name
        self.json = schema_json
        # No shared named_schemas: each schema is parsed standalone, so a reference to a
        # type defined in another file fails here.
        self.parsed = fastavro.parse_schema(copy.deepcopy(schema_json))
        self.canonical: str = to_parsing_canonical_form(self.parsed)
        defined, referenced = named_types(self.canonical)
        if referenced or len(set(defined)) != len(defined):
            raise RuntimeError(f"{name}.avsc must define each named type once and never refer "
                               f"to one by name (defined {defined}, referenced {referenced})")
        # fastavro returns the hex of the 8 little-endian bytes, which is exactly the
        # single-object header (the Java long written little-endian).
        self.fingerprint: bytes = bytes.fromhex(_fastavro_fingerprint(self.canonical, "CRC-64-AVRO"))


def _load_all() -> dict[str, _Loaded]:
    return {name: _Loaded(name, _read_json(name)) for name in SCHEMA_NAMES}


SCHEMAS: dict[str, _Loaded] = _load_all()
BY_FINGERPRINT: dict[bytes, _Loaded] = {s.fingerprint: s for s in SCHEMAS.values()}
if len(BY_FINGERPRINT) != len(SCHEMAS):  # pragma: no cover - would need a CRC-64 collision
    raise RuntimeError("two schemas share a CRC-64-AVRO fingerprint")
