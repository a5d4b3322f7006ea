"""Encrypted and erased records in the audit, the export and `evidence verify` (pure): shape
checked instead of keyed commitments, erased counted per stream (never a finding), and an
export of an erased record that still verifies its digests, chain, proof and signatures."""

from __future__ import annotations

import hashlib
import re
import subprocess

import pytest

from audit.erasures import Erasures, receipt_request
from audit.export import Erased, TreeProof, build_export
from audit.offline import verify_export
from audit.verify import LogAuditor
from evidence_contract import GENESIS, encode, new_event_id, seal
from evidence_contract import envelope as fmt
from evidence_contract.erasure import ErasureRequest, receipt_text
from evidence_contract.merkle import MerkleTree, record_leaf_hash
from evidence_contract.note import Checkpoint, SignerKey, format_checkpoint, format_note, sign
from evidence_contract.tlog import DEFAULT_LOG_NAME, checkpoint_origin
from evidence_contract.vectors import committed_event, encrypted_event

LOG = SignerKey(DEFAULT_LOG_NAME, 1, hashlib.sha256(b"erasure log").digest())
OTHER = SignerKey(DEFAULT_LOG_NAME, 1, hashlib.sha256(b"someone else").digest())
WRITER = {"writer_id": "w", "transactional_id": "tx", "version": "0"}
ENC = encrypted_event()
STREAM = ENC["stream"]
KEY = ENC["encryption"]["key_id"]


def records(n_plain: int = 1, n_enc: int = 2) -> list[bytes]:
    out, prev = [], GENESIS
    bodies = [{**committed_event(), "stream": STREAM} for _ in range(n_plain)] + \
        [ENC for _ in range(n_enc)]
    for i, b in enumerate(bodies):
        b = {**b, "event_id": new_event_id()}  # the shape check does not open envelopes
        rec = seal(b, i, prev, 1_700_000_000_000_000 + i, WRITER, 0, i)
        prev = rec["seal"]["record_digest"]
        out.append(encode("EvidenceRecord", rec))
    return out


def receipt(key: SignerKey = LOG, request_id: str = "dsr-1", keys=(KEY,)) -> bytes:
    text = receipt_text(DEFAULT_LOG_NAME, ErasureRequest(request_id, tuple(keys), 1_700_000_500))
    return format_note(text, [sign(key, text)])


def test_encrypted_records_are_shape_checked_and_erased_ones_counted_not_found():
    a = LogAuditor(erased_keys={KEY})
    for off, v in enumerate(records()):
        a.add(0, off, v)
    assert a.findings == []
    st = a.streams[STREAM]
    assert (st.records, st.encrypted, st.erased) == (3, 2, 2)
    plain = LogAuditor()
    for off, v in enumerate(records()):
        plain.add(0, off, v)
    assert plain.findings == [] and plain.streams[STREAM].erased == 0


def test_a_malformed_envelope_is_bad_encryption():
    bad = {**ENC, "response_bytes": b"in the clear, not an envelope at all, ok?" * 2}
    rec = seal(bad, 0, GENESIS, 1, WRITER, 0, 0)
    a = LogAuditor()
    a.add(0, 0, encode("EvidenceRecord", rec))
    assert [f.kind for f in a.findings] == ["bad_encryption"]


def test_receipts_verified_with_the_log_key_or_read_unverified():
    e = Erasures(log_key=LOG.verifier)
    e.add(0, 0, receipt())
    e.add(0, 1, receipt(OTHER, "dsr-2", ("ab" * 16,)))
    e.add(0, 2, b"garbage")
    assert e.keys == {KEY: (1_700_000_500, "dsr-1")}
    assert [f.kind for f in e.findings] == ["erasure_receipt_invalid"] * 2
    assert receipt_request(receipt(OTHER)).key_ids == (KEY,)  # no key: text only
    assert e.summary() == {"receipts": 1, "erased_keys": 1, "verified": True}


@pytest.fixture
def erased_export():
    values = records()
    tree = MerkleTree([record_leaf_hash(v) for v in values])
    text = format_checkpoint(Checkpoint(checkpoint_origin(DEFAULT_LOG_NAME, STREAM),
                                        len(values), tree.root()))
    proof = TreeProof(format_note(text, [sign(LOG, text)]), len(values),
                      tree.inclusion_proof(2), LOG.verifier)
    return values, proof


def _commands(md: str):
    return re.findall(r"```sh\n(.*?)\n```\n\nexpected: `([^`]+)`", md, flags=re.S)


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_an_erased_record_exports_verifiable_and_says_erased(erased_export, tmp_path, shell):
    values, proof = erased_export
    files, checks = build_export(values[2], 0, 2, proof,
                                 Erased(1_700_000_500, "dsr-1", receipt()))
    md = files["VERIFY.md"].decode()
    assert "## The content: erased" in md and "dsr-1" in md and KEY in md
    assert "inclusion proof" in md and "erasure.note" in md
    assert not {"request.bin", "response.bin", "output.txt", "input.bin"} & set(files)
    assert "content_key = sha256" not in md
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    cmds = _commands(md)
    assert len(cmds) == len(checks)
    assert sum(exp == "Signature Verified Successfully" for _, exp in cmds) == 2  # cp, receipt
    for command, expected in cmds:
        out = subprocess.run([shell, "-c", command], cwd=tmp_path, capture_output=True,
                             text=True).stdout.strip()
        assert out == expected, command
    v = verify_export(files)
    assert v.ok, v.to_dict()
    assert v.summary["content"] == "erased" and v.summary["erasure_request_id"] == "dsr-1"


def test_an_encrypted_record_not_erased_says_encrypted(erased_export):
    values, proof = erased_export
    files, _ = build_export(values[1], 0, 1, None)
    md = files["VERIFY.md"].decode()
    assert "## The content: encrypted" in md and "request.bin" not in files
    v = verify_export(files)
    assert v.summary["content"] == "encrypted"
    assert all(ok for name, ok, _ in v.checks if "checkpoint" not in name)


def test_a_receipt_of_another_key_or_signer_is_refused(erased_export):
    values, proof = erased_export
    with pytest.raises(ValueError, match="does not name"):
        build_export(values[2], 0, 2, proof, Erased(1, "dsr-1", receipt(keys=("ab" * 16,))))
    with pytest.raises(Exception):
        build_export(values[2], 0, 2, proof, Erased(1, "dsr-1", receipt(OTHER)))
    with pytest.raises(ValueError, match="plain"):
        build_export(values[0], 0, 0, proof, Erased(1, "dsr-1"))
    files, _ = build_export(values[2], 0, 2, proof, Erased(1_700_000_500, "dsr-1", receipt()))
    files["erasure.note"] = receipt(OTHER)
    assert not verify_export(files).ok
