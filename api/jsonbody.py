"""Request JSON parsed with limits (pure): what ``json.loads`` accepts but no route can use.

Python's ``json`` reads far more than RFC 8259 JSON: ``NaN``, ``Infinity`` and ``-Infinity``,
numbers such as ``1e400`` (which become ``inf``), ``"\\ud800"`` escapes (a lone surrogate, text
with no UTF-8 encoding), and nesting as deep as the C stack allows. Each of these later breaks
something (RFC 8785 canonicalization, hashing, ``jsonschema``'s recursion), so
:func:`loads_strict` refuses them up front and says where:

    not UTF-8 / not JSON                  the body is not JSON
    NaN, Infinity, -Infinity              not JSON numbers (RFC 8259 section 6)
    a number that overflows a double      1e400 is not a finite number
    a lone surrogate in a string or key   not Unicode text
    nesting deeper than ``max_depth``     too deeply nested

:func:`i_json_problem` adds the I-JSON rule (RFC 7493) that RFC 8785 canonical JSON needs:
integers beyond ±(2^53 − 1) have no exact canonical form.

Errors are :class:`JsonBodyError` with a message for people and the JSON path of the value.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["I_JSON_MAX_INT", "JsonBodyError", "MAX_DEPTH", "i_json_problem", "loads_strict"]

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects accepted: no manifest or verify body comes close."""

I_JSON_MAX_INT = 2**53 - 1
"""The largest integer RFC 8785 (through I-JSON, RFC 7493) can represent exactly."""

_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonBodyError(ValueError):
    """The body is not JSON a route can use; ``str(e)`` says why and where."""


def _no_constant(name: str) -> Any:
    raise JsonBodyError(f"{name} is not a JSON number (RFC 8259 allows only finite numbers)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonBodyError(f"the number {text[:40]} is too large to be a finite number")
    return value


def _path(parts: list[Any]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def loads_strict(raw: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """Parse ``raw`` (UTF-8 JSON text) or raise :class:`JsonBodyError`; see the module doc."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise JsonBodyError(f"the body is not UTF-8 (byte {e.start})") from None
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except JsonBodyError:
        raise
    except RecursionError:
        # The C scanner counts its own depth and stops cleanly; far deeper than max_depth.
        raise JsonBodyError(f"the JSON is nested more than {max_depth} levels deep") from None
    except ValueError as e:  # JSONDecodeError, or an integer of more than 4300 digits
        raise JsonBodyError(f"the body is not valid JSON: {e}") from None
    _check(value, max_depth)
    return value


def _check(value: Any, max_depth: int) -> None:
    """Depth and lone surrogates, by an explicit stack (no recursion on hostile input)."""
    stack: list[tuple[Any, list[Any]]] = [(value, [])]
    while stack:
        v, where = stack.pop()
        if isinstance(v, str):
            if _SURROGATE.search(v):
                raise JsonBodyError(f"{_path(where)}: the string contains a lone surrogate "
                                    f"(an unpaired \\ud800-\\udfff escape), which is not "
                                    f"Unicode text")
        elif isinstance(v, (dict, list)):
            if len(where) >= max_depth:
                raise JsonBodyError(f"{_path(where)}: the JSON is nested more than "
                                    f"{max_depth} levels deep")
            if isinstance(v, dict):
                for k, item in v.items():
                    if _SURROGATE.search(k):
                        raise JsonBodyError(f"{_path(where)}: a member name contains a lone "
                                            f"surrogate, which is not Unicode text")
                    stack.append((item, [*where, k]))
            else:
                stack.extend((item, [*where, i]) for i, item in enumerate(v))


def i_json_problem(value: Any) -> str | None:
    """The first integer in ``value`` outside ±(2^53 − 1), as ``"<path>: ..."``; None if none.
    ``value`` is what :func:`loads_strict` returned (so its depth is already bounded)."""
    stack: list[tuple[Any, list[Any]]] = [(value, [])]
    while stack:
        v, where = stack.pop()
        if isinstance(v, int) and not isinstance(v, bool):
            if abs(v) > I_JSON_MAX_INT:
                digits = str(v)
                shown = digits if len(digits) <= 40 else digits[:37] + "..."
                return (f"{_path(where)}: the integer {shown} is outside ±(2^53 - 1), which "
                        f"RFC 8785 canonical JSON cannot represent exactly; send it as a "
                        f"string (a seed's value, for example, as its decimal text)")
        elif isinstance(v, dict):
            stack.extend((item, [*where, k]) for k, item in v.items())
        elif isinstance(v, list):
            stack.extend((item, [*where, i]) for i, item in enumerate(v))
    return None
