"""The services' /metrics endpoints listen on loopback unless told otherwise (a finding: the
writer's bound 0.0.0.0)."""

import pytest

from devstack.ports import free_port
import projections.metrics
import writer.metrics


@pytest.mark.parametrize("module, cls", [(writer.metrics, "WriterMetrics"),
                                         (projections.metrics, "ProjectorMetrics")])
def test_metrics_bind_loopback_by_default(module, cls, monkeypatch):
    seen = {}
    monkeypatch.delenv("EVIDENCE_METRICS_HOST", raising=False)
    monkeypatch.setattr(module, "start_http_server",
                        lambda port, addr, registry: seen.update(port=port, addr=addr))
    getattr(module, cls)().serve(free_port())
    assert seen["addr"] == "127.0.0.1"
    monkeypatch.setenv("EVIDENCE_METRICS_HOST", "0.0.0.0")
    getattr(module, cls)().serve(free_port())
    assert seen["addr"] == "0.0.0.0"
