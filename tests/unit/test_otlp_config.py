"""evidence otlp's settings: read once, a bad value naming its variable, flags over variables."""

from __future__ import annotations

import argparse

import pytest

from cli.main import _commands
from otlp.config import DEFAULT_PORT, ReceiverConfig


def test_the_defaults():
    cfg = ReceiverConfig.from_env({})
    assert (cfg.host, cfg.port, cfg.stream, cfg.stream_by_service) == (
        "127.0.0.1", DEFAULT_PORT, "otel", False)
    assert cfg.names.intake == "evidence.intake" and cfg.bootstrap == "127.0.0.1:9092"


def test_variables_then_flags():
    cfg = ReceiverConfig.from_env({
        "EVIDENCE_OTLP_PORT": "14318", "EVIDENCE_OTLP_STREAM": "telemetry:prod",
        "EVIDENCE_OTLP_STREAM_BY_SERVICE": "true", "EVIDENCE_OTLP_MAX_BODY_BYTES": "1024",
        "EVIDENCE_TOPIC_PREFIX": "acme", "EVIDENCE_OTLP_DELIVERY_TIMEOUT_S": "2.5"})
    assert (cfg.port, cfg.stream, cfg.stream_by_service, cfg.max_body_bytes) == (
        14318, "telemetry:prod", True, 1024)
    assert cfg.names.intake == "acme.intake" and cfg.delivery_timeout_s == 2.5
    parser = argparse.ArgumentParser()
    _commands()["otlp"][1](parser)
    args = parser.parse_args(["--port", "5000", "--stream", "s2", "--topic-prefix", "other"])
    flagged = cfg.with_args(args)
    assert (flagged.port, flagged.stream, flagged.names.intake) == (5000, "s2", "other.intake")
    assert flagged.stream_by_service is True  # a flag not given leaves the variable's value


@pytest.mark.parametrize("env, names", [
    ({"EVIDENCE_OTLP_STREAM": "not a stream"}, "stream id"),
    ({"EVIDENCE_OTLP_PORT": "70000"}, "EVIDENCE_OTLP_PORT"),
    ({"EVIDENCE_OTLP_PORT": "x"}, "EVIDENCE_OTLP_PORT"),
    ({"EVIDENCE_OTLP_STREAM_BY_SERVICE": "maybe"}, "EVIDENCE_OTLP_STREAM_BY_SERVICE"),
    ({"EVIDENCE_OTLP_MAX_BODY_BYTES": "0"}, "EVIDENCE_OTLP_MAX_BODY_BYTES"),
    ({"EVIDENCE_OTLP_DELIVERY_TIMEOUT_S": "-1"}, "EVIDENCE_OTLP_DELIVERY_TIMEOUT_S"),
])
def test_a_value_that_cannot_work_names_its_variable(env, names):
    with pytest.raises(ValueError, match=names):
        ReceiverConfig.from_env(env)


def test_a_bad_setting_exits_2():
    from cli.main import main

    assert main(["otlp", "--stream", "no spaces"]) == 2
