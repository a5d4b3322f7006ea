"""The services' /metrics endpoints listen on loopback unless told otherwise (a finding: the
writer's bound 0.0.0.0); the address is a setting (EVIDENCE_METRICS_HOST), read by each
service's settings module."""

import pytest

from devstack.ports import free_port
import projections.metrics
import writer.metrics
from projections.config import ProjectorConfig
from writer.config import WriterConfig


@pytest.mark.parametrize("module, cls, config", [
    (writer.metrics, "WriterMetrics", WriterConfig),
    (projections.metrics, "ProjectorMetrics", ProjectorConfig)])
def test_metrics_bind_loopback_by_default(module, cls, config, monkeypatch):
    seen = {}
    monkeypatch.setattr(module, "start_http_server",
                        lambda port, addr, registry: seen.update(port=port, addr=addr))
    getattr(module, cls)().serve(free_port(), config.from_env({}).metrics_host)
    assert seen["addr"] == "127.0.0.1"
    host = config.from_env({"EVIDENCE_METRICS_HOST": "0.0.0.0"}).metrics_host
    getattr(module, cls)().serve(free_port(), host)
    assert seen["addr"] == "0.0.0.0"
