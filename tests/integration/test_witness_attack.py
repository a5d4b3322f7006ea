"""Two witnesses against the real pipeline, and the rewrite-from-seq-1 attack (issue 12).

A local witness (in this process, its own state directory) and a "remote" one (`evidence
witness run` in another process, another state directory) follow a stream; both cosign, and
the log serves the checkpoint with both cosignatures. `evidence audit` with the witnesses is
clean, and an export of a record verifies offline with `evidence verify`.

THE ATTACK. Whoever controls Kafka (and, worse, the log key) rewrites the stream from seq 1:
every record sealed anew by a real writer on a fresh log, every chain link and every
checkpoint recomputed and signed, `evidence.checkpoints` replaced along with it. The plain
audit calls the rewritten log clean, as the issue says it would. It is caught by

- `evidence audit --checkpoint FILE`, an auditor holding only an earlier witnessed
  checkpoint: `rewritten_since_witnessed`;
- both witnesses, shown the rewritten log: they refuse its checkpoint (no consistency proof
  from what they cosigned exists), loudly and on record, and keep their state;
- `evidence audit --witness URL ...`, which then reports `witness_refused` as well;
- an outside verifier in Go (tests/verifiers/go-tlog, `tlogverify extends`: x/mod note,
  transparency-dev formats and merkle) holding only the witnessed checkpoint: the rewritten
  log's consistency proof does not lead from it to the rewritten tree (and it accepts the
  honest log's extension before the attack).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import uuid

import httpx
import pytest

from evidence_contract.note import SIG_COSIGNATURE_V1, SignerKey, format_vkey, open_note
from evidence_contract.tlog import checkpoint_origin
from tests.fixtures.log import wait_until
from tests.fixtures.writer import log_signing_key, make_capture, produce_captures
from tests.integration.test_tlog_go_verifier import tlogverify  # noqa: F401 - fixture
from witness import Witness, WitnessConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

FAST = {"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.3"}
LOCAL = SignerKey("witness.test/local", SIG_COSIGNATURE_V1, hashlib.sha256(b"wa local").digest())
STREAM = "wa:chat"


def _go_extends(binary, tmp_path, pipeline, witnessed: bytes, latest: bytes, first: int,
                second: int) -> tuple[int, str]:
    """Run the Go verifier's ``extends`` check: ``witnessed`` (cosigned by LOCAL) against the
    log's ``latest`` checkpoint and the consistency proof the log serves between them."""
    import base64

    r = httpx.get(f"{pipeline.api_url}/streams/{STREAM}/proof/consistency",
                  params={"first": first, "second": second},
                  headers={"Authorization": f"Bearer {pipeline.api_key}"}, timeout=10)
    assert r.status_code == 200, r.text
    doc = {"origin": checkpoint_origin(log_signing_key()[0].name, STREAM),
           "log_vkey": format_vkey(log_signing_key()[0].verifier),
           "cosigner_vkey": format_vkey(LOCAL.verifier),
           "witnessed": witnessed.decode(), "latest": latest.decode(),
           "proof": [base64.b64encode(bytes.fromhex(h)).decode() for h in r.json()["hashes"]]}
    path = tmp_path / f"extends-{first}-{second}.json"
    path.write_text(json.dumps(doc))
    proc = subprocess.run([str(binary), "extends", str(path)], capture_output=True, text=True,
                          timeout=60)
    return proc.returncode, proc.stdout.strip() + proc.stderr.strip()


def _cli(*args, env, timeout=120):
    return subprocess.run([sys.executable, "-m", "cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def _served(p):
    r = p.api.get(f"/streams/{STREAM}/checkpoint")
    return r.content if r.status_code == 200 else None


def _cosigned_by(note, keys):
    log_key = log_signing_key()[0].verifier
    try:
        return len(open_note(note, [log_key, *keys]).verified) - 1
    except Exception:  # noqa: BLE001 - not yet a note with those signatures
        return 0


class RemoteWitness:
    """`evidence witness run` in a process of its own."""

    def __init__(self, key_file, state, log_key_file, pipeline):
        self.args = ["witness", "run", "--key", str(key_file), "--state", str(state),
                     "--log-key", str(log_key_file), "--stream", STREAM, "--interval", "0.3"]
        self.proc = None
        self.url = None
        self.start(pipeline)

    def start(self, pipeline):
        env = {**pipeline.env(), "EVIDENCE_LOG_LEVEL": "info"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", *self.args, "--log-url", pipeline.api_url,
             "--api-key", pipeline.api_key], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("listening "), (line, self.proc.poll())
        self.url = "http://" + line.split()[1]
        self.stderr = []
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(20)


def test_two_witnesses_cosign_and_a_rewrite_from_seq_1_is_caught(make_pipeline, kafka_bootstrap,
                                                                  tlogverify, tmp_path):  # noqa: F811
    log_key = log_signing_key()[0].verifier
    log_key_file = tmp_path / "log.vkey"
    log_key_file.write_text(format_vkey(log_key) + "\n")
    # the remote witness makes its own key, as an operator elsewhere would
    out = _cli("witness", "keygen", "witness.test/remote", "--out", str(tmp_path / "remote.skey"),
               env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert os.stat(tmp_path / "remote.skey").st_mode & 0o777 == 0o600
    from evidence_contract.note import parse_vkey

    remote_key = parse_vkey(out.stdout.strip())
    witness_keys = (LOCAL.verifier, remote_key)
    p = make_pipeline(env=FAST, api_options={"witness_keys": witness_keys})
    produce_captures(kafka_bootstrap, p.topics, (make_capture(STREAM) for _ in range(6)))
    p.wait_records(STREAM, 6)

    local = Witness(WitnessConfig(key=LOCAL, log_key=log_key, state_dir=tmp_path / "local",
                                  log_url=p.api_url, api_key=p.api_key, streams=[STREAM],
                                  interval=0.3))
    lhost, lport = local.serve()
    local_url = f"http://{lhost}:{lport}"
    runner = threading.Thread(target=local.run, daemon=True)
    runner.start()
    remote = RemoteWitness(tmp_path / "remote.skey", tmp_path / "remote-state", log_key_file, p)
    try:
        wait_until("the checkpoint of 6 served with both cosignatures",
                   lambda: (n := _served(p)) is not None and n.split(b"\n")[1] == b"6"
                   and _cosigned_by(n, witness_keys) == 2, 60, 0.2)
        witnessed_6 = _served(p)
        produce_captures(kafka_bootstrap, p.topics, (make_capture(STREAM) for _ in range(5)))
        p.wait_records(STREAM, 11)
        wait_until("the checkpoint of 11 served with both cosignatures",
                   lambda: (n := _served(p)) is not None and n.split(b"\n")[1] == b"11"
                   and _cosigned_by(n, witness_keys) == 2, 60, 0.2)
        witnessed = _served(p)
        (tmp_path / "witnessed.note").write_bytes(witnessed)
        origin = checkpoint_origin(log_key.name, STREAM)
        for url in (local_url, remote.url):  # each witness serves what it cosigned
            note = httpx.get(f"{url}/checkpoints/{origin}").content
            assert note.split(b"\n")[:2] == [origin.encode(), b"11"]

        keys = ["--witness-key", format_vkey(LOCAL.verifier), "--witness-key",
                format_vkey(remote_key), "--log-key", str(log_key_file)]
        audit = _cli("audit", "--no-projection", "--json", "--witness", local_url,
                     "--witness", remote.url, *keys, env=p.env())
        assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr
        report = json.loads(audit.stdout)
        (tree,) = [s for s in report["trees"]["streams"] if s["stream"] == STREAM]
        assert tree["tree_size"] == 11 and len(tree["witnessed"]) == 2
        assert tree["checkpoints_checked"] >= 2

        # an outside verifier (Go: x/mod note, transparency-dev formats and merkle) holding
        # only the checkpoint of 6 accepts the log's tree of 11 as its extension
        rc, out = _go_extends(tlogverify, tmp_path, p, witnessed_6, witnessed, 6, 11)
        assert rc == 0 and json.loads(out)["latest"] == 11, out

        # an export of record 3 carries the witnessed checkpoint and verifies offline
        exp = _cli("export", "--stream", STREAM, "--seq", "3", "--out", str(tmp_path / "exp"),
                   "--log-key", str(log_key_file), "--witness-key", format_vkey(LOCAL.verifier),
                   "--witness-key", format_vkey(remote_key),
                   env={**p.env(), "EVIDENCE_PG_VIEWS_SCHEMA": p.projection.views_schema})
        assert exp.returncode == 0, exp.stderr
        assert (tmp_path / "exp" / "checkpoint.note").exists()
        ver = _cli("verify", str(tmp_path / "exp"), "--log-key", str(log_key_file),
                   env=dict(os.environ))
        assert ver.returncode == 0, ver.stdout + ver.stderr

        # THE ATTACK: the stream rewritten from seq 1 on a fresh log, resealed by a real writer
        # with the log key, its checkpoints recomputed and signed, evidence.checkpoints new.
        q = make_pipeline(env=FAST, api_options={"witness_keys": witness_keys},
                          transactional_id=f"tx-rewrite-{uuid.uuid4().hex[:8]}",
                          group_id=f"wg-rewrite-{uuid.uuid4().hex[:8]}")  # another deployment
        produce_captures(kafka_bootstrap, q.topics, (make_capture(STREAM) for _ in range(14)))
        q.wait_records(STREAM, 14)
        wait_until("the rewritten log's checkpoint of 14",
                   lambda: (n := _served(q)) is not None and n.split(b"\n")[1] == b"14", 60, 0.2)

        plain = _cli("audit", "--no-projection", "--log-key", str(log_key_file), env=q.env())
        assert plain.returncode == 0, plain.stdout  # chains, digests and checkpoints all agree

        held = _cli("audit", "--no-projection", "--json", "--checkpoint",
                    str(tmp_path / "witnessed.note"), *keys, env=q.env())
        assert held.returncode == 3, held.stdout[-3000:] + held.stderr
        kinds = json.loads(held.stdout)["findings_by_kind"]
        assert kinds == {"rewritten_since_witnessed": 1}, kinds

        # the outside verifier holding only the witnessed checkpoint of 11 refuses the
        # rewritten log: no consistency proof the rewritten log can give leads from it
        rc, out = _go_extends(tlogverify, tmp_path, q, witnessed, _served(q), 11, 14)
        assert rc == 1 and out.startswith("FAIL consistency"), out

        # the witnesses, shown the rewritten log, refuse it and keep what they cosigned
        local.stop()
        runner.join(30)  # its poll in flight finished: no poll of its own races the one below
        assert not runner.is_alive()
        local.config.log_url, local.config.api_key = q.api_url, q.api_key
        local._client = None
        assert local.follow(STREAM) == "refused"
        remote.stop()
        remote.start(q)

        def remote_refused():
            return httpx.get(f"{remote.url}/refusals").json()["refusals"]

        wait_until("the remote witness refuses the rewritten checkpoint", remote_refused, 60, 0.2)
        for url in (local_url, remote.url):
            (refusal,) = httpx.get(f"{url}/refusals").json()["refusals"]
            assert refusal["kind"] == "inconsistent" and refusal["log_signed"]
            assert refusal["last_cosigned"]["size"] == 11 and refusal["tree_size"] == 14
            assert httpx.get(f"{url}/checkpoints/{origin}").content.split(b"\n")[1] == b"11"
        assert any('"checkpoint_refused"' in line and '"level":"error"' in line
                   for line in remote.stderr), remote.stderr[-5:]
        assert not _cosigned_by(_served(q), witness_keys)  # never cosigned

        audit = _cli("audit", "--no-projection", "--json", "--witness", local_url,
                     "--witness", remote.url, *keys, env=q.env())
        assert audit.returncode == 3, audit.stdout[-3000:] + audit.stderr
        kinds = json.loads(audit.stdout)["findings_by_kind"]
        assert kinds == {"rewritten_since_witnessed": 2, "witness_refused": 2}, kinds
    finally:
        remote.stop()
        local.close()
