"""Erasure from the reader's side, end to end against real Kafka and PostgreSQL: encrypted
calls of two subjects recorded through the real Recorder, sealed by the real writer (with the
log key) and projected; both replay with ``Replayer(key_store=...)``; one subject is erased with
``evidence erase --wait``. Then its replay raises ReplayErased, the API's replay answers 410
erased and its record's bytes are only the ciphertext message, ``evidence audit`` exits 0 and
counts the erased records, an export of
an erased record verifies (digests, chain, inclusion proof, checkpoint and the signed receipt)
with ``evidence verify`` and with VERIFY.md's commands under sh, and the other subject still
replays."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from evidence_client import ReplayErased, Replayer, call_context
from evidence_contract.erasure import open_receipt
from evidence_contract.note import format_vkey
from tests.fixtures.audit import evidence
from tests.fixtures.erased import wait_checkpoint
from tests.fixtures.keystore import file_key_store
from tests.fixtures.writer import log_signing_key

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
STREAM = "bank:replay"
SUBJECTS = ("user-ada", "user-bob")
SECRET = {s: f"{s} asks about account {4000 + i}" for i, s in enumerate(SUBJECTS)}


def ask(client, subject: str):
    with call_context(subject=subject, input=SECRET[subject]):
        return client.chat.completions.with_raw_response.create(
            model="gpt-4o", seed=3, messages=[{"role": "user", "content": SECRET[subject]}])


@pytest.fixture
def recorded(tmp_path, make_pipeline, make_recorder, fake_provider):
    store, store_env = file_key_store(tmp_path)
    p = make_pipeline(partitions=1)
    recorder = make_recorder(p.topics, stream=STREAM, content_policy="encrypt", key_store=store)
    client = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="k", max_retries=0,
                           http_client=recorder.http_client())
    sent = {s: ask(client, s).http_response.content for s in SUBJECTS}
    recorder.close()
    p.wait_records(STREAM, 2, timeout=60)
    # A verified replay needs a checkpoint that covers the record: the projection has the
    # records a moment before the writer's next checkpoint reaches it (a fresh-clone run of the
    # suite replayed in between and was refused: "the bundle lacks its stream or checkpoint").
    wait_checkpoint(p, STREAM, 2)
    return p, store, store_env, fake_provider, sent


def replay(p, store, fake, subject: str) -> bytes:
    replayer = Replayer(p.api_url, p.api_key, key_store=store, key_cache_s=0,
                        log_key=p.log_key)
    client = openai.OpenAI(base_url=fake.url + "/v1", api_key="unused", max_retries=0,
                           http_client=replayer.http_client())
    with replayer, client:
        return ask(client, subject).http_response.content


def run_verify_md(out_dir: Path) -> list[str]:
    """Run every numbered check of VERIFY.md with sh; each must print its expected line."""
    md = (out_dir / "VERIFY.md").read_text()
    found = re.findall(r"## \d+\. (.+?)\n\n```sh\n(.*?)\n```\n\nexpected: `([^`]+)`", md, re.S)
    assert found, md
    for title, command, expected in found:
        p = subprocess.run(["sh", "-c", command], cwd=out_dir, capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 0, (title, command, p.stderr)
        assert p.stdout.strip() == expected, (title, command, p.stdout)
    return [t for t, _c, _e in found]


def caused_by(e: BaseException, kind: type) -> BaseException | None:
    while e is not None and not isinstance(e, kind):
        e = e.__cause__ or e.__context__
    return e


def test_an_erased_subject_answers_erased_everywhere_and_its_evidence_still_verifies(
        recorded, tmp_path):
    p, store, store_env, fake, sent = recorded
    env = {**p.env(), **store_env, "EVIDENCE_PG_VIEWS_SCHEMA": p.projection.views_schema}
    # Before: both subjects replay their recorded bytes.
    for s in SUBJECTS:
        assert replay(p, store, fake, s) == sent[s]
    ada_key = store.data_key("user-ada")
    ada = next(r for r in p.api.get(f"/streams/{STREAM}/records").json()["records"]
               if r.get("key_id") == ada_key.key_id)
    seq = ada["seq"]

    out = subprocess.run([sys.executable, "-m", "cli.main", "erase", "--subject", "user-ada",
                          "--request-id", "dsr-e2e", "--wait", "45"], env=env,
                         capture_output=True, timeout=90, cwd=ROOT)
    assert out.returncode == 0, out.stderr.decode()
    request_id, note = out.stdout.split(b"\n", 1)  # the request id, then the receipt
    receipt = open_receipt(note, log_signing_key()[0].verifier)
    assert request_id == b"dsr-e2e" and receipt.key_ids == (ada_key.key_id,)

    # Replay of the erased subject: ReplayErased, never a miss or a provider call.
    seen = len(fake.seen)
    with pytest.raises(Exception) as err:
        replay(p, store, fake, "user-ada")
    erased = caused_by(err.value, ReplayErased)
    assert erased is not None, repr(err.value)
    assert erased.request_id == "dsr-e2e"
    assert len(fake.seen) == seen

    # The API: replay by content key and the record's bytes are 410 erased.
    r = p.api.get(f"/replay/{ada['content_key']}")
    assert r.status_code == 410 and r.json()["error"] == "erased", r.text
    assert r.json()["request_id"] == "dsr-e2e"
    # One record's bytes are served as a page serves them: no bodies, the ciphertext message.
    r = p.api.get(f"/streams/{STREAM}/records/{seq}", params={"include": "bytes"})
    assert r.status_code == 200 and r.json()["content"] == "erased", r.text
    assert r.json()["response_b64"] is None and r.json()["record_b64"]
    r = p.api.get(f"/streams/{STREAM}/records/{seq}")
    assert r.status_code == 200 and r.json()["content"] == "erased"

    # The audit: clean, and the erased record counted.
    audit = evidence("audit", "--json", env=env)
    assert audit.returncode == 0, (audit.stdout.decode(), audit.stderr.decode())
    assert b"erased_records" in audit.stdout
    report = json.loads(audit.stdout)
    streams = report["streams"] if isinstance(report.get("streams"), list) else [
        dict(stream=k, **v) for k, v in report.get("streams", {}).items()]
    [mine] = [s for s in streams if s.get("stream") == STREAM]
    assert mine["erased_records"] == 1 and mine["encrypted_records"] == 2, mine

    # Export of the erased record: no content, verifies offline and under sh.
    exp = tmp_path / "erased"
    x = evidence("export", "--stream", STREAM, "--seq", str(seq), "--out", str(exp), env=env)
    assert x.returncode == 0, (x.stdout.decode(), x.stderr.decode())
    names = {f.name for f in exp.iterdir()}
    assert not {"request.bin", "response.bin", "output.txt"} & names, names
    for f in exp.iterdir():
        assert SECRET["user-ada"].encode() not in f.read_bytes(), f.name
    verify_md = (exp / "VERIFY.md").read_text()
    assert "erased" in verify_md and "dsr-e2e" in verify_md
    vkey = tmp_path / "log.vkey"
    vkey.write_text(format_vkey(log_signing_key()[0].verifier) + "\n")
    v = evidence("verify", "--json", "--log-key", str(vkey), str(exp), env=env)
    assert v.returncode == 0, (v.stdout.decode(), v.stderr.decode())
    result = json.loads(v.stdout)
    assert result["verified"] is True and result["content"] == "erased", result
    assert result["erasure_request_id"] == "dsr-e2e"
    assert all(c["ok"] for c in result["checks"]), result["checks"]
    checks = " | ".join(c["check"] for c in result["checks"])
    for part in ("digest", "checkpoint.note", "inclusion.json", "erasure.note"):
        assert part in checks, (part, checks)
    titles = " | ".join(run_verify_md(exp))
    for part in ("record_digest", "inclusion", "checkpoint.note", "erasure.note"):
        assert part in titles, (part, titles)

    # The other subject still replays.
    assert replay(p, store, fake, "user-bob") == sent["user-bob"]
