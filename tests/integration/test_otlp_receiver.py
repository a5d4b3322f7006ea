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
from tests.fixtures.log import wait_until
from tests.fixtures.writer import read_all
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
