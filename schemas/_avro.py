"""Load, parse and fingerprint the ``avro/*.avsc`` files, once, at import.

Internal: the public face is ``schemas.codec``. EvidenceRecord refers to CaptureEvent by
name; we inline CaptureEvent's definition before parsing, so EvidenceRecord's Parsing
Canonical Form (and so its fingerprint) is the self-contained form any Avro implementation
computes for the full schema, not one that depends on a separately registered name.

Canonical form follows Java's SchemaNormalization (the reference implementation): a named
type is written in full at its first occurrence and as its quoted full name after that.
fastavro does the same; the Python ``avro`` and Ruby libraries expand repeats instead and so
compute different fingerprints for our schemas (Sha256 is used many times).
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

import fastavro
from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form

NAMESPACE = "evidence.v1"

# Order matters: a schema may inline any schema listed before it.
SCHEMA_NAMES: tuple[str, ...] = ("CaptureEvent", "EvidenceRecord", "WriterHead")


def _read_json(name: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath("avro", f"{name}.avsc").read_text("utf-8")
    return json.loads(text)


def _inline(node: Any, defined: dict[str, dict[str, Any]], seen: set[str]) -> Any:
    """Replace the first reference to each schema in ``defined`` by its full definition.

    Later references stay names, as Avro requires a named type to be defined once.
    """
    if isinstance(node, str):
        full = node if "." in node else f"{NAMESPACE}.{node}"
        short = full.rsplit(".", 1)[1]
        if full == f"{NAMESPACE}.{short}" and short in defined and short not in seen:
            seen.add(short)
            return copy.deepcopy(defined[short])
        return node
    if isinstance(node, list):
        return [_inline(n, defined, seen) for n in node]
    if isinstance(node, dict):
        out = dict(node)
        if "type" in out:
            out["type"] = _inline(out["type"], defined, seen)
        if "fields" in out:
            out["fields"] = [_inline(f, defined, seen) for f in out["fields"]]
        if "items" in out:
            out["items"] = _inline(out["items"], defined, seen)
        return out
    return node


class _Loaded:
    """Everything derived from one schema file."""

    __slots__ = ("name", "json", "parsed", "canonical", "fingerprint")

    def __init__(self, name: str, schema_json: dict[str, Any]) -> None:
        self.name = name
        self.json = schema_json
        # No shared named_schemas: each schema is parsed standalone from its inlined JSON.
        self.parsed = fastavro.parse_schema(copy.deepcopy(schema_json))
        self.canonical: str = to_parsing_canonical_form(self.parsed)
        # fastavro returns the hex of the 8 little-endian bytes, which is exactly the
        # single-object header (the Java long written little-endian).
        self.fingerprint: bytes = bytes.fromhex(_fastavro_fingerprint(self.canonical, "CRC-64-AVRO"))


def _load_all() -> dict[str, _Loaded]:
    raw: dict[str, dict[str, Any]] = {}
    loaded: dict[str, _Loaded] = {}
    for name in SCHEMA_NAMES:
        schema_json = _inline(_read_json(name), raw, set())
        raw[name] = schema_json
        loaded[name] = _Loaded(name, schema_json)
    return loaded


SCHEMAS: dict[str, _Loaded] = _load_all()
BY_FINGERPRINT: dict[bytes, _Loaded] = {s.fingerprint: s for s in SCHEMAS.values()}
if len(BY_FINGERPRINT) != len(SCHEMAS):  # pragma: no cover - would need a CRC-64 collision
    raise RuntimeError("two schemas share a CRC-64-AVRO fingerprint")
