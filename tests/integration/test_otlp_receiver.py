"""``evidence otlp`` over real HTTP against real Kafka: OTLP/HTTP's answers (400 / 413 / 415,
partial success, 503 when Kafka is away), on a test's own topics."""

from __future__ import annotations

import base64
import gzip
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile

import httpx
import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from devstack.ports import free_port
from evidence_contract.digests import output_digest
from tests.fixtures.log import wait_until
from tests.fixtures.writer import read_all, verify_log
from tests.unit import otlp_harness as h

pytestmark = pytest.mark.integration

PROTOBUF = {"content-type": "application/x-protobuf"}
JSON = {"content-type": "application/json"}


class ReceiverProcess:
    """One ``evidence otlp`` subprocess on a free 127.0.0.1 port; its output (JSON lines)
    goes to a temp file."""

    def __init__(self, bootstrap: str, prefix: str, env: dict[str, str] | None = None) -> None:
        self.log = tempfile.NamedTemporaryFile("w+b", prefix="otlp-", suffix=".log",
                                               delete=False)
        for _attempt in range(3):  # another process may take the port before the receiver
            self.url = f"http://127.0.0.1:{free_port()}"
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "otlp", "--bootstrap", bootstrap,
                 "--topic-prefix", prefix, "--port", self.url.rsplit(":", 1)[1],
                 "--max-body-bytes", str(64 * 1024)],
                env={**{k: v for k, v in os.environ.items() if not k.startswith("EVIDENCE_")},
                     "EVIDENCE_OTLP_DELIVERY_TIMEOUT_S": "5", **(env or {})},
                stdout=self.log, stderr=subprocess.STDOUT)
            if wait_until("evidence otlp to answer or exit", self._settled, timeout=60) == "up":
                return
            if "address already in use" not in self.output():
                break
        pytest.fail(f"evidence otlp did not start:\n{self.output()[-4000:]}")

    def _settled(self) -> str | None:
        if self.proc.poll() is not None:
            return "exited"
        try:
            return "up" if httpx.get(self.url + "/healthz").status_code == 200 else None
        except httpx.TransportError:
            return None

    def output(self) -> str:
        return pathlib.Path(self.log.name).read_text("utf-8", "replace")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)


@pytest.fixture
def make_receiver(kafka_bootstrap):
    """Factory: ``make_receiver(topics)`` runs ``evidence otlp`` on the test's topics."""
    started: list[ReceiverProcess] = []

    def make(topics, bootstrap: str | None = None, **env: str) -> ReceiverProcess:
        started.append(ReceiverProcess(bootstrap or kafka_bootstrap, topics.names.prefix, env))
        return started[-1]

    yield make
    for receiver in started:
        # uvicorn shuts down cleanly, then re-raises the signal it caught
        assert receiver.stop() in (0, -signal.SIGTERM), receiver.output()[-4000:]
        assert "Application shutdown complete" in receiver.output()
        os.unlink(receiver.log.name)


@pytest.fixture
def receiver(make_receiver, topics) -> str:
    return make_receiver(topics).url


def otlp_json(body: bytes) -> bytes:
    """A protobuf ExportTraceServiceRequest as OTLP/JSON: hex ids, lowerCamelCase keys."""
    document = json_format.MessageToDict(ExportTraceServiceRequest.FromString(body))
    for resource in document.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document).encode()


def status_of(response: httpx.Response) -> status_pb2.Status:
    if response.headers["content-type"].startswith("application/json"):
        return json_format.Parse(response.content, status_pb2.Status())
    return status_pb2.Status.FromString(response.content)


def test_an_unknown_content_type_is_415(receiver):
    r = httpx.post(receiver + "/v1/traces", content=b"{}", headers={"content-type": "text/plain"})
    assert r.status_code == 415 and "content type" in status_of(r).message


def test_an_unknown_content_encoding_is_415_in_the_requests_type(receiver):
    r = httpx.post(receiver + "/v1/logs", content=b"\x00",
                   headers={**PROTOBUF, "content-encoding": "br"})
    assert r.status_code == 415 and r.headers["content-type"] == "application/x-protobuf"
    assert "content encoding" in status_of(r).message


@pytest.mark.parametrize("headers, body", [(PROTOBUF, b"\xff\xff\xff"), (JSON, b"{not json"),
                                           (JSON, b'{"resourceSpans": 5}')])
def test_a_body_that_is_no_export_request_is_400_with_a_status(receiver, headers, body):
    r = httpx.post(receiver + "/v1/traces", content=body, headers=headers)
    assert r.status_code == 400 and r.headers["content-type"] == headers["content-type"]
    status = status_of(r)
    assert status.code == 3 and "the body is not" in status.message


def test_a_body_past_the_cap_is_413_also_when_it_inflates_past_it(receiver):
    big = b"\x00" * (65 * 1024)
    assert httpx.post(receiver + "/v1/traces", content=big, headers=PROTOBUF).status_code == 413
    bomb = gzip.compress(b"\x0a\x00" * (200 * 1024))  # small on the wire, 400 KiB inflated
    assert len(bomb) < 64 * 1024
    r = httpx.post(receiver + "/v1/traces", content=bomb,
                   headers={**PROTOBUF, "content-encoding": "gzip"})
    assert r.status_code == 413 and "exceeds 65536 bytes" in status_of(r).message


def test_spans_that_are_not_genai_are_taken_and_not_kept(receiver, topics, kafka_bootstrap):
    body = h.export(h.span({"http.request.method": "GET"}))
    r = httpx.post(receiver + "/v1/traces", content=otlp_json(body), headers=JSON)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert json.loads(r.content) == {}  # no partial_success: nothing was rejected
    assert read_all(kafka_bootstrap, topics.names.intake) == []


def test_genai_items_the_contract_cannot_hold_are_a_partial_success(receiver):
    body = h.export(h.span({**h.GENAI, "evidence.event_id": "NOT-A-UUID"}),
                   h.span({"http.request.method": "GET"}, span_id=b"\x05" * 8))
    r = httpx.post(receiver + "/v1/traces", content=body, headers=PROTOBUF)
    assert r.status_code == 200
    answer = ExportTraceServiceResponse.FromString(r.content)
    assert answer.partial_success.rejected_spans == 1
    assert "evidence.event_id" in answer.partial_success.error_message
    r = httpx.post(receiver + "/v1/logs", content=b"", headers=PROTOBUF)
    assert r.status_code == 200 and not ExportLogsServiceResponse.FromString(
        r.content).HasField("partial_success")


def test_healthz(receiver, topics):
    r = httpx.get(receiver + "/healthz")
    assert r.status_code == 200 and r.json()["topic"] == topics.names.intake


# --- captures sealed (record contract 2.2) --------------------------------------------------


def sealed(kafka_bootstrap, topics, writer, n):
    """The log's records once the writer took all of the intake, which must be ``n``."""
    writer.wait_consumed(topics.names.intake)
    records = [r for recs in verify_log(read_all(kafka_bootstrap, topics.names.log)).values()
               for r in recs]
    assert len(records) == n, [r["body"]["event_id"] for r in records]
    return [r["body"] for r in records]


def test_the_otlp_exporter_protobuf_gzip_its_span_sealed(make_receiver, topics, run_writer,
                                                         kafka_bootstrap, monkeypatch):
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    writer = run_writer(topics)
    url = make_receiver(topics).url
    providers = h.genai_openai_call(monkeypatch, "SPAN_ONLY")
    (span,) = providers.spans.get_finished_spans()
    exporter = OTLPSpanExporter(endpoint=url + "/v1/traces", compression=Compression.Gzip)
    assert exporter.export([span]) == SpanExportResult.SUCCESS
    assert exporter.export([span]) == SpanExportResult.SUCCESS  # a resend: absorbed
    exporter.shutdown()
    (body,) = sealed(kafka_bootstrap, topics, writer, 1)
    assert body["schema_version"] == "2.2" and body["stream"] == "otel"
    assert body["trace"] == {"trace_id": span.context.trace_id.to_bytes(16, "big"),
                             "span_id": span.context.span_id.to_bytes(8, "big")}
    t = body["telemetry"]
    assert (t["dialect"], t["scope_name"], t["source"]) == (
        "gen_ai", "opentelemetry.instrumentation.genai.openai", "SPAN")
    assert body["content_key"] == t["span_digest"] and len(t["otlp_digest"]) == 32
    assert t["content_from"] == ["gen_ai.input.messages", "gen_ai.output.messages"]
    assert body["output_digest"] == output_digest(h.ANSWER)
    assert body["capture"]["request_policy"] == "HASH_ONLY"
    assert body["capture"]["library"].endswith(
        "(mapped from telemetry: gen_ai opentelemetry.instrumentation.genai.openai 1.3b0)")
    assert body["replay"]["seed"] == "42" and body["model_id"] == "gpt-4o-mini"


def test_resends_in_either_encoding_are_one_record_a_conflict_two(make_receiver, topics,
                                                                  run_writer, kafka_bootstrap):
    writer = run_writer(topics)
    url = make_receiver(topics).url
    body = h.export(h.span(h.GENAI))
    for content, headers in ((body, PROTOBUF), (otlp_json(body), JSON),
                             (gzip.compress(body), {**PROTOBUF, "content-encoding": "gzip"})):
        r = httpx.post(url + "/v1/traces", content=content, headers=headers)
        assert r.status_code == 200, r.content
        assert r.headers["content-type"] == headers["content-type"]
    (first,) = sealed(kafka_bootstrap, topics, writer, 1)
    conflicting = h.export(h.span({**h.GENAI, "gen_ai.response.model": "gpt-4o"}))
    assert httpx.post(url + "/v1/traces", content=conflicting, headers=PROTOBUF).status_code == 200
    records = sealed(kafka_bootstrap, topics, writer, 2)
    assert records[0] == first and records[1]["trace"] == first["trace"]
    assert records[1]["event_id"] != first["event_id"]
    assert records[1]["telemetry"]["span_digest"] != first["telemetry"]["span_digest"]


def test_an_inference_event_over_v1_logs_is_sealed(make_receiver, topics, run_writer,
                                                   kafka_bootstrap, monkeypatch):
    writer = run_writer(topics)
    url = make_receiver(topics).url
    providers = h.genai_openai_call(monkeypatch, "EVENT_ONLY")
    r = httpx.post(url + "/v1/logs", content=providers.telemetry().logs, headers=PROTOBUF)
    assert r.status_code == 200
    assert not ExportLogsServiceResponse.FromString(r.content).HasField("partial_success")
    (body,) = sealed(kafka_bootstrap, topics, writer, 1)
    assert body["telemetry"]["source"] == "LOG_EVENT"
    assert body["output_digest"] == output_digest(h.ANSWER)


def test_kafka_away_is_503_with_retry_after(make_receiver, topics):
    receiver = make_receiver(topics, bootstrap=f"127.0.0.1:{free_port()}")  # nothing listens
    r = httpx.post(receiver.url + "/v1/traces", content=h.export(h.span(h.GENAI)),
                   headers=PROTOBUF, timeout=30)
    assert r.status_code == 503 and r.headers["retry-after"] == "5"
    assert status_of(r).code == 14
    assert httpx.get(receiver.url + "/healthz").json()["kafka"] == "down"
    assert receiver.proc.poll() is None  # it waits for Kafka, it does not exit


def test_the_producers_queue_full_is_429_with_retry_after(make_receiver, topics):
    receiver = make_receiver(topics, bootstrap=f"127.0.0.1:{free_port()}",
                             EVIDENCE_OTLP_QUEUE_MAX_MESSAGES="1")
    two = h.export(h.span(h.GENAI), h.span(h.GENAI, span_id=b"\x07" * 8))
    r = httpx.post(receiver.url + "/v1/traces", content=otlp_json(two), headers=JSON, timeout=30)
    assert r.status_code == 429 and r.headers["retry-after"] == "5"
    assert r.headers["content-type"] == "application/json" and status_of(r).code == 8
