"""ops/prometheus/alerts.yml: well-formed rules that name only metrics the services export."""

import re
from pathlib import Path

import pytest
import yaml

from api.metrics import ApiMetrics
from projections.metrics import ProjectorMetrics
from writer.metrics import WriterMetrics

RULES = Path(__file__).resolve().parents[2] / "ops" / "prometheus" / "alerts.yml"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum"),
            "gauge": ("",), "summary": ("_count", "_sum")}


def exported() -> set[str]:
    """Every sample name the three services' registries and the client's exposition can
    expose."""
    from evidence_client.exposition import CAPTURES, PENDING

    names = {CAPTURES, PENDING}
    for registry in (WriterMetrics().registry, ProjectorMetrics().registry,
                     ApiMetrics().registry):
        for family in registry.collect():
            names |= {family.name + s for s in SUFFIXES[family.type]}
    return names


def rules() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_every_rule_is_an_alert_with_an_expression_severity_and_summary():
    rs = rules()
    assert len(rs) >= 8
    names = [r["alert"] for r in rs]
    assert len(names) == len(set(names))
    for r in rs:
        assert r["expr"].strip() and r["labels"]["severity"] in ("warning", "critical")
        assert r["annotations"]["summary"]


@pytest.mark.parametrize("rule", rules(), ids=lambda r: r["alert"])
def test_every_metric_a_rule_names_is_exported(rule):
    names = set(re.findall(r"\bevidence_[a-z0-9_]+\b", rule["expr"]))
    assert names, "a rule on no evidence metric"
    assert names <= exported(), f"not exported: {sorted(names - exported())}"


def test_the_rules_cover_the_writer_the_projector_and_the_api():
    text = RULES.read_text()
    for needed in ("evidence_writer_transaction_commit_seconds_count", "evidence_writer_intake_lag",
                   "evidence_writer_rejected_total", "evidence_api_projector_heartbeat_age_seconds",
                   "evidence_projector_lag", "evidence_api_projection_lag",
                   "evidence_client_spool_pending"):
        assert needed in text
