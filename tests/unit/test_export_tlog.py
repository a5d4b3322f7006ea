"""An export with its checkpoint and inclusion proof: VERIFY.md's printf/sha256sum/openssl
commands succeed as written (bash and sh), fail on a tampered record, and `evidence verify`
agrees, offline."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys

import pytest

from audit.export import TreeProof, build_export, inclusion_steps
from audit.offline import verify_export
from evidence_contract import encode
from evidence_contract.merkle import MerkleTree, ProofError, record_leaf_hash, verify_inclusion
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, Checkpoint, SignerKey, format_checkpoint, format_note, format_vkey, sign,
)
from evidence_contract.tlog import DEFAULT_LOG_NAME, checkpoint_origin
from tests.unit.test_audit_verify import chain

STREAM = "acme:bot"
LOG = SignerKey(DEFAULT_LOG_NAME, 1, hashlib.sha256(b"export log").digest())
W1 = SignerKey("witness.test/w1", SIG_COSIGNATURE_V1, hashlib.sha256(b"export w1").digest())
W2 = SignerKey("witness.other/w2", SIG_COSIGNATURE_V1, hashlib.sha256(b"export w2").digest())
SIZE = 13


@pytest.fixture(scope="module")
def log():
    values = [encode("EvidenceRecord", r) for r in chain(STREAM, SIZE)]
    tree = MerkleTree([record_leaf_hash(v) for v in values])
    text = format_checkpoint(Checkpoint(checkpoint_origin(DEFAULT_LOG_NAME, STREAM), SIZE,
                                        tree.root()))
    note = format_note(text, [sign(LOG, text), sign(W1, text, timestamp=1_700_000_123),
                              sign(W2, text, timestamp=1_800_000_000)])
    return values, tree, note


def _export(log, seq):
    values, tree, note = log
    proof = TreeProof(note, SIZE, tree.inclusion_proof(seq - 1), LOG.verifier,
                      (W1.verifier, W2.verifier))
    return build_export(values[seq - 1], 0, seq - 1, proof)


def _commands(md: str) -> list[tuple[str, str]]:
    return re.findall(r"```sh\n(.*?)\n```\n\nexpected: `([^`]+)`", md, flags=re.S)


def _run(cmds, cwd, shell="bash"):
    return [(c, exp, subprocess.run([shell, "-c", c], cwd=cwd, capture_output=True,
                                    text=True).stdout.strip()) for c, exp in cmds]


@pytest.mark.parametrize("seq", [1, 6, 13])
@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_the_shell_commands_check_the_proof_and_the_signatures(log, tmp_path, seq, shell):
    files, checks = _export(log, seq)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    assert {"checkpoint.note", "inclusion.json", "log.vkey", "witnesses.vkey"} <= set(files)
    assert files["checkpoint.note"] == log[2]
    cmds = _commands(files["VERIFY.md"].decode())
    assert len(cmds) == len(checks)
    assert sum(exp == "Signature Verified Successfully" for _, exp in cmds) == 3  # log, w1, w2
    for command, expected, out in _run(cmds, tmp_path, shell):
        assert out == expected, command
    assert verify_export(files).ok


def test_a_tampered_record_fails_the_fold_and_evidence_verify(log, tmp_path):
    files, _ = _export(log, 6)
    good_other = build_export(log[0][6], 0, 6)[0]["record.avro"]  # a real record, another seq
    files["record.avro"] = good_other
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    results = _run(_commands(files["VERIFY.md"].decode()), tmp_path)
    failed = [c for c, exp, out in results if out != exp]
    assert any("hex2bin" in c for c in failed)  # the Merkle fold
    assert not verify_export(files).ok
    bad = bytearray(log[2])
    bad[bad.index(b"\n\n") - 5] ^= 1  # the root's base64, so every signature fails
    files2, _ = _export(log, 6)
    files2["checkpoint.note"] = bytes(bad)
    for name, data in files2.items():
        (tmp_path / name).write_bytes(data)
    results = _run(_commands(files2["VERIFY.md"].decode()), tmp_path)
    assert [exp for c, exp, out in results if out != exp].count(
        "Signature Verified Successfully") == 3
    assert not verify_export(files2).ok


def test_no_export_of_a_proof_that_does_not_verify(log):
    values, tree, note = log
    with pytest.raises(ProofError):
        build_export(values[2], 0, 2, TreeProof(note, SIZE, tree.inclusion_proof(3),
                                                LOG.verifier))


def test_inclusion_steps_fold_like_rfc_9162(log):
    values, tree, _ = log
    for i in range(SIZE):
        h = record_leaf_hash(values[i])
        for side, p in inclusion_steps(i, SIZE, tree.inclusion_proof(i)):
            h = hashlib.sha256(b"\x01" + (p + h if side == "left" else h + p)).digest()
        assert h == tree.root()
        verify_inclusion(i, SIZE, record_leaf_hash(values[i]), tree.inclusion_proof(i),
                         tree.root())


def test_evidence_verify_exit_codes_and_keys(log, tmp_path):
    files, _ = _export(log, 4)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path.parent / "log.vkey").write_text(format_vkey(LOG.verifier) + "\n")
    run = lambda *a: subprocess.run([sys.executable, "-m", "cli.main", "verify", *a],  # noqa
                                    capture_output=True, text=True, timeout=60)
    ok = run(str(tmp_path), "--log-key", str(tmp_path.parent / "log.vkey"),
             "--witness-key", format_vkey(W1.verifier))
    assert ok.returncode == 0 and "VERIFIED" in ok.stdout, ok.stdout + ok.stderr
    other = SignerKey(DEFAULT_LOG_NAME, 1, b"\x07" * 32)
    (tmp_path.parent / "other.vkey").write_text(format_vkey(other.verifier) + "\n")
    assert run(str(tmp_path), "--log-key", str(tmp_path.parent / "other.vkey")).returncode == 1
    stranger = SignerKey("witness.test/w9", SIG_COSIGNATURE_V1, b"\x05" * 32)
    assert run(str(tmp_path), "--witness-key", format_vkey(stranger.verifier)).returncode == 1
    assert run(str(tmp_path / "nope")).returncode == 2
    no_proof, _ = build_export(log[0][3], 0, 3)
    d = tmp_path.parent / "plain"
    d.mkdir()
    for name, data in no_proof.items():
        (d / name).write_bytes(data)
    assert run(str(d)).returncode == 1
