"""The ``evidence.replay-runtime`` v1 manifest: validation against the published JSON Schema
(``schemas/replay-runtime.schema.json``) and its canonical digest (pure)."""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Any

import rfc8785
from jsonschema import Draft202012Validator

from evidence_contract.files import schema_file
from fidelity.errors import ManifestError

KIND = "evidence.replay-runtime"
VERSION = 1


@lru_cache(maxsize=1)
def json_schema() -> dict[str, Any]:
    return json.loads(schema_file("replay-runtime.schema.json").read_text("utf-8"))


@lru_cache(maxsize=1)
def _validator() -> Draft202012Validator:
    return Draft202012Validator(json_schema())


def _path(error) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)


def validate(manifest: Any) -> None:
    """Raise :class:`ManifestError` naming every violation; return None for a valid manifest."""
    errors = sorted(_validator().iter_errors(manifest), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        problems = []
        for e in errors:
            # oneOf failures are opaque; say which evidence shapes are allowed instead.
            if e.validator == "oneOf":
                msg = ('not an evidence item: expected {"state": "value", "value": ...}, '
                       '{"state": "hash", "sha256": "<64 lowercase hex>"}, '
                       '{"state": "absent"} or {"state": "unavailable"}')
            else:
                msg = e.message
            problems.append(f"{_path(e)}: {msg}")
        raise ManifestError(problems)


def manifest_sha256(manifest: Any) -> str:
    """SHA-256 (hex) of the RFC 8785 canonical JSON of the manifest."""
    return hashlib.sha256(rfc8785.dumps(manifest)).hexdigest()
