"""Replay-fidelity analysis: how strongly can a replay of a run support a conclusion?

- :func:`analyze` — an ``evidence.replay-runtime`` v1 manifest to a :class:`Report` (level,
  every gap with its impact, the manifest's RFC 8785 SHA-256). Pure and deterministic.
- :func:`analyze_record` — both reports for a sealed record: replay served from the log, and
  live re-execution against the hosted API.
- :func:`validate`, :func:`json_schema`, :func:`manifest_sha256` — the published schema
  (``schemas/replay-runtime.schema.json``) and its checks; :class:`ManifestError` on violations.
"""

from fidelity.analyze import LEVELS, Finding, Report, analyze, level_of
from fidelity.errors import ManifestError
from fidelity.manifest import json_schema, manifest_sha256, validate
from fidelity.record import analyze_record, manifests_for_record

__all__ = [
    "LEVELS",
    "Finding",
    "ManifestError",
    "Report",
    "analyze",
    "analyze_record",
    "json_schema",
    "level_of",
    "manifest_sha256",
    "manifests_for_record",
    "validate",
]
