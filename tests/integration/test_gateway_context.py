"""One Recorder, many streams, with call context: the openai SDK calls the fake provider over
real HTTP; the real writer seals each call in the stream chosen for it, and accepts (verifies)
the application's input, prompt and chunk digests."""

from __future__ import annotations

import hashlib
import threading

import openai
import pytest

import evidence_client
from evidence_client import Chunk, Recorder, call_context
from evidence_contract import split_record
from evidence_contract.topics import partition_for
from tests.fixtures.writer import read_all, verify_log, wait_for_count

pytestmark = pytest.mark.integration


def sha(prefix: int, data: bytes) -> bytes:
    return hashlib.sha256(bytes([prefix]) + data).digest()


def ask(client: openai.OpenAI, text: str) -> None:
    client.chat.completions.create(model="gpt-4o-mini",
                                   messages=[{"role": "user", "content": text}])


def test_one_recorder_many_streams_with_call_context(topics, run_writer, kafka_bootstrap,
                                                      fake_provider, tmp_path):
    run_writer(topics)
    recorder = Recorder(kafka_bootstrap, topic_prefix=topics.names.prefix,
                        spool_dir=tmp_path / "spool")  # no default stream
    try:
        def client(stream: str | None) -> openai.OpenAI:
            return openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="sk-test",
                                 max_retries=0, http_client=recorder.http_client(stream=stream))

        a, b, unnamed = client("acme:tenant-a"), client("acme:tenant-b"), client(None)
        ask(a, "a-1")
        ask(b, "b-1")
        with evidence_client.stream("acme:tenant-c"):
            ask(a, "c-1")                         # the block wins over the client's stream
            with call_context(input="raw user text: c-2", prompt="rendered prompt c-2",
                              retrieval=[Chunk("kb/doc-1", "v1", "first chunk"),
                                         Chunk("kb/doc-2", None, "second chunk")]):
                ask(unnamed, "c-2")

        # threads and their own stream blocks: one sender thread serves them all
        def tenant(n: int) -> None:
            with evidence_client.stream(f"acme:thread-{n}"):
                for i in range(5):
                    ask(unnamed, f"t{n}-{i}")

        threads = [threading.Thread(target=tenant, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with pytest.raises(evidence_client.ConfigError, match="no stream"):
            ask(unnamed, "nowhere")
    finally:
        recorder.close(timeout=30)
    senders = [t for t in threading.enumerate() if t.name == "evidence-client-sender"]
    assert senders == []
    assert recorder.metrics.snapshot()["delivered"] == 24

    by_stream = verify_log(wait_for_count(kafka_bootstrap, topics.names.log, 24))
    counts = {s: len(r) for s, r in by_stream.items()}
    assert counts == {"acme:tenant-a": 1, "acme:tenant-b": 1, "acme:tenant-c": 2,
                      **{f"acme:thread-{n}": 5 for n in range(4)}}
    c2 = by_stream["acme:tenant-c"][1]["body"]
    assert c2["input_digest"] == sha(0x02, b"raw user text: c-2")
    assert c2["input_bytes"] == b"raw user text: c-2"
    assert c2["prompt_digest"] == sha(0x03, b"rendered prompt c-2")
    assert [(c["doc_id"], c["chunk_digest"]) for c in c2["retrieval"]] == [
        ("kb/doc-1", sha(0x06, b"first chunk")), ("kb/doc-2", sha(0x06, b"second chunk"))]
    assert by_stream["acme:tenant-c"][0]["body"]["input_digest"] is None
    assert read_all(kafka_bootstrap, topics.names.rejected) == []
    for m in read_all(kafka_bootstrap, topics.names.log):
        stream = split_record(m.value())[1]["body"]["stream"]
        assert m.key() == stream.encode()
        # the client partitions as Kafka's Java client does: murmur2 of the stream id
        assert m.partition() == partition_for(stream, topics.partitions)
