"""The digest fields of the record contract: where each schema has one, and the rule that
every one is exactly ``DIGEST_SIZE`` (32) bytes when not null.

Avro itself cannot say how long ``bytes`` are, so the codec asks :func:`first_misfit` of every
record it encodes or decodes (``codec.wrong_size_digest``, which names the schema). A record's
digests are checked by straight-line code made once per schema; only a record that does not
fit is walked field by field to name the first misfit.
"""

from __future__ import annotations

from typing import Any

from .digests import DIGEST_SIZE

__all__ = ["DIGEST_FIELDS", "first_misfit"]

_CAPTURE_DIGESTS = ("content_key", "input_digest", "prompt_digest", "retrieval[].chunk_digest",
                    "response_digest", "output_digest", "telemetry?.otlp_digest",
                    "telemetry?.span_digest")

DIGEST_FIELDS: dict[str, tuple[str, ...]] = {
    "CaptureEvent": _CAPTURE_DIGESTS,
    "EvidenceRecord": tuple(f"body.{f}" for f in _CAPTURE_DIGESTS)
    + ("seal.prev_digest", "seal.record_digest"),
    "WriterHead": ("record_digest",),
}
"""Per schema, the path of every digest field: exactly 32 bytes when not null.

A path is field names joined by ``.``; ``name[]`` stands for every item of array ``name``,
``name?`` for a record that may be null (or absent: a body of an earlier contract version,
which has no such field), whose digests are then not there to check.
"""

_DIGEST_PATHS = {name: tuple(tuple(p.split(".")) for p in paths)
                 for name, paths in DIGEST_FIELDS.items()}


def _misfit(node: Any, parts: tuple[str, ...], k: int, where: str) -> str | None:
    if k == len(parts):
        if node is None or (isinstance(node, (bytes, bytearray, memoryview))
                            and len(node) == DIGEST_SIZE):
            return None
        size = (f"{len(node)} bytes" if isinstance(node, (bytes, bytearray, memoryview))
                else f"a {type(node).__name__}")
        return f"{where} must be exactly {DIGEST_SIZE} bytes, got {size}"
    part = parts[k]
    if part.endswith("?"):
        inner = node.get(part[:-1])
        if inner is None:
            return None
        return _misfit(inner, parts, k + 1, f"{where}{'.' if where else ''}{part[:-1]}")
    if part.endswith("[]"):
        name = part[:-2]
        for i, item in enumerate(node[name]):
            found = _misfit(item, parts, k + 1, f"{where}{'.' if where else ''}{name}[{i}]")
            if found:
                return found
        return None
    return _misfit(node[part], parts, k + 1, f"{where}{'.' if where else ''}{part}")


def _compile_fits(paths: tuple[tuple[str, ...], ...]) -> Any:
    """A function ``fits(record) -> bool``: every digest at ``paths`` is None or exactly
    ``DIGEST_SIZE`` bytes. Straight-line code made once per schema (the decode of every
    record runs it); a record that does not fit is then named by the generic walk."""
    lines, n = ["def fits(r):"], 0

    def emit(expr: str, parts: tuple[str, ...], depth: int) -> None:
        nonlocal n
        pad = "    " * depth
        head, rest = parts[0], parts[1:]
        if head.endswith("[]"):
            n += 1
            var = f"x{n}"
            lines.append(f"{pad}for {var} in {expr}[{head[:-2]!r}]:")
            emit(var, rest, depth + 1)
        elif head.endswith("?"):
            n += 1
            var = f"o{n}"
            lines.append(f"{pad}{var} = {expr}.get({head[:-1]!r})")
            lines.append(f"{pad}if {var} is not None:")
            emit(var, rest, depth + 1)
        elif rest:
            emit(f"{expr}[{head!r}]", rest, depth)
        else:
            n += 1
            var = f"d{n}"
            lines.append(f"{pad}{var} = {expr}[{head!r}]")
            lines.append(f"{pad}if {var} is not None and (type({var}) is not bytes "
                         f"or len({var}) != {DIGEST_SIZE}):")
            lines.append(f"{pad}    return False")

    for parts in paths:
        emit("r", parts, 1)
    lines.append("    return True")
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from the constant paths above
    return namespace["fits"]


_FITS = {name: _compile_fits(paths) for name, paths in _DIGEST_PATHS.items()}


def first_misfit(name: str, record: dict[str, Any]) -> str | None:
    """Name the first digest field of ``record`` (a record of schema ``name``, a key of
    ``DIGEST_FIELDS``) that is not exactly 32 bytes, or None."""
    if _FITS[name](record):
        return None
    for parts in _DIGEST_PATHS[name]:
        found = _misfit(record, parts, 0, "")
        if found:
            return found
    return None
