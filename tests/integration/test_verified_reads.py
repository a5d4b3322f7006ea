"""Trust by default: every read verified, against real Kafka and PostgreSQL.

Calls are recorded through the fake provider, sealed and projected; then the projection is
altered in SQL, as anyone with database access could:

- a plain alteration (one byte appended to a response): the API notices, serves the log's
  bytes, reports a finding; the verifying Replayer gets the recorded bytes;
- a forgery the API cannot notice (the record bytes, their digests and the tree's leaf all
  rewritten to agree): the Replayer and ``evidence replay`` refuse it with the tamper error,
  and never hand out the bytes;
- a rollback of the checkpoints between two reads, and a checkpoint without the witness
  cosignature a reader requires: both refused.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import openai
import psycopg
import pytest

from evidence_client import (
    CheckpointRolledBack,
    EvidenceTampered,
    EvidenceUnwitnessed,
    Replayer,
)
from evidence_contract import body_bytes, encode, split_record
from evidence_contract.digests import record_digest, response_digest
from evidence_contract.merkle import record_leaf_hash
from evidence_contract.note import SIG_COSIGNATURE_V1, generate_signer
from tests.fixtures.log import wait_until

pytestmark = pytest.mark.integration

EVIDENCE = str(Path(sys.executable).parent / "evidence")


def chat(client, n: int):
    return client.chat.completions.with_raw_response.create(
        model="gpt-4o", seed=n, messages=[{"role": "user", "content": f"question {n}"}])


def covered(p, stream: str, size: int) -> None:
    """Wait until a signed checkpoint of ``stream`` covers ``size`` records."""
    def ok() -> bool:
        r = p.api.get(f"/streams/{stream}/checkpoint")
        return r.status_code == 200 and int(r.text.split("\n")[1]) >= size

    wait_until(f"a checkpoint of {stream} covering {size}", ok, 60, 0.2)


def sql(database_url: str, statement: str, *args) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(statement, args)


@pytest.fixture
def recorded(make_pipeline, make_recorder, fake_provider, request):
    """Two calls on a stream of this test, sealed, projected and checkpointed: the first
    checkpointed before the second is made, so the log signs a checkpoint of each size."""
    stream = f"trust:{request.node.name[-40:].replace('_', '-')}"
    p = make_pipeline(env={"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.5"})
    recorder = make_recorder(p.topics, stream=stream)
    client = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="k", max_retries=0,
                           http_client=recorder.http_client())
    sent = [chat(client, 1).http_response.content]
    p.wait_records(stream, 1)
    covered(p, stream, 1)
    sent.append(chat(client, 2).http_response.content)
    recorder.close()
    records = p.wait_records(stream, 2)
    covered(p, stream, 2)
    return p, stream, fake_provider, sent, records


def replay_with(replayer: Replayer, fake, n: int) -> bytes:
    client = openai.OpenAI(base_url=fake.url + "/v1", api_key="unused", max_retries=0,
                           http_client=replayer.http_client())
    with client:
        return chat(client, n).http_response.content


def forge(p, stream: str, seq: int, new_response: bytes) -> None:
    """Rewrite record ``seq`` in the projection so that the row, its record bytes, their
    digests and the tree's leaf all agree: only the signed tree above the leaf can tell."""
    views = p.projection.views_schema
    with psycopg.connect(p.projection.database_url, autocommit=True) as conn:
        raw = conn.execute(f'select record_bytes from "{views}".records where stream = %s '
                           f'and seq = %s', (stream, seq)).fetchone()[0]
        _, record = split_record(bytes(raw))
        body, seal = record["body"], record["seal"]
        body["response_bytes"] = new_response
        body["response_digest"] = response_digest(new_response)
        body["response_length"] = len(new_response)
        seal["record_digest"] = record_digest(seal["prev_digest"], seal["seq"],
                                              seal["occurred_at"], body_bytes(body))
        forged = encode("EvidenceRecord", record)
        conn.execute(f'update "{views}".records set record_bytes = %s, response_bytes = %s, '
                     f'response_digest = %s, record_digest = %s where stream = %s and seq = %s',
                     (forged, new_response, body["response_digest"], seal["record_digest"],
                      stream, seq))
        conn.execute(f'update "{views}".tree_nodes set hash = %s where stream = %s and '
                     f'level = 0 and idx = %s', (record_leaf_hash(forged), stream, seq - 1))


def test_an_altered_row_is_served_from_the_log_and_reported(recorded):
    p, stream, fake, sent, records = recorded
    views = p.projection.views_schema
    sql(p.projection.database_url, f'update "{views}".records set response_bytes = '
        f"response_bytes || 'x'::bytea where stream = %s and seq = 1", stream)

    r = p.api.get(f"/replay/{records[0]['content_key']}")
    assert r.status_code == 200, r.text
    assert r.content == sent[0]
    assert r.headers["evidence-source"] == "log"
    assert r.headers["evidence-finding"] == "projection_altered"
    detail = p.api.get(f"/streams/{stream}").json()
    kinds = [(f["seq"], f["kind"]) for f in detail["findings"]]
    assert (1, "projection_altered") in kinds, detail
    assert "evidence_api_projection_altered_total 1.0" in p.api.get("/metrics").text

    with Replayer(p.api_url, p.api_key, log_key=p.log_key) as replayer:
        assert replay_with(replayer, fake, 1) == sent[0]
    answer = json.loads(sent[0])["choices"][0]["message"]["content"]
    out = subprocess.run([EVIDENCE, "replay", "--stream", stream, "--seq", "1", "--output",
                          answer, "--json"], capture_output=True, text=True, env=p.env(),
                         timeout=60)
    assert out.returncode == 0, (out.stdout, out.stderr)
    verdict = json.loads(out.stdout)
    assert verdict["match"] is True and verdict["verified"]["tree_size"] >= 2
    assert verdict["verified"]["digests"] == "recomputed from the verified record"
    # The bundle route serves the log's record too, and says so.
    b = p.api.get(f"/streams/{stream}/records/1/bundle").json()
    assert b["source"] == "log" and b["inclusion"]["tree_size"] >= 2


def test_a_forgery_the_api_cannot_see_is_refused_by_every_verifying_reader(recorded):
    p, stream, fake, sent, records = recorded
    forged = sent[0].replace(b"42", b"41") + b" "
    forge(p, stream, 1, forged)

    # The API's own check passes (the row agrees with its forged record and leaf) ...
    r = p.api.get(f"/replay/{records[0]['content_key']}")
    assert r.status_code == 200 and r.content == forged
    # ... and the unverified path would hand the forgery out; the verified one refuses it.
    with Replayer(p.api_url, p.api_key, verify=False) as unverified:
        assert replay_with(unverified, fake, 1) == forged
    with Replayer(p.api_url, p.api_key, log_key=p.log_key) as replayer:
        with pytest.raises(EvidenceTampered, match="not in the signed tree"):
            replay_with(replayer, fake, 1)
        # The forged leaf is on record 2's path too: its proof no longer folds either.
        with pytest.raises(EvidenceTampered):
            replay_with(replayer, fake, 2)

    answer = json.loads(forged)["choices"][0]["message"]["content"]
    out = subprocess.run([EVIDENCE, "replay", "--stream", stream, "--seq", "1", "--output",
                          answer], capture_output=True, text=True, env=p.env(), timeout=60)
    assert out.returncode == 4, (out.stdout, out.stderr)
    assert "fails its check" in out.stderr and "MATCH" not in out.stdout
    unverified = subprocess.run([EVIDENCE, "replay", "--stream", stream, "--seq", "1",
                                 "--output", answer, "--no-verify"], capture_output=True,
                                text=True, env=p.env(), timeout=60)
    assert unverified.returncode == 0, unverified.stderr  # the API's word alone is fooled


def test_a_rollback_between_two_reads_is_caught(recorded):
    p, stream, fake, sent, records = recorded
    views = p.projection.views_schema
    with Replayer(p.api_url, p.api_key, log_key=p.log_key, stream=stream) as replayer:
        assert replay_with(replayer, fake, 1) == sent[0]
        seen = max(cp.size for cp in replayer.verifier.snapshot().values())
        assert seen >= 2
        # The projection goes back: only the checkpoints below what the reader saw remain.
        with psycopg.connect(p.projection.database_url, autocommit=True) as conn:
            conn.execute(f'delete from "{views}".checkpoints where stream = %s and '
                         f'tree_size >= %s', (stream, seen))
            older = conn.execute(f'select count(*) from "{views}".checkpoints where '
                                 f'stream = %s', (stream,)).fetchone()[0]
        assert older >= 1  # the fixture's first checkpoint, of size 1
        with pytest.raises(CheckpointRolledBack, match="went back"):
            replay_with(replayer, fake, 1)


def test_a_reader_that_requires_a_witness_refuses_an_uncosigned_checkpoint(recorded):
    p, stream, fake, sent, _records = recorded
    witness = generate_signer("witness.example/w1", SIG_COSIGNATURE_V1).verifier
    with Replayer(p.api_url, p.api_key, log_key=p.log_key, witnesses=[witness],
                  min_witnesses=1) as replayer:
        with pytest.raises(EvidenceUnwitnessed, match="0 valid cosignature"):
            replay_with(replayer, fake, 1)
    with Replayer(p.api_url, p.api_key, log_key=p.log_key, witnesses=[witness],
                  min_witnesses=0) as replayer:
        assert replay_with(replayer, fake, 1) == sent[0]


def test_a_reader_needs_a_pinned_key_or_says_it_trusts_on_first_use(recorded, tmp_path):
    p, stream, fake, sent, _records = recorded
    from evidence_client import ConfigError

    with pytest.raises(ConfigError, match="log's verifier key"):
        Replayer(p.api_url, p.api_key)
    state = tmp_path / "state.json"
    with Replayer(p.api_url, p.api_key, trust_on_first_use=True, state_file=state) as r:
        assert replay_with(r, fake, 2) == sent[1]
    doc = json.loads(state.read_text())
    assert doc["pinned"].startswith(p.log_key.name + "+")
    # A later reader with the same state file checks against the pinned key and the
    # checkpoint it remembers.
    with Replayer(p.api_url, p.api_key, trust_on_first_use=True, state_file=state) as r:
        assert r.verifier.log_key == p.log_key
        assert r.verifier.snapshot()
        assert replay_with(r, fake, 1) == sent[0]
    assert base64.b64decode(next(iter(next(iter(doc["logs"].values())).values()))["root"])


def test_a_redacted_record_is_never_replayed_as_the_recording(
        tmp_path, make_pipeline, make_recorder, fake_provider):
    from evidence_client import ReplayRedacted

    policy = tmp_path / "redaction.json"
    policy.write_text(json.dumps({"streams": ["trust:*"], "patterns": ["chatcmpl"],
                                  "mask": "[REDACTED]"}))
    p = make_pipeline(projection_options={"redaction_file": str(policy)},
                      env={"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.5"})
    stream = "trust:redacted"
    recorder = make_recorder(p.topics, stream=stream)
    client = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="k", max_retries=0,
                           http_client=recorder.http_client())
    chat(client, 1)
    recorder.close()
    [record] = p.wait_records(stream, 1)
    covered(p, stream, 1)

    # The plain route serves masked bytes and says so; the bundle withholds the message.
    r = p.api.get(f"/replay/{record['content_key']}")
    assert r.status_code == 200 and r.headers["evidence-redacted"] == "true"
    assert b"[REDACTED]" in r.content
    b = p.api.get(f"/replay/{record['content_key']}/bundle").json()
    assert b["content"] == "redacted" and b["record_b64"] is None
    # The verifying Replayer proves the record's place through its leaf, and then says it is
    # redacted rather than handing the masked bytes to the SDK as the recorded answer.
    with Replayer(p.api_url, p.api_key, log_key=p.log_key) as replayer:
        with pytest.raises(ReplayRedacted, match="redacts") as err:
            replay_with(replayer, fake_provider, 1)
        assert (err.value.stream, err.value.seq) == (stream, 1)
