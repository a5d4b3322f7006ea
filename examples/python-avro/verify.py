"""Re-verify every sealed record on <prefix>.log with nothing but the schema file.

    python verify.py --bootstrap 127.0.0.1:9092 --topic-prefix evidence \
        --schema ../../schemas/avro/EvidenceRecord.avsc

Reads the whole log from offset 0 (read_committed), decodes each EvidenceRecord with the
official Apache Avro package and checks, per stream: seq is 1, 2, 3, ... with no gap or
repeat, prev_digest chains (32 zero bytes for seq 1), record_digest, content_key over
request_bytes, response_digest over response_bytes (and the input, prompt and chunk digests
when their bytes are kept). The decoded body and record are re-encoded with this library and
must be the exact bytes on the log: the encoding is canonical across Avro implementations.

Prints one JSON line {"records", "streams", "errors", ...}; exits 1 on any error.
``--fingerprints`` prints each schema's Parsing Canonical Form and fingerprint instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid

from common import (CHUNK, CONTENT_KEY, GENESIS, HEADER_SIZE, INPUT, LIBRARY, PROMPT, RESPONSE,
                    avro_binary, decode_single_object, digest, fingerprint, load_schema,
                    record_digest)

LANG = "python-avro"
MAX_ERRORS = 100


class Verifier:
    """Feed records in offset order per partition; collects errors."""

    def __init__(self, schema) -> None:
        self.schema = schema
        self.body_schema = schema.fields_dict["body"].type
        self.records = 0
        self.errors: list[str] = []
        self.error_count = 0
        # stream -> [partition, last seq, last record_digest]
        self.heads: dict[str, list] = {}

    def error(self, msg: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(msg)

    def add(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        self.records += 1
        where = f"partition {partition} offset {offset}"
        try:
            rec = decode_single_object(self.schema, value or b"")
        except Exception as e:  # noqa: BLE001 - any decode failure is a finding
            self.error(f"{where}: does not decode: {e}")
            return
        body, seal = rec["body"], rec["seal"]
        stream, seq = body["stream"], seal["seq"]
        where = f"stream {stream} seq {seq} ({where})"

        if key != stream.encode("utf-8"):
            self.error(f"{where}: message key {key!r} is not the stream id")
        # Canonical encoding: this library's bytes for the decoded values are the log's bytes.
        body_avro = avro_binary(self.body_schema, body)
        if value[HEADER_SIZE:HEADER_SIZE + len(body_avro)] != body_avro:
            self.error(f"{where}: re-encoded body differs from the sealed bytes")
        if value[HEADER_SIZE:] != avro_binary(self.schema, rec):
            self.error(f"{where}: re-encoded record differs from the sealed bytes")

        for name, d in [("content_key", body["content_key"]), ("input_digest", body["input_digest"]),
                        ("prompt_digest", body["prompt_digest"]),
                        ("response_digest", body["response_digest"]),
                        ("output_digest", body["output_digest"]),
                        ("prev_digest", seal["prev_digest"]), ("record_digest", seal["record_digest"])
                        ] + [(f"retrieval[{k}].chunk_digest", c["chunk_digest"])
                             for k, c in enumerate(body["retrieval"])]:
            if d is not None and len(d) != 32:
                self.error(f"{where}: {name} is {len(d)} bytes, not 32")

        if body["request_bytes"] is not None:
            if digest(CONTENT_KEY, body["request_bytes"]) != body["content_key"]:
                self.error(f"{where}: content_key does not match request_bytes")
            if body["request_length"] != len(body["request_bytes"]):
                self.error(f"{where}: request_length != len(request_bytes)")
        if body["response_bytes"] is not None:
            if digest(RESPONSE, body["response_bytes"]) != body["response_digest"]:
                self.error(f"{where}: response_digest does not match response_bytes")
            if body["response_length"] != len(body["response_bytes"]):
                self.error(f"{where}: response_length != len(response_bytes)")
        for name, prefix, data, d in [("input", INPUT, body["input_bytes"], body["input_digest"]),
                                      ("prompt", PROMPT, body["prompt_bytes"], body["prompt_digest"])]:
            if data is not None and digest(prefix, data) != d:
                self.error(f"{where}: {name}_digest does not match {name}_bytes")
        for k, c in enumerate(body["retrieval"]):
            if c["chunk_bytes"] is not None and digest(CHUNK, c["chunk_bytes"]) != c["chunk_digest"]:
                self.error(f"{where}: retrieval[{k}].chunk_digest does not match chunk_bytes")

        expect = record_digest(seal["prev_digest"], seq, seal["occurred_at"], body_avro)
        if seal["record_digest"] != expect:
            self.error(f"{where}: record_digest does not verify")

        head = self.heads.get(stream)
        if head is None:
            head = self.heads[stream] = [partition, 0, GENESIS]
        if head[0] != partition:
            self.error(f"{where}: stream is on partitions {head[0]} and {partition}")
        if seq != head[1] + 1:
            self.error(f"{where}: expected seq {head[1] + 1}")
        if seal["prev_digest"] != head[2]:
            self.error(f"{where}: prev_digest does not link to seq {head[1]}")
        head[1], head[2] = seq, seal["record_digest"]


def read_log(bootstrap: str, topic: str, timeout: float):
    """Yield (partition, offset, key, value) of every committed message, from offset 0."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{uuid.uuid4().hex}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        md = c.list_topics(topic, timeout=timeout).topics.get(topic)
        if md is None or md.error is not None:
            raise RuntimeError(f"topic {topic} not found: {md and md.error}")
        parts = []
        for p in sorted(md.partitions):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            if hi > lo:  # an empty partition reports no EOF to wait for
                parts.append(TopicPartition(topic, p, OFFSET_BEGINNING))
        if not parts:
            return
        c.assign(parts)
        pending = {tp.partition for tp in parts}
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {topic} timed out; partitions {sorted(pending)} not at end")
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(m.partition())
                    continue
                raise RuntimeError(str(m.error()))
            yield m.partition(), m.offset(), m.key(), m.value()
    finally:
        c.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic-prefix", default="evidence")
    ap.add_argument("--schema", required=True, help="path to schemas/avro/EvidenceRecord.avsc")
    ap.add_argument("--capture-schema", help="CaptureEvent.avsc: check it is the record's body schema")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--fingerprints", action="store_true",
                    help="print each schema's canonical form and fingerprint, then exit")
    args = ap.parse_args(argv)

    schema = load_schema(args.schema)
    capture = load_schema(args.capture_schema) if args.capture_schema else None
    if args.fingerprints:
        for path, s in [(args.schema, schema), (args.capture_schema, capture)]:
            if s is not None:
                print(json.dumps({"verifier": LANG, "library": LIBRARY, "schema": path,
                                  "fingerprint": fingerprint(s).hex(),
                                  "canonical_form": s.canonical_form}, ensure_ascii=False))
        return 0

    v = Verifier(schema)
    if capture is not None and capture.canonical_form != v.body_schema.canonical_form:
        v.error("the record's body schema is not CaptureEvent.avsc (canonical forms differ)")
    topic = f"{args.topic_prefix}.log"
    try:
        for partition, offset, key, value in read_log(args.bootstrap, topic, args.timeout):
            v.add(partition, offset, key, value)
    except RuntimeError as e:
        v.error(str(e))
    print(json.dumps({"verifier": LANG, "library": LIBRARY, "topic": topic,
                      "fingerprint": fingerprint(schema).hex(), "records": v.records,
                      "streams": len(v.heads), "error_count": v.error_count, "errors": v.errors},
                     ensure_ascii=False))
    return 1 if v.error_count else 0


if __name__ == "__main__":
    sys.exit(main())
