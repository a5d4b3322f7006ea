"""``evidence prove S --seq N`` on records whose bytes the API does not serve as recorded,
against real Kafka and PostgreSQL (the real writer signs the checkpoints, the real projector
folds the records, their trees and the erasure receipts):

- a *redacted* record (plain, in a stream the projection's redaction policy covers): its log
  message is withheld, so the leaf is recomputed from the served ``record_digest`` and
  ``record_sha256``, checked against ``record_leaf_hash``, and folded to the signed root; the
  output says the leaf came from the served hashes. A streamed response of such a stream is
  served as the mask, whole, never as deltas that give the content back once joined;
- an *erased* record (its subject's key destroyed by ``evidence erase``): one record with
  ``include=bytes`` is served as a page serves it (bodies null, the ciphertext message
  given), by seq and by event id alike, and its proof verifies from those bytes.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from evidence_contract.merkle import record_leaf_hash
from tests.fixtures.erased import FAST, wait_checkpoint
from tests.fixtures.writer import make_capture, produce_captures, read_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
EMAIL = "ada.lovelace@example.com"


def _evidence(p, *args: str):
    return subprocess.run([sys.executable, "-m", "cli.main", *args], env=p.env(),
                          capture_output=True, timeout=120, cwd=ROOT)


def _sse(*pieces: str) -> bytes:
    events = [json.dumps({"object": "chat.completion.chunk",
                          "choices": [{"index": 0, "delta": {"content": piece}}]})
              for piece in pieces]
    return b"".join(b"data: " + e.encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def test_prove_folds_the_served_leaf_of_a_redacted_record(tmp_path, make_pipeline,
                                                          kafka_bootstrap):
    policy = tmp_path / "redaction.json"
    policy.write_text(json.dumps({"streams": ["redact-*"], "mask": "[REDACTED]",
                                  "patterns": [r"[a-z.]+@example\.com"]}))
    p = make_pipeline(partitions=1, env=FAST,
                      projection_options={"redaction_file": str(policy)})
    stream = f"redact-{uuid.uuid4().hex[:8]}:chat"
    request = json.dumps({"model": "m", "messages": [{"role": "user",
                                                      "content": f"mail {EMAIL}"}]}).encode()
    streamed = _sse("Write to ada.lo", "velace@exam", "ple.com today")
    produce_captures(kafka_bootstrap, p.topics, [
        make_capture(stream, request=request),
        make_capture(stream, response=streamed, response_content_type="text/event-stream",
                     capture={"library": "tests/0", "host": None, "request_policy": "VALUE",
                              "streamed": True, "closed_early": False, "truncated": False,
                              "started_at": 1, "duration_us": 1}),
    ])
    p.wait_records(stream, 2, timeout=60)
    wait_checkpoint(p, stream, 2)
    log = {v.value() for v in read_all(p.projection.bootstrap, p.topics.names.log)}

    for seq in (1, 2):
        record = p.api.get(f"/streams/{stream}/records/{seq}",
                           params={"include": "bytes"}).json()
        assert record["record_b64"] is None and record["record_leaf_hash"]
        assert EMAIL not in json.dumps(record)
        [message] = [m for m in log if record_leaf_hash(m).hex() == record["record_leaf_hash"]]
        out = _evidence(p, "prove", stream, "--seq", str(seq))
        assert out.returncode == 0, (out.stdout.decode(), out.stderr.decode())
        proven = json.loads(out.stdout)
        assert proven["verified"] is True and proven["leaf_from"] == "served_hashes", proven
        assert proven["leaf_hash"] == record_leaf_hash(message).hex()
        assert proven["record_digest"] == record["record_digest"]
        assert b"redacted" in out.stderr and b"served record_digest" in out.stderr

    # The streamed response: the mask, whole; the log keeps the deltas.
    served = base64.b64decode(p.api.get(f"/streams/{stream}/records/2",
                                        params={"include": "bytes"}).json()["response_b64"])
    assert served == b"[REDACTED]"
    assert any(b"velace@exam" in m for m in log)
    audit = p.api.get(f"/streams/{stream}/audit").json()
    assert audit["clean"] is True, audit


def test_an_erased_record_is_served_as_in_a_page_and_its_proof_verifies(make_erased_stream):
    erased = make_erased_stream("erase", request_id="dsr-prove")
    p, stream, seq, ada = erased.pipeline, erased.stream, erased.seq, erased.record

    page = {r["seq"]: r for r in p.api.get(f"/streams/{stream}/records",
                                           params={"include": "bytes"}).json()["records"]}
    for r in (p.api.get(f"/streams/{stream}/records/{seq}", params={"include": "bytes"}),
              p.api.get(f"/events/{ada['event_id']}", params={"include": "bytes"})):
        assert r.status_code == 200, r.text
        one = r.json()
        assert one["content"] == "erased" and one["erasure"]["request_id"] == "dsr-prove"
        assert all(one[k] is None for k in ("request_b64", "response_b64", "error_b64",
                                            "input_b64", "prompt_b64"))
        assert one["record_b64"] == page[seq]["record_b64"] is not None
        assert b"secret" not in base64.b64decode(one["record_b64"])  # ciphertext only
    # Replay and verify still refuse: nothing of the content can be served or compared.
    assert p.api.get(f"/replay/{ada['content_key']}").status_code == 410

    out = _evidence(p, "prove", stream, "--seq", str(seq))
    assert out.returncode == 0, (out.stdout.decode(), out.stderr.decode())
    proven = json.loads(out.stdout)
    assert proven["verified"] is True and proven["leaf_from"] == "record_bytes", proven
    assert proven["content"] == "erased"
    assert proven["leaf_hash"] == record_leaf_hash(
        base64.b64decode(page[seq]["record_b64"])).hex()
