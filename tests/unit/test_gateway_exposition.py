"""The client's Prometheus exposition: the text format parses, and register() exports the
same samples through prometheus_client."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from evidence_client import Recorder
from evidence_client.exposition import CAPTURES, PENDING, STATES, prometheus_text, register


def _recorder(tmp_path) -> Recorder:
    # never started: no Kafka needed to read its counters
    r = Recorder(bootstrap_servers="127.0.0.1:1", stream="acme:bot", spool_dir=tmp_path)
    r.metrics.add("captured", 5)
    r.metrics.add("failed", 2)
    r.metrics.pending = 3
    return r


def _values(text: str) -> dict[tuple[str, str], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, s.labels.get("state", ""))] = s.value
            assert s.labels["stream"] == "acme:bot"
    return out


def test_text_exposition_parses_and_carries_every_counter(tmp_path):
    text = prometheus_text([_recorder(tmp_path)])
    values = _values(text)
    assert values[(CAPTURES, "captured")] == 5 and values[(CAPTURES, "failed")] == 2
    assert values[(PENDING, "")] == 3
    assert {state for name, state in values if name == CAPTURES} == set(STATES)
    assert prometheus_text([]) == ""


def test_register_exports_the_same_samples(tmp_path):
    registry = CollectorRegistry()
    register(_recorder(tmp_path), registry)
    assert _values(generate_latest(registry).decode()) == _values(
        prometheus_text([_recorder(tmp_path)]))
