"""Produce CaptureEvents to <prefix>.intake with nothing but the schema file.

    python produce.py --bootstrap 127.0.0.1:9092 --topic-prefix evidence \
        --schema ../../schemas/avro/CaptureEvent.avsc --stream demo-python --count 10

Each event is built as a plain dict following CaptureEvent.avsc, encoded with the official
Apache Avro package in single-object encoding (C3 01, CRC-64-AVRO fingerprint, body) and
sent keyed by its stream id (UTF-8). Prints one JSON line: what was produced.
"""

from __future__ import annotations

import argparse
import json
import sys

from confluent_kafka import Producer

from common import (CHUNK, CONTENT_KEY, INPUT, LIBRARY, OUTPUT, PROMPT, RESPONSE, digest,
                    encode_single_object, fingerprint, load_schema, now_micros, uuid7)

SCHEMA_VERSION = "2.0"
LANG = "python-avro"


def sample_event(stream: str, i: int) -> dict:
    """The i-th example capture of ``stream``: every 4th FAILED, every 3rd HASH_ONLY."""
    failed = i % 4 == 3
    hash_only = i % 3 == 2
    seed = str(2**64 - 1 - i) if i % 2 == 0 else None  # seeds >= 2^63 travel as text
    temperature = 0.0 if seed is not None else 0.7
    user_input = f"question {i} from {LANG}: café ☕".encode()
    chunks = [f"chunk {i}.{k} of the example corpus".encode() for k in range(1 + i % 2)]
    prompt = b"System: be brief.\n\nContext: " + b" ".join(chunks) + b"\n\nUser: " + user_input
    params = {"model": "example-model", "temperature": temperature}
    if seed is not None:
        params["seed"] = int(seed)
    request = json.dumps({**params, "messages": [{"role": "user", "content": prompt.decode()}]},
                         ensure_ascii=False, separators=(",", ":")).encode()
    output = f"answer {i} to {stream}"
    response = json.dumps({"id": f"resp-{i}", "model": "example-model-2025",
                           "choices": [{"message": {"role": "assistant", "content": output}}]},
                          separators=(",", ":")).encode()
    finished = now_micros()
    keep = not hash_only
    return {
        "schema_version": SCHEMA_VERSION,
        "event_id": uuid7(),
        "stream": stream,
        "captured_at": finished,
        "content_key": digest(CONTENT_KEY, request),
        "request_bytes": request if keep else None,
        "request_length": len(request),
        "input_digest": digest(INPUT, user_input),
        "input_bytes": user_input if keep else None,
        "prompt_digest": digest(PROMPT, prompt),
        "prompt_bytes": prompt if keep else None,
        "retrieval": [{"doc_id": f"doc-{k}", "doc_version": "v1" if k == 0 else None,
                       "chunk_digest": digest(CHUNK, c), "chunk_bytes": c if keep else None}
                      for k, c in enumerate(chunks)],
        "provider": {"name": "example", "endpoint": "https://llm.example.invalid/v1/chat/completions",
                     "api_version": "2025-01-01"},
        "model_id": "example-model",
        "params": json.dumps(params, separators=(",", ":")),
        "fingerprint": None if failed else "fp_example",
        "response_model": None if failed else "example-model-2025",
        "http_status": None if failed else 200,
        "response_content_type": None if failed else "application/json",
        "response_bytes": None if failed else response,
        "response_length": None if failed else len(response),
        "response_digest": None if failed else digest(RESPONSE, response),
        "output_digest": None if failed else digest(OUTPUT, output.encode("utf-8")),
        "error_bytes": b"example: connection reset before a response arrived" if failed else None,
        "outcome": "FAILED" if failed else "COMMITTED",
        "replay": {"seed": seed, "temperature": temperature, "top_p": None,
                   "deterministic": seed is not None},
        "capture": {"library": f"evidence-store-example-{LANG}/1 ({LIBRARY})", "host": None,
                    "request_policy": "HASH_ONLY" if hash_only else "VALUE", "streamed": False,
                    "closed_early": False, "truncated": False, "started_at": finished - 1500,
                    "duration_us": 1500},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic-prefix", default="evidence")
    ap.add_argument("--schema", required=True, help="path to schemas/avro/CaptureEvent.avsc")
    ap.add_argument("--stream", action="append", required=True, help="stream id (repeatable)")
    ap.add_argument("--count", type=int, default=10, help="events per stream")
    args = ap.parse_args(argv)

    schema = load_schema(args.schema)
    topic = f"{args.topic_prefix}.intake"
    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        "enable.idempotence": True,  # acks=all, no duplicates or reordering on retry
        # A stream must stay on one partition whoever produces it: hash keys the way the
        # Java client does (murmur2), not librdkafka's default CRC32.
        "partitioner": "murmur2_random",
        # One MiB above the topics' 64 MiB max.message.bytes: the broker decides what is too large.
        "message.max.bytes": 65 * 1024 * 1024,
        "linger.ms": 5,
    })
    failures: list[str] = []
    ids: list[str] = []
    for i in range(args.count):
        for stream in args.stream:
            event = sample_event(stream, i)
            value = encode_single_object(schema, event)
            while True:
                try:
                    producer.produce(topic, value, stream.encode("utf-8"),
                                     on_delivery=lambda err, _m: err and failures.append(str(err)))
                    break
                except BufferError:  # local queue full: let deliveries drain
                    producer.poll(0.1)
            ids.append(event["event_id"])
            producer.poll(0)
    left = producer.flush(60)
    if left:
        failures.append(f"{left} messages not delivered in 60 s")
    print(json.dumps({"producer": LANG, "library": LIBRARY, "topic": topic, "produced": len(ids),
                      "fingerprint": fingerprint(schema).hex(), "event_ids": ids,
                      "errors": failures}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
