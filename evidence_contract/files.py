"""Where the contract's language-neutral files are: the ``.avsc`` schemas (``avro/``, earlier
versions under ``avro/history/``), the test vectors and the replay-runtime JSON Schema.

They live in the repository's top-level ``schemas/`` folder, beside this package, and the
contract's wheel (``packaging/contract``) ships that folder inside the package as
``evidence_contract/schemas/``. Both layouts are looked up, the installed one first.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_CANDIDATES = (_PACKAGE / "schemas", _PACKAGE.parent / "schemas")


def _find() -> Path:
    for folder in _CANDIDATES:
        if (folder / "avro").is_dir():
            return folder
    raise RuntimeError("the record contract's schema files are missing: no avro/ folder in "
                       + " or ".join(str(c) for c in _CANDIDATES)
                       + " (install the evidence-store-contract wheel, or run from a checkout)")


SCHEMAS_DIR: Path = _find()
"""The folder holding ``avro/``, ``vectors.json`` and ``replay-runtime.schema.json``."""


def schema_file(*parts: str) -> Path:
    """The path of one of the contract's files, e.g. ``schema_file("avro", "WriterHead.avsc")``."""
    return SCHEMAS_DIR.joinpath(*parts)
