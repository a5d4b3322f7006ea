"""Any size, never silent, never blocking: captures of 1 KiB, 16.5 MiB, 40 MiB and 200 MiB go
through a real Recorder, the real intake topic and the real writer. Up to max_verbatim_bytes
the record keeps the bytes verbatim; above it the record is sealed truncated with the digests
and lengths of the full bytes. A capture the cluster refuses as too large (a topic limit below
the client's) is resent truncated, and nothing after it waits."""

from __future__ import annotations

import hashlib
import json
import logging

import httpx2
import pytest

from evidence_client import Recorder
from evidence_contract import split_record
from tests.fixtures.writer import read_all, verify_log, wait_for_count

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
ANSWER = json.dumps({"id": "x", "object": "chat.completion", "model": "m",
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                  "finish_reason": "stop"}]}).encode()


def sha(prefix: int, data: bytes) -> bytes:
    return hashlib.sha256(bytes([prefix]) + data).digest()


def request_of(size: int, tag: str) -> bytes:
    head = b'{"model":"m","messages":[{"role":"user","content":"' + tag.encode() + b" "
    tail = b'"}]}'
    return head + b"A" * (size - len(head) - len(tail)) + tail


def provider(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, content=ANSWER, headers={"content-type": "application/json"})


def record_calls(recorder: Recorder, bodies: list[bytes]) -> None:
    client = recorder.http_client(transport=httpx2.MockTransport(provider))
    for body in bodies:
        r = client.post("https://api.openai.com/v1/chat/completions", content=body,
                        headers={"content-type": "application/json"})
        assert r.status_code == 200 and r.content == ANSWER


def sealed_bodies(bootstrap: str, topic: str, n: int) -> dict[bytes, dict]:
    msgs = wait_for_count(bootstrap, topic, n, timeout=180)
    verify_log(msgs)
    out = {}
    for m in msgs:
        _, rec = split_record(m.value())
        out[rec["body"]["content_key"]] = rec["body"]
    assert len(out) == len(msgs), "a capture was sealed twice"
    return out


def test_sizes_from_1_kib_to_200_mib_are_all_sealed(make_recorder, topics, run_writer,
                                                     kafka_bootstrap, caplog):
    run_writer(topics)
    sizes = {"1KiB": 1024, "16.5MiB": int(16.5 * MIB), "40MiB": 40 * MIB, "200MiB": 200 * MIB}
    big = {name: request_of(size, name) for name, size in sizes.items()}
    after = [request_of(512, f"after-{i}") for i in range(60)]
    recorder = make_recorder(topics, stream="acme:sizes")
    with caplog.at_level(logging.WARNING, logger="evidence_client"):
        record_calls(recorder, list(big.values()) + after)
        recorder.close(timeout=120)
    m = recorder.metrics.snapshot()
    print("sizes:", {n: len(b) for n, b in big.items()}, "metrics:", m)
    assert m["captured"] == 64 and m["delivered"] + m["resent"] == 64
    assert m["truncated"] == 1 and m["failed"] == 0 and m["undeliverable"] == 0
    assert "larger than max_verbatim_bytes" in caplog.text

    sealed = sealed_bodies(kafka_bootstrap, topics.names.log, 64)
    for name, body in big.items():
        rec = sealed[sha(0x00, body)]
        assert rec["request_length"] == len(body)
        assert rec["response_length"] == len(ANSWER)
        assert rec["response_digest"] == sha(0x01, ANSWER)
        if name == "200MiB":
            assert rec["capture"]["truncated"] is True
            assert rec["request_bytes"] is None and rec["response_bytes"] is None
        else:
            assert rec["capture"]["truncated"] is False
            assert rec["request_bytes"] == body and rec["response_bytes"] == ANSWER
        print(f"{name}: sealed, truncated={rec['capture']['truncated']}")
    for body in after:
        assert sealed[sha(0x00, body)]["request_bytes"] == body
    assert read_all(kafka_bootstrap, topics.names.rejected) == []


def test_a_capture_the_cluster_refuses_as_too_large_is_sealed_truncated(make_topics, make_recorder,
                                                                         run_writer,
                                                                         kafka_bootstrap):
    # The topics allow 16 MiB, the client keeps up to its default 48 MiB: the broker refuses
    # an 18 MiB capture (MSG_SIZE_TOO_LARGE, not retriable) and the recorder resends it
    # truncated; the 60 captures after it are neither lost nor stuck behind it.
    topics = make_topics(max_message_bytes=16 * MIB)
    run_writer(topics)
    big = request_of(18 * MIB, "too-large")
    after = [request_of(512, f"next-{i}") for i in range(60)]
    recorder = make_recorder(topics, stream="acme:refused")
    record_calls(recorder, [big] + after)
    recorder.close(timeout=60)
    m = recorder.metrics.snapshot()
    print("metrics:", m)
    assert m["truncated"] == 1 and m["failed"] == 0 and m["undeliverable"] == 0
    assert m["pending"] == 0

    sealed = sealed_bodies(kafka_bootstrap, topics.names.log, 61)
    rec = sealed[sha(0x00, big)]
    assert rec["capture"]["truncated"] is True and rec["request_length"] == len(big)
    assert all(sha(0x00, b) in sealed for b in after)
