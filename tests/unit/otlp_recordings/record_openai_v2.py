"""Records one chat call through opentelemetry-instrumentation-openai-v2 2.4b0 per content mode.

openai-v2 2.4b0 imports ``opentelemetry.util.genai.instruments``, which
opentelemetry-util-genai 1.3b0 (the version the official genai instrumentations need) no longer
has, so both cannot be installed together: the suite's venv cannot import openai-v2. This
script runs in a venv of its own and writes what the real package emitted, encoded with the
OTLP exporter's encoders, next to itself; tests/unit/test_otlp_dialects.py decodes the files.

    python -m venv /tmp/v2 && /tmp/v2/bin/pip install opentelemetry-instrumentation-openai-v2==2.4b0 \
        'opentelemetry-util-genai==0.4b0' openai==3.57.0 opentelemetry-sdk==1.45.2 \
        opentelemetry-exporter-otlp-proto-common==1.45.2 httpx
    PYTHONPATH=. /tmp/v2/bin/python tests/unit/otlp_recordings/record_openai_v2.py
"""

from __future__ import annotations

import os
import pathlib

from tests.unit import otlp_harness

HERE = pathlib.Path(__file__).parent

# name: (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, OTEL_SEMCONV_STABILITY_OPT_IN)
MODES = {
    "default-no-content": ("false", ""),
    "default-content": ("true", ""),
    "latest-span-only": ("SPAN_ONLY", "gen_ai_latest_experimental"),
}


def record(name: str, capture: str, opt_in: str) -> None:
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = capture
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = opt_in
    from opentelemetry.instrumentation._semconv import _OpenTelemetrySemanticConventionStability
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    _OpenTelemetrySemanticConventionStability._initialized = False  # re-read the opt-in
    providers = otlp_harness.Providers()
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=providers.tracer_provider,
                            logger_provider=providers.logger_provider)
    try:
        otlp_harness.openai_chat(otlp_harness.openai_client())
    finally:
        instrumentor.uninstrument()
    telemetry = providers.telemetry()
    (HERE / f"openai_v2-{name}.traces.pb").write_bytes(telemetry.traces)
    (HERE / f"openai_v2-{name}.logs.pb").write_bytes(telemetry.logs)


if __name__ == "__main__":
    for mode, (capture, opt_in) in MODES.items():
        record(mode, capture, opt_in)
