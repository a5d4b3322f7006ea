"""The replay-fidelity analyzer: a manifest in, a level and every known gap out (pure).

Deterministic and conservative. Every rule looks only at what the manifest attests; nothing
promotes a run because two outputs happened to match, a seed is not a determinism guarantee,
a hash is not content, recorded retrieval does not prove the corpus still exists, and a mapped
trace is not native runtime evidence.

Levels, from the findings: ``unreplayable`` if any finding blocks replay, else ``partial`` if
any reduces control, else ``controlled`` if any prevents exactness, else ``exact``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from fidelity.manifest import manifest_sha256, validate

BLOCKS_REPLAY = "blocks_replay"
REDUCES_CONTROL = "reduces_control"
PREVENTS_EXACTNESS = "prevents_exactness"
IMPACT_ORDER = (BLOCKS_REPLAY, REDUCES_CONTROL, PREVENTS_EXACTNESS)
LEVELS = ("unreplayable", "partial", "controlled", "exact")  # worst first


@dataclass(frozen=True)
class Finding:
    path: str
    impact: str
    reason: str


@dataclass(frozen=True)
class Report:
    level: str
    missing_evidence: list[Finding]
    manifest_sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level,
                "missing_evidence": [asdict(f) for f in self.missing_evidence],
                "manifest_sha256": self.manifest_sha256}


def _state(item: dict[str, Any]) -> str:
    return item["state"]


def _model(m: dict[str, Any]) -> list[Finding]:
    out = []
    for key, what in (("input", "model input"), ("provider", "provider"),
                      ("model_name", "model name")):
        st = _state(m[key])
        if st in ("hash", "unavailable"):
            kind = "only a hash was kept" if st == "hash" else "it was not captured"
            out.append(Finding(f"model.{key}", BLOCKS_REPLAY,
                               f"{what} cannot be reconstructed: {kind}"))
        elif st == "absent" and key != "input":
            out.append(Finding(f"model.{key}", BLOCKS_REPLAY,
                               f"{what} attested absent, but a model call needs one"))
    for key, what in (("parameters", "parameters"), ("system_instructions", "system instructions"),
                      ("developer_instructions", "developer instructions"), ("seed", "seed")):
        if _state(m[key]) == "unavailable":
            out.append(Finding(f"model.{key}", REDUCES_CONTROL, f"{what} were not captured"
                               if key != "seed" else "whether a seed was sent was not captured"))
    if not m["determinism"]["guaranteed"]:
        seeded = _state(m["seed"]) == "value"
        basis = m["determinism"]["basis"]
        out.append(Finding("model.determinism", PREVENTS_EXACTNESS,
                           "no explicit determinism guarantee for the model"
                           + (" (a seed alone is none)" if seeded else "")
                           + (f"; attested: {basis}" if basis else "")))
    return out


def _boundary(name: str, b: dict[str, Any], rerun_mode: str, config_key: str) -> list[Finding]:
    mode = b["replay_mode"]
    if mode == "not_used":
        return []
    out = []
    if mode == "unknown":
        out.append(Finding(f"{name}.replay_mode", REDUCES_CONTROL,
                           f"{name} was used but its replay behaviour is unknown"))
    if mode == "recorded_outputs":
        if _state(b["outputs"]) != "value":
            out.append(Finding(f"{name}.outputs", REDUCES_CONTROL,
                               f"{name} replay injects recorded outputs, but they are "
                               f"{_state(b['outputs'])}, not reconstructable"))
        if name == "tools":
            ledger = b["ledger_complete"]
            if not (_state(ledger) == "value" and ledger.get("value") is True):
                out.append(Finding("tools.ledger_complete", PREVENTS_EXACTNESS,
                                   "the tool-call ledger is not attested complete"))
    if mode == rerun_mode:
        if _state(b[config_key]) != "value":
            out.append(Finding(f"{name}.{config_key}", REDUCES_CONTROL,
                               f"{name} is re-run, but its {config_key} is "
                               f"{_state(b[config_key])}, not reconstructable"))
        if not b["deterministic"]:
            out.append(Finding(f"{name}.deterministic", PREVENTS_EXACTNESS,
                               f"{name} is re-run without an explicit determinism guarantee"))
    if name == "retrieval" and _state(b["corpus"]) == "unavailable":
        out.append(Finding("retrieval.corpus", REDUCES_CONTROL,
                           "the retrieval corpus version was not captured"))
    return out


def _environment(env: dict[str, Any]) -> list[Finding]:
    # A hash is enough to fingerprint an identity; absent means not applicable.
    return [Finding(f"environment.{k}", REDUCES_CONTROL, f"environment {k} was not captured")
            for k, item in env.items() if _state(item) == "unavailable"]


def _isolation(iso: dict[str, str]) -> list[Finding]:
    out = []
    for dim, how in iso.items():
        if how == "live":
            out.append(Finding(f"isolation.{dim}", BLOCKS_REPLAY,
                               f"{dim.replace('_', ' ')} is live: a replay would have real effects"))
        elif how == "unknown":
            out.append(Finding(f"isolation.{dim}", REDUCES_CONTROL,
                               f"isolation of {dim.replace('_', ' ')} is unknown"))
    return out


def _provenance(p: dict[str, Any]) -> list[Finding]:
    out = [Finding(f"provenance.{k}", REDUCES_CONTROL, f"provenance {k} was not captured")
           for k in ("trace_id", "span_id") if _state(p[k]) == "unavailable"]
    if p["capture_method"] != "native":
        how = p["capture_method"] + (" (mapped from telemetry)"
                                     if p["capture_method"] == "mapped" else "")
        out.append(Finding("provenance.capture_method", PREVENTS_EXACTNESS,
                           f"capture method is {how}, not native runtime evidence"))
    return out


def level_of(findings: list[Finding]) -> str:
    impacts = {f.impact for f in findings}
    for impact, level in zip(IMPACT_ORDER, LEVELS):
        if impact in impacts:
            return level
    return "exact"


def analyze(manifest: Any) -> Report:
    """Validate ``manifest`` (raises ManifestError) and return its fidelity report."""
    validate(manifest)
    findings = [
        *_model(manifest["model"]),
        *_boundary("tools", manifest["tools"], "execute", "definitions"),
        *_boundary("retrieval", manifest["retrieval"], "rerun", "configuration"),
        *_environment(manifest["environment"]),
        *_isolation(manifest["isolation"]),
        *_provenance(manifest["provenance"]),
    ]
    findings.sort(key=lambda f: (IMPACT_ORDER.index(f.impact), f.path))
    return Report(level_of(findings), findings, manifest_sha256(manifest))
