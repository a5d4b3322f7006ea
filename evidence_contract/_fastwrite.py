"""A writer of canonical Avro binary, generated from a parsed schema, for ``encode``'s hot path.

Internal: ``schemas.codec.encode`` uses it. fastavro's writer spends most of a capture's
encode choosing union branches (~85 µs a 1 KiB capture, every nullable field a union); this
writer is Python source generated once per schema and compiled, straight-line, ~4× faster.

It is strict: it returns bytes only for a record the schema allows, and those bytes are the
canonical encoding fastavro writes (minimal zig-zag varints, each non-empty array as one
block, a union's branch by the value's type, fields in schema order, a field left out
written as its default). Every value is checked as it is written, by exact type: a bool is
never an int, an int or long must be in its range, a string must encode as UTF-8, a fixed
must have its size, an enum must be one of its symbols, a record may hold no field its
schema does not name, and a double takes a float, or an int a double holds exactly. Anything
else raises inside it, and ``encode`` takes fastavro's path, which decides and words the
error. So ``encode`` keeps this writer's answer as it is: the strict read-back that proved
it before (~45 µs of a 1 KiB capture's ~60) is gone. The tests compare both writers on every
vector and on generated records, and check that what this writer accepts reads back, with
the strict reader, to exactly the values given.

Unions are supported where a value's Python type picks one branch (null, boolean, int/long,
double, string, bytes, array, record; enum and fixed where no other branch takes a str or
bytes): ``["null", T]`` and the like. A union with two branches of one Python type (two
records, int and long, ...), a map, a float or a logical type makes the schema unsupported:
``compile_writer`` returns None and fastavro writes everything.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

__all__ = ["compile_writer", "varint"]

Writer = Callable[[dict[str, Any]], bytes]

_SMALL = tuple(bytes([z]) for z in range(0x80))
_RANGE = {"int": (-(1 << 31), (1 << 31) - 1), "long": (-(1 << 63), (1 << 63) - 1)}
_EXACT_DOUBLE = 1 << 53  # an int a double holds exactly lies within +- this
_pack_f = struct.Struct("<f").pack
_pack_d = struct.Struct("<d").pack


def varint(n: int) -> bytes:
    """The Avro zig-zag varint of a long (right for an int too); raises ``ValueError`` for a
    value below the 64-bit range (one above it writes a longer varint, which a reader's
    range check refuses)."""
    z = (n << 1) ^ (n >> 63)
    if 0 <= z < 0x80:
        return _SMALL[z]
    if z < 0:
        raise ValueError("out of range")
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


class _Unsupported(Exception):
    pass


# The Python types that pick a union branch, per Avro type (fastavro's choice for these).
_PICK = {"null": "is None", "boolean": "bool", "int": "int", "long": "int",
         "double": "float", "string": "str", "bytes": "bytes",
         "array": "list", "record": "dict", "enum": "str", "fixed": "bytes"}


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

    def resolve(self, schema: Any) -> Any:
        if isinstance(schema, str):
            return self.named.get(schema, {"type": schema})
        if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
            return self.resolve(schema["type"])
        return schema

    def kind(self, schema: Any) -> str:
        s = self.resolve(schema)
        if isinstance(s, list):
            raise _Unsupported("a union in a union")
        return s["type"]

    def value(self, schema: Any, ind: int, v: str, typed: bool = False) -> None:
        """Emit the writing of ``v`` as ``schema``; ``typed``: a union branch already chose
        it by its exact Python type (:data:`_PICK`), so that check is not made again."""
        schema = self.resolve(schema)
        if isinstance(schema, list):
            return self.union(schema, ind, v)
        if "logicalType" in schema:
            raise _Unsupported("logical types")
        t = schema["type"]
        if t == "null":
            self.emit(ind, f"if {v} is not None:")
            self.emit(ind + 1, "raise _Mismatch")
        elif t == "boolean":
            self.emit(ind, f"w(b'\\x01' if {v} is True else b'\\x00' if {v} is False else _bad())")
        elif t in ("int", "long"):
            lo, hi = _RANGE[t]
            self.emit(ind, f"if {'' if typed else f'type({v}) is not int or '}"
                           f"not {lo} <= {v} <= {hi}:")
            self.emit(ind + 1, "raise _Mismatch")
            self.emit(ind, f"w(_SMALL[{v} << 1] if 0 <= {v} < 64 else varint({v}))")
        elif t == "double":
            if not typed:
                self.emit(ind, f"if type({v}) is not float and (type({v}) is not int "
                               f"or not {-_EXACT_DOUBLE} <= {v} <= {_EXACT_DOUBLE}):")
                self.emit(ind + 1, "raise _Mismatch")
            self.emit(ind, f"w(_pack_d({v}))")
        elif t == "string":
            b = self.var("s")
            if not typed:
                self.emit(ind, f"if type({v}) is not str:")
                self.emit(ind + 1, "raise _Mismatch")
            self.emit(ind, f"{b} = {v}.encode('utf-8')")  # a lone surrogate raises
            self.length(ind, b)
            self.emit(ind, f"w({b})")
        elif t == "bytes":
            if not typed:
                self.emit(ind, f"if type({v}) is not bytes:")
                self.emit(ind + 1, "raise _Mismatch")
            self.length(ind, v)
            self.emit(ind, f"w({v})")
        elif t == "fixed":
            self.named[schema["name"]] = schema
            self.emit(ind, f"if type({v}) is not bytes or len({v}) != {int(schema['size'])}:")
            self.emit(ind + 1, "raise _Mismatch")
            self.emit(ind, f"w({v})")
        elif t == "enum":
            self.named[schema["name"]] = schema
            idx = self.const({s: varint(i) for i, s in enumerate(schema["symbols"])})
            if not typed:
                self.emit(ind, f"if type({v}) is not str:")
                self.emit(ind + 1, "raise _Mismatch")
            self.emit(ind, f"w({idx}[{v}])")  # a symbol the enum does not have: KeyError
        elif t == "array":
            self.array(schema, ind, v, typed)
        elif t in ("record", "error"):
            self.record(schema, ind, v)
        else:  # float (its rounding), map, or anything new
            raise _Unsupported(t)

    def length(self, ind: int, v: str) -> None:
        """Emit the length of string or bytes ``v``: one byte from :data:`_SMALL` below 64 (most
        of a capture's: ids, digests, names), without a call to :func:`varint`."""
        n = self.var("n")
        self.emit(ind, f"{n} = len({v})")
        self.emit(ind, f"w(_SMALL[{n} << 1] if {n} < 64 else varint({n}))")

    def array(self, schema: dict[str, Any], ind: int, v: str, typed: bool) -> None:
        """Emit an array as one block of all its items (none for an empty one), then 0."""
        item = self.var("it")
        if not typed:
            self.emit(ind, f"if type({v}) is not list and type({v}) is not tuple:")
            self.emit(ind + 1, "raise _Mismatch")
        self.emit(ind, f"if {v}:")
        self.emit(ind + 1, f"w(varint(len({v})))")
        self.emit(ind + 1, f"for {item} in {v}:")
        self.value(schema["items"], ind + 2, item)
        self.emit(ind, "w(b'\\x00')")

    def union(self, branches: list[Any], ind: int, v: str) -> None:
        picks = []
        for k, branch in enumerate(branches):
            kind = self.kind(branch)
            if kind not in _PICK:
                raise _Unsupported(kind)
            picks.append((k, branch, _PICK[kind]))
        tests = [p for _, _, p in picks]
        if len(set(tests)) != len(tests):
            raise _Unsupported("two branches of one Python type")
        for n, (k, branch, pick) in enumerate(picks):
            cond = f"{v} is None" if pick == "is None" else f"type({v}) is {pick}"
            self.emit(ind, f"{'if' if n == 0 else 'elif'} {cond}:")
            self.emit(ind + 1, f"w({varint(k)!r})")  # the branch index, a zig-zag long
            if pick != "is None":
                self.value(branch, ind + 1, v, typed=True)
        self.emit(ind, "else:")
        self.emit(ind + 1, "raise _Mismatch")

    def record(self, schema: dict[str, Any], ind: int, v: str) -> None:
        self.named[schema["name"]] = schema
        names = self.const(frozenset(f["name"] for f in schema["fields"]))
        self.emit(ind, f"if type({v}) is not dict or not {v}.keys() <= {names}:")
        self.emit(ind + 1, "raise _Mismatch")  # not a dict, or a field the schema lacks
        for f in schema["fields"]:
            fv = self.var("f")
            if "default" in f:
                # strict_allow_default: a field with a default may be left out
                dflt = self.const(f["default"])
                self.emit(ind, f"{fv} = {v}.get({f['name']!r}, {dflt})")
            else:
                self.emit(ind, f"{fv} = {v}[{f['name']!r}]")
            self.value(f["type"], ind, fv)


class _Mismatch(Exception):
    """Raised inside a generated writer: fastavro decides (and words the error)."""


def _bad() -> bytes:
    raise _Mismatch


def compile_writer(parsed_schema: dict[str, Any]) -> Writer | None:
    """Return ``write(record) -> bytes`` for a fastavro-parsed record schema, or None when
    the schema uses something this writer does not handle. ``write`` raises on a record the
    schema does not allow (or one it cannot write); the bytes it returns are the record's
    canonical encoding (module docstring)."""
    gen = _Gen()
    try:
        gen.value(parsed_schema, 1, "rec")
    except _Unsupported:
        return None
    src = ("def _write(rec):\n    out = []\n    w = out.append\n" + "\n".join(gen.lines)
           + "\n    return b''.join(out)\n")
    scope: dict[str, Any] = {"varint": varint, "_SMALL": _SMALL, "_pack_f": _pack_f,
                             "_pack_d": _pack_d, "_Mismatch": _Mismatch, "_bad": _bad,
                             **gen.consts}
    exec(compile(src, f"<canonical writer for {parsed_schema.get('name')}>", "exec"), scope)
    write = scope["_write"]
    write.source = src  # type: ignore[attr-defined]  # for debugging and tests
    return write
