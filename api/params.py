"""Integer query and path parameters, strict: decimal digits and nothing else.

pydantic's lax mode turns ``" 1"``, ``"+1"``, ``"1_0"`` and ``"١"`` into integers; a URL is
not Python source, and a parameter that means one number should be written one way. Every
integer query or path parameter of the API is a :data:`Digits` (``Annotated[int, Digits,
Query(...)]``): anything but ASCII digits is a 422 that says so, before the bounds are checked.
The OpenAPI schema is unchanged (``integer`` with its bounds).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BeforeValidator

__all__ = ["Digits", "digits_only"]

_DIGITS = re.compile(r"[0-9]+")
_SHOWN = 40  # characters of a refused value echoed back


def digits_only(value: Any) -> Any:
    """``value`` unchanged when it is ASCII decimal digits (or not text: a default); else
    ``ValueError`` saying what a value must be."""
    if isinstance(value, str) and not _DIGITS.fullmatch(value):
        shown = value if len(value) <= _SHOWN else value[:_SHOWN] + "…"
        raise ValueError(f"must be a whole number written in decimal digits only (no sign, "
                         f"space, underscore or other character), not {shown!r}")
    return value


Digits = BeforeValidator(digits_only)
"""The validator that makes an ``int`` parameter take digits only (module doc)."""
