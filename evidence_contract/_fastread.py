"""A strict reader of canonical Avro binary, generated from a parsed schema, for the hot paths.

Internal: the public face is ``schemas.codec.read_canonical``. The writer must know that a
capture's body is the canonical Avro binary of its values (``record_digest`` covers those
bytes, and every other implementation must recompute them). Decoding with fastavro and
re-encoding to compare costs two passes (~55 µs + ~60 µs a 1 KiB capture). This reader does
both in one pass: it decodes and, at each value, checks that the bytes are the one canonical
encoding of that value. It answers ``None`` for anything else, and the caller takes the slow
path (fastavro decode, re-encode, compare), which also classifies errors. So the fast path
only has to be right when it says yes; saying no is always safe.

Canonical, per Avro's binary encoding as fastavro writes it:

- int/long: the minimal zig-zag varint (a varint of more than one byte has a non-zero last
  byte). A varint needing ten bytes answers ``None``: fastavro drops bits above 64 when it
  reads one, so two ten-byte encodings can read as one value.
- boolean: exactly 0x00 or 0x01 (fastavro reads any non-zero byte as true).
- union branch and enum index: minimal varints in range.
- array: empty is one 0x00; otherwise one block, count > 0, the items, then 0x00.
- float/double: the IEEE bytes; NaN answers ``None`` (its payload bits need not survive).
- string: strict UTF-8 (what fastavro reads, re-encoded, is the same bytes).
- bytes: a minimal length varint, then that many bytes. Digests are Avro bytes (record contract
  2.0); that each is exactly 32 bytes is a rule of the contract, not of the encoding:
  ``schemas.codec.wrong_size_digest`` checks it, whichever reader decoded the bytes.

The reader is Python source generated once per schema at import and compiled: straight-line
code with the single-byte varint case inlined is ~10× faster than fastavro's generic reader
for our records. Schemas using maps or logical types get no fast path (``compile_reader``
returns None) rather than a subtle one.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

__all__ = ["compile_reader"]

Reader = Callable[[bytes, int], "tuple[dict[str, Any], int] | None"]


class _NotCanonical(Exception):
    """Raised inside a generated reader; the caller sees ``None``."""


def _varint_tail(data: bytes, pos: int, first: int) -> tuple[int, int]:
    """Finish a varint whose first byte ``first`` (>= 0x80) came before ``data[pos]``."""
    n = first & 0x7F
    shift = 7
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= 63:  # a tenth byte: see the module docstring
            raise _NotCanonical
    if b == 0:  # a padded varint: the same value has a shorter encoding
        raise _NotCanonical
    return n, pos


_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_unpack_f = struct.Struct("<f").unpack_from
_unpack_d = struct.Struct("<d").unpack_from


class _Unsupported(Exception):
    pass


class _Gen:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.named: dict[str, Any] = {}
        self.n = 0

    def var(self, stem: str = "v") -> str:
        self.n += 1
        return f"{stem}{self.n}"

    def emit(self, ind: int, line: str) -> None:
        self.lines.append("    " * ind + line)

    def const(self, value: Any) -> str:
        name = self.var("K")
        self.consts[name] = value
        return name

    # -- primitives -------------------------------------------------------------------------
    def varint(self, ind: int, target: str) -> None:
        """Read a zig-zag varint into ``target`` (signed)."""
        z = self.var("z")
        self.emit(ind, f"{z} = data[pos]")
        self.emit(ind, "pos += 1")
        self.emit(ind, f"if {z} >= 0x80:")
        self.emit(ind + 1, f"{z}, pos = _varint_tail(data, pos, {z})")
        self.emit(ind, f"{target} = ({z} >> 1) ^ -({z} & 1)")

    def length(self, ind: int, target: str) -> None:
        """Read a byte length and check the bytes are there; ``target`` is the end offset."""
        n = self.var("n")
        self.varint(ind, n)
        self.emit(ind, f"{target} = pos + {n}")
        self.emit(ind, f"if {n} < 0 or {target} > len(data):")
        self.emit(ind + 1, "raise _NotCanonical")

    def resolve(self, schema: Any) -> Any:
        """The schema a type stands for: a name's definition (or a primitive as a dict), a
        ``{"type": {...}}`` wrapper's inner type; a union as its list of branches."""
        if isinstance(schema, str):
            schema = self.named[schema] if schema in self.named else {"type": schema}
        if isinstance(schema, list):
            return schema
        if not isinstance(schema, dict):
            raise _Unsupported(repr(schema))
        if "logicalType" in schema:
            raise _Unsupported("logical types")
        if isinstance(schema["type"], (dict, list)):
            return self.resolve(schema["type"])
        return schema

    def value(self, schema: Any, ind: int, target: str) -> None:
        schema = self.resolve(schema)
        if isinstance(schema, list):
            return self.union(schema, ind, target)
        t = schema["type"]
        if t == "null":
            self.emit(ind, f"{target} = None")
        elif t == "boolean":
            b = self.var("b")
            self.emit(ind, f"{b} = data[pos]")
            self.emit(ind, f"if {b} > 1:")
            self.emit(ind + 1, "raise _NotCanonical")
            self.emit(ind, "pos += 1")
            self.emit(ind, f"{target} = {b} == 1")
        elif t in ("int", "long"):
            self.varint(ind, target)
            if t == "int":
                self.emit(ind, f"if not {_INT_MIN} <= {target} <= {_INT_MAX}:")
                self.emit(ind + 1, "raise _NotCanonical")
        elif t in ("float", "double"):
            size, fn = (4, "_unpack_f") if t == "float" else (8, "_unpack_d")
            self.emit(ind, f"{target} = {fn}(data, pos)[0]")
            self.emit(ind, f"if {target} != {target}:")
            self.emit(ind + 1, "raise _NotCanonical")
            self.emit(ind, f"pos += {size}")
        elif t in ("bytes", "string"):
            end = self.var("e")
            self.length(ind, end)
            tail = '.decode("utf-8")' if t == "string" else ""
            self.emit(ind, f"{target} = data[pos:{end}]{tail}")
            self.emit(ind, f"pos = {end}")
        elif t == "fixed":
            self.named[schema["name"]] = schema
            end = self.var("e")
            self.emit(ind, f"{end} = pos + {int(schema['size'])}")
            self.emit(ind, f"if {end} > len(data):")
            self.emit(ind + 1, "raise _NotCanonical")
            self.emit(ind, f"{target} = data[pos:{end}]")
            self.emit(ind, f"pos = {end}")
        elif t == "enum":
            self.named[schema["name"]] = schema
            syms = self.const(tuple(schema["symbols"]))
            i = self.var("i")
            self.varint(ind, i)
            self.emit(ind, f"if not 0 <= {i} < {len(schema['symbols'])}:")
            self.emit(ind + 1, "raise _NotCanonical")
            self.emit(ind, f"{target} = {syms}[{i}]")
        elif t == "array":
            self.array(schema, ind, target)
        elif t in ("record", "error"):
            self.record(schema, ind, target)
        else:  # map (no fixed byte order), or anything new
            raise _Unsupported(t)

    def union(self, branches: list[Any], ind: int, target: str) -> None:
        i = self.var("u")
        self.varint(ind, i)
        for k, branch in enumerate(branches):
            self.emit(ind, f"{'if' if k == 0 else 'elif'} {i} == {k}:")
            self.value(branch, ind + 1, target)
        self.emit(ind, "else:")
        self.emit(ind + 1, "raise _NotCanonical")

    def array(self, schema: dict[str, Any], ind: int, target: str) -> None:
        count, item = self.var("c"), self.var("it")
        self.varint(ind, count)
        self.emit(ind, f"{target} = []")
        self.emit(ind, f"if {count}:")
        self.emit(ind + 1, f"if {count} < 0:")  # a block with a byte size: not canonical
        self.emit(ind + 2, "raise _NotCanonical")
        self.emit(ind + 1, f"for _ in range({count}):")
        self.value(schema["items"], ind + 2, item)
        self.emit(ind + 2, f"{target}.append({item})")
        self.emit(ind + 1, "if data[pos]:")  # one block, then the end marker
        self.emit(ind + 2, "raise _NotCanonical")
        self.emit(ind + 1, "pos += 1")

    def record(self, schema: dict[str, Any], ind: int, target: str) -> None:
        self.named[schema["name"]] = schema
        names = []
        for f in schema["fields"]:
            v = self.var("f")
            self.value(f["type"], ind, v)
            names.append((f["name"], v))
        self.emit(ind, f"{target} = {{" + ", ".join(f"{n!r}: {v}" for n, v in names) + "}")


def compile_reader(parsed_schema: dict[str, Any]) -> Reader | None:
    """Return ``read(data, pos) -> (record, end) | None`` for a fastavro-parsed record schema.

    ``None`` from ``read`` means "not provably canonical from here", never "invalid". Returns
    None instead of a reader when the schema uses something this reader does not handle.
    """
    gen = _Gen()
    try:
        gen.value(parsed_schema, 1, "rec")
    except _Unsupported:
        return None
    src = "def _read(data, pos):\n" + "\n".join(gen.lines) + "\n    return rec, pos\n"
    scope: dict[str, Any] = {"_varint_tail": _varint_tail, "_NotCanonical": _NotCanonical,
                             "_unpack_f": _unpack_f, "_unpack_d": _unpack_d, **gen.consts}
    exec(compile(src, f"<canonical reader for {parsed_schema.get('name')}>", "exec"), scope)
    inner = scope["_read"]

    def read(data: bytes, pos: int) -> tuple[dict[str, Any], int] | None:
        try:
            return inner(data, pos)
        except (_NotCanonical, IndexError, UnicodeDecodeError, struct.error):
            return None

    read.source = src  # type: ignore[attr-defined]  # for debugging and tests
    return read
