"""BIJOTEL 2.17.0's own span processor and an OTLP exporter feeding ``evidence otlp``, end to
end against real Kafka and PostgreSQL: every span BIJOTEL sealed into its HMAC chain is a
record here, and ``POST /replay/verify`` on BIJOTEL's basis gives, for a matching and a
non-matching replayed output, with and without content on the span, the answers BIJOTEL's own
``verify_replay`` gives for its chain entry.

The application (tests/integration/bijotel_app.py) runs as a process of its own: BIJOTEL's
``trace_genai`` reads the global tracer provider, which must never be set in the test runner.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid

import pytest
from bijotel.processors import verify_chain
from bijotel.replay import verify_replay

from tests.integration.bijotel_app import SECRET
from tests.integration.test_otlp_receiver import ReceiverProcess

pytestmark = pytest.mark.integration

CALLS = [
    {"prompt": [{"role": "user", "content": "Say hello"}], "output": "Hello there. ¿Qué tal?",
     "seed": 7, "content": True, "claims": True},
    {"prompt": [{"role": "user", "content": "Say hi"}], "output": "Hi!", "seed": None,
     "content": False, "claims": True},
    {"prompt": [{"role": "user", "content": "Say bye"}], "output": "Bye.", "seed": 3,
     "content": True, "claims": False},
]


def test_bijotels_own_processor_and_exporter_feed_the_receiver(make_pipeline, kafka_bootstrap,
                                                               tmp_path):
    p = make_pipeline()
    stream = f"bijotel-{uuid.uuid4().hex[:8]}:app"
    receiver = ReceiverProcess(kafka_bootstrap, p.topics.names.prefix,
                               {"EVIDENCE_OTLP_STREAM": stream})
    try:
        chain_db = tmp_path / "chain.db"
        app = subprocess.run(
            [sys.executable, "-m", "tests.integration.bijotel_app",
             receiver.url + "/v1/traces", str(chain_db), json.dumps(CALLS)],
            env={k: v for k, v in os.environ.items() if not k.startswith(("EVIDENCE_", "OTEL_"))},
            capture_output=True, text=True, timeout=120)
        assert app.returncode == 0, app.stdout + app.stderr + receiver.output()[-4000:]
        recorded = [json.loads(line) for line in app.stdout.splitlines()]
        assert len(recorded) == len(CALLS)

        # BIJOTEL sealed every GenAI span (its decorator's and the Anthropic SDK's own) into
        # its chain, and the chain holds.
        with sqlite3.connect(chain_db) as conn:
            chain = {span_id: json.loads(body) for span_id, body in conn.execute(
                "select span_id, canonical_body from chain order by seq")}
        assert verify_chain(chain_db, SECRET) == (True, len(chain), None)  # last seq checked
        assert {r["span_id"] for r in recorded} < set(chain)

        # Each of them is a record here, mapped from the span the exporter sent.
        records = p.wait_records(stream, len(chain), timeout=60)
        by_span = {r["trace"]["span_id"]: r for r in records}
        assert set(by_span) == set(chain)
        assert all(r["capture_method"] == "mapped from telemetry" for r in records)
    finally:
        assert receiver.stop() in (0, -15), receiver.output()[-4000:]
        os.unlink(receiver.log.name)

    outputs = {r["span_id"]: r["output"] for r in recorded}
    compared = 0
    for span_id, entry in chain.items():
        record = by_span[span_id]
        claims = {c["name"]: c["verdict"] for c in record["telemetry"]["claims"]}
        output = outputs.get(span_id, "Hello there. ¿Qué tal?")
        for replayed in (output, output + " (replayed differently)"):
            theirs = verify_replay(entry, replayed).to_dict()
            r = p.api.post("/replay/verify", json={
                "event_id": record["event_id"], "replayed_output": replayed,
                "basis": "bijotel"})
            if theirs["original_hash"] is None:
                # BIJOTEL cannot verify an entry without its output hash; neither basis applies
                assert r.status_code == 422, r.text
                assert "bijotel.replay.output_hash" in r.json()["message"]
                continue
            assert r.status_code == 200, r.text
            ours = r.json()
            assert {k: v for k, v in ours["bijotel"].items()
                    if k not in ("claim", "claim_verdict")} == theirs
            assert [ours[k] for k in ("match", "original_hash", "replay_hash", "reason")] == \
                [theirs[k] for k in ("match", "original_hash", "replay_hash", "reason")]
            assert ours["match"] is (replayed == output)
            # the claim's verdict when mapped: checked only where the span carried the output
            with_content = next(c["content"] for c in CALLS if c["output"] == output)
            assert ours["bijotel"]["claim_verdict"] == claims["bijotel.replay.output_hash"] \
                == ("VERIFIED" if with_content else "UNVERIFIABLE")
            compared += 1
    # a matching and a non-matching replay of each call that made claims, with and without
    # content; the rest (no claims, the SDK's own spans) a 422 where BIJOTEL cannot verify
    assert compared == 2 * sum(c["claims"] for c in CALLS)
