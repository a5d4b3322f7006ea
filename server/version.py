"""The version of the running server, read from the installed distribution's metadata.

It is sealed into every record's writer identity, so it must be the version that is
installed, never a literal that someone forgets to bump: ``pyproject.toml`` is its one source.
"""

from __future__ import annotations

import functools
from importlib.metadata import version as _distribution_version

__all__ = ["DISTRIBUTION", "version"]

DISTRIBUTION = "evidence-store"


@functools.cache
def version() -> str:
    """``evidence-store``'s version; raises ``PackageNotFoundError`` when it is not installed
    (``pip install -e .`` in a checkout)."""
    return _distribution_version(DISTRIBUTION)
