"""Every fidelity rule, table-driven: one change to an exact manifest, the finding it must
produce and the level that follows."""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys

import pytest
import rfc8785

from fidelity import ManifestError, analyze, analyze_record, json_schema, validate

V = lambda v: {"state": "value", "value": v}  # noqa: E731
H = {"state": "hash", "sha256": "ab" * 32}
ABSENT = {"state": "absent"}
UNAVAILABLE = {"state": "unavailable"}


def exact_manifest() -> dict:
    return {
        "kind": "evidence.replay-runtime",
        "version": 1,
        "model": {
            "input": V([{"role": "user", "content": "hi"}]),
            "system_instructions": V("be brief"),
            "developer_instructions": ABSENT,
            "provider": V("self-hosted-vllm"),
            "model_name": V("qwen3-235b"),
            "parameters": V({"temperature": 0}),
            "seed": V(7),
            "determinism": {"guaranteed": True, "basis": "batch-invariant kernels, pinned weights"},
        },
        "tools": {"replay_mode": "recorded_outputs", "definitions": V([]), "calls": V([]),
                  "outputs": V([]), "ledger_complete": V(True), "deterministic": False},
        "retrieval": {"replay_mode": "rerun", "configuration": V({"k": 4}), "corpus": H,
                      "outputs": V([]), "deterministic": True},
        "environment": {"code_version": V("abc123"), "runtime_version": V("py3.11"),
                        "dependency_lock": H, "configuration": H, "container": ABSENT},
        "isolation": {"network": "isolated", "filesystem": "stubbed",
                      "external_services": "stubbed", "side_effects": "isolated"},
        "provenance": {"trace_id": V("t"), "span_id": V("s"), "capture_method": "native"},
    }


def with_(changes: dict) -> dict:
    m = exact_manifest()
    for path, value in changes.items():
        node = m
        *parents, last = path.split(".")
        for p in parents:
            node = node[p]
        node[last] = copy.deepcopy(value)
    return m


# (changes, expected finding path, expected impact, expected level)
RULES = [
    # blocks_replay
    ({"model.input": H}, "model.input", "blocks_replay", "unreplayable"),
    ({"model.input": UNAVAILABLE}, "model.input", "blocks_replay", "unreplayable"),
    ({"model.provider": H}, "model.provider", "blocks_replay", "unreplayable"),
    ({"model.provider": UNAVAILABLE}, "model.provider", "blocks_replay", "unreplayable"),
    ({"model.model_name": H}, "model.model_name", "blocks_replay", "unreplayable"),
    ({"model.model_name": UNAVAILABLE}, "model.model_name", "blocks_replay", "unreplayable"),
    ({"isolation.network": "live"}, "isolation.network", "blocks_replay", "unreplayable"),
    ({"isolation.filesystem": "live"}, "isolation.filesystem", "blocks_replay", "unreplayable"),
    ({"isolation.external_services": "live"}, "isolation.external_services", "blocks_replay",
     "unreplayable"),
    ({"isolation.side_effects": "live"}, "isolation.side_effects", "blocks_replay",
     "unreplayable"),
    # reduces_control
    ({"tools.replay_mode": "unknown"}, "tools.replay_mode", "reduces_control", "partial"),
    ({"retrieval.replay_mode": "unknown"}, "retrieval.replay_mode", "reduces_control", "partial"),
    ({"tools.outputs": H}, "tools.outputs", "reduces_control", "partial"),
    ({"tools.outputs": UNAVAILABLE}, "tools.outputs", "reduces_control", "partial"),
    ({"retrieval.replay_mode": "recorded_outputs", "retrieval.outputs": H}, "retrieval.outputs",
     "reduces_control", "partial"),
    ({"retrieval.configuration": H}, "retrieval.configuration", "reduces_control", "partial"),
    ({"retrieval.configuration": UNAVAILABLE}, "retrieval.configuration", "reduces_control",
     "partial"),
    ({"tools.replay_mode": "execute", "tools.deterministic": True, "tools.definitions": H},
     "tools.definitions", "reduces_control", "partial"),
    ({"retrieval.corpus": UNAVAILABLE}, "retrieval.corpus", "reduces_control", "partial"),
    ({"model.parameters": UNAVAILABLE}, "model.parameters", "reduces_control", "partial"),
    ({"model.system_instructions": UNAVAILABLE}, "model.system_instructions", "reduces_control",
     "partial"),
    ({"model.developer_instructions": UNAVAILABLE}, "model.developer_instructions",
     "reduces_control", "partial"),
    ({"isolation.network": "unknown"}, "isolation.network", "reduces_control", "partial"),
    ({"isolation.side_effects": "unknown"}, "isolation.side_effects", "reduces_control",
     "partial"),
    ({"environment.code_version": UNAVAILABLE}, "environment.code_version", "reduces_control",
     "partial"),
    ({"environment.dependency_lock": UNAVAILABLE}, "environment.dependency_lock",
     "reduces_control", "partial"),
    ({"environment.container": UNAVAILABLE}, "environment.container", "reduces_control",
     "partial"),
    ({"provenance.trace_id": UNAVAILABLE}, "provenance.trace_id", "reduces_control", "partial"),
    ({"provenance.span_id": UNAVAILABLE}, "provenance.span_id", "reduces_control", "partial"),
    # prevents_exactness
    ({"model.determinism": {"guaranteed": False, "basis": "seed 7"}}, "model.determinism",
     "prevents_exactness", "controlled"),
    ({"retrieval.deterministic": False}, "retrieval.deterministic", "prevents_exactness",
     "controlled"),
    ({"tools.replay_mode": "execute", "tools.deterministic": False}, "tools.deterministic",
     "prevents_exactness", "controlled"),
    ({"provenance.capture_method": "mapped"}, "provenance.capture_method", "prevents_exactness",
     "controlled"),
    ({"provenance.capture_method": "manual"}, "provenance.capture_method", "prevents_exactness",
     "controlled"),
    ({"provenance.capture_method": "unknown"}, "provenance.capture_method", "prevents_exactness",
     "controlled"),
    ({"tools.ledger_complete": V(False)}, "tools.ledger_complete", "prevents_exactness",
     "controlled"),
    ({"tools.ledger_complete": UNAVAILABLE}, "tools.ledger_complete", "prevents_exactness",
     "controlled"),
]


def test_the_base_manifest_is_exact():
    report = analyze(exact_manifest())
    assert (report.level, report.missing_evidence) == ("exact", [])


@pytest.mark.parametrize("changes,path,impact,level", RULES,
                         ids=[f"{r[1]}={r[2]}" for r in RULES])
def test_rule(changes, path, impact, level):
    report = analyze(with_(changes))
    assert [(f.path, f.impact) for f in report.missing_evidence] == [(path, impact)]
    assert report.level == level
    assert report.missing_evidence[0].reason


NOT_FINDINGS = [
    # Hash-only environment identity is fine; absent is not applicable.
    {"environment.code_version": H, "environment.runtime_version": ABSENT},
    # Boundaries that did not participate are not judged.
    {"tools.replay_mode": "not_used", "tools.outputs": UNAVAILABLE,
     "tools.ledger_complete": UNAVAILABLE},
    {"retrieval.replay_mode": "not_used", "retrieval.corpus": UNAVAILABLE,
     "retrieval.configuration": UNAVAILABLE},
    # An empty input attested absent is not missing identity.
    {"model.input": ABSENT},
    # Stubbed counts as isolated.
    {"isolation.network": "stubbed"},
]


@pytest.mark.parametrize("changes", NOT_FINDINGS)
def test_not_a_finding(changes):
    assert analyze(with_(changes)).level == "exact"


def test_a_seed_is_not_a_determinism_guarantee():
    report = analyze(with_({"model.seed": V(42),
                            "model.determinism": {"guaranteed": False, "basis": "seed=42"}}))
    assert report.level == "controlled"
    assert "a seed alone is none" in report.missing_evidence[0].reason


def test_the_worst_impact_decides_and_every_gap_is_listed():
    report = analyze(with_({"isolation.network": "live", "model.parameters": UNAVAILABLE,
                            "provenance.capture_method": "mapped"}))
    assert report.level == "unreplayable"
    assert [f.impact for f in report.missing_evidence] == [
        "blocks_replay", "reduces_control", "prevents_exactness"]


def test_manifest_sha256_is_over_rfc8785_canonical_json():
    m = exact_manifest()
    expected = hashlib.sha256(rfc8785.dumps(m)).hexdigest()
    assert analyze(m).manifest_sha256 == expected
    reordered = json.loads(json.dumps(m, sort_keys=True))
    assert analyze(reordered).manifest_sha256 == expected


def test_analysis_is_deterministic():
    m = with_({"model.input": H, "isolation.network": "unknown"})
    assert analyze(m).to_dict() == analyze(copy.deepcopy(m)).to_dict()


@pytest.mark.parametrize("bad,needle", [
    ({"kind": "engram.replay-runtime"}, "$.kind"),
    ({"version": 2}, "$.version"),
    ({"model.input": {"state": "hash", "sha256": "XYZ"}}, "$.model.input: not an evidence item"),
    ({"model.seed": {"state": "value"}}, "$.model.seed"),
    ({"isolation.network": "sandboxed"}, "$.isolation.network"),
    ({"tools.replay_mode": "rerun"}, "$.tools.replay_mode"),
    ({"retrieval.replay_mode": "execute"}, "$.retrieval.replay_mode"),
    ({"provenance.extra": 1}, "$.provenance"),
])
def test_invalid_manifests_name_the_path(bad, needle):
    with pytest.raises(ManifestError) as e:
        analyze(with_(bad))
    assert any(p.startswith(needle) for p in e.value.problems), e.value.problems


def test_published_schema_is_the_one_validated_against():
    assert json_schema()["properties"]["kind"]["const"] == "evidence.replay-runtime"
    validate(exact_manifest())


def _record(**over):
    rec = {"stream": "s", "seq": 1, "request_bytes": b'{"model":"gpt-x"}', "content_key": b"\x01" * 32,
           "provider_name": "openai", "provider_endpoint": "http://127.0.0.1/v1/chat/completions",
           "model_id": "gpt-x", "params": '{"temperature":0}', "seed": None,
           "response_bytes": b"{}", "outcome": "COMMITTED"}
    rec.update(over)
    return rec


def test_a_record_with_its_bytes_is_exact_from_the_log_and_controlled_live():
    out = analyze_record(_record())
    assert out["log_replay"]["level"] == "exact"
    assert out["live_reexecution"]["level"] == "controlled"


def test_a_seeded_record_is_still_only_controlled_live():
    out = analyze_record(_record(seed=7))
    assert out["live_reexecution"]["level"] == "controlled"
    assert "a seed was sent" in out["live_reexecution"]["missing_evidence"][0]["reason"]


def test_a_seed_from_the_numeric_column_is_kept_exact_at_any_size():
    from decimal import Decimal

    big = 2**64 + 1  # beyond what a JSON number (an IEEE double, RFC 8785) holds exactly
    for seed in (Decimal(big), big, str(big)):
        out = analyze_record(_record(seed=seed))
        got = out["live_reexecution"]["manifest"]["model"]["seed"]
        assert got == {"state": "value", "value": str(big)}
        json.dumps(out)  # JSON-ready: no Decimal left in the report


def test_a_hash_only_record_cannot_reconstruct_its_input():
    out = analyze_record(_record(request_bytes=None))
    assert out["log_replay"]["level"] == out["live_reexecution"]["level"] == "unreplayable"


def test_a_record_without_response_bytes_is_not_exact_from_the_log():
    out = analyze_record(_record(response_bytes=None, outcome="FAILED"))
    assert out["log_replay"]["level"] == "controlled"


def _cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "cli.main", "fidelity", *args],
                          input=stdin, capture_output=True, text=True)


def test_cli_analyzes_a_file_and_exit_codes(tmp_path):
    f = tmp_path / "m.json"
    f.write_text(json.dumps(with_({"isolation.network": "unknown"})))
    r = _cli("analyze", str(f))
    assert r.returncode == 0 and "level: partial" in r.stdout and "isolation.network" in r.stdout
    r = _cli("analyze", str(f), "--json")
    assert json.loads(r.stdout)["level"] == "partial"
    assert _cli("analyze", str(f), "--require", "controlled").returncode == 3
    assert _cli("analyze", str(f), "--require", "partial").returncode == 0
    assert _cli("analyze", str(tmp_path / "missing.json")).returncode == 1
    f.write_text("{not json")
    assert _cli("analyze", str(f)).returncode == 2
    r = _cli("analyze", "-", stdin=json.dumps({"kind": "x"}))
    assert r.returncode == 2 and "$.kind" in r.stderr
