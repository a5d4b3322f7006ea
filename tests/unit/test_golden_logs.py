"""Every record ever sealed is decoded, audited, proven and exported by this code.

``tests/golden/contract-<version>.json`` is a small log sealed by the code of that record
contract version (``tests/golden/seal_golden.py`` made it, from the commit it names in
``sealed_by``): two streams of every kind of capture that version had. This code must read
each record with that version's schema, find nothing wrong with the chain, the digests and
the writer's heads, compute the tree roots that version computed (for 2.1, the ones its
writer signed), prove every record's inclusion and export every record so that the export
verifies. A new contract version adds its golden log; none is ever removed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from audit import LogAuditor
from audit.export import TreeProof, build_export
from audit.offline import verify_export
from evidence_contract import HEADER_SIZE, SCHEMA_VERSION, split_record
from evidence_contract._avro import BY_FINGERPRINT
from evidence_contract.merkle import MerkleTree, record_leaf_hash, verify_inclusion
from evidence_contract.note import (
    SIG_ED25519,
    Checkpoint,
    SignerKey,
    format_checkpoint,
    format_note,
    parse_vkey,
    sign,
    stream_origin,
)
from evidence_contract.tlog import open_stream_checkpoint
from tests.golden.seal_golden import LOG_KEY_NAME, LOG_KEY_SEED
from tests.unit.test_audit_export import _commands

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
LOGS = {p.stem.removeprefix("contract-"): json.loads(p.read_text())
        for p in sorted(GOLDEN.glob("contract-*.json"))}
SIGNER = SignerKey(LOG_KEY_NAME, SIG_ED25519, LOG_KEY_SEED)


def _messages(log: dict) -> list[tuple[int, int, bytes]]:
    return [(r["partition"], r["offset"], bytes.fromhex(r["value"])) for r in log["records"]]


def _streams(log: dict) -> dict[str, list[tuple[int, int, bytes]]]:
    """Each stream's records in seq order, as they are in the log."""
    out: dict[str, list[tuple[int, int, bytes]]] = {}
    for part, offset, value in _messages(log):
        record = split_record(value)[1]
        out.setdefault(record["body"]["stream"], []).append((part, offset, value))
    for records in out.values():
        seqs = [split_record(v)[1]["seal"]["seq"] for _, _, v in records]
        assert seqs == list(range(1, len(records) + 1)), seqs
    return out


def _checkpoint(log: dict, stream: str, size: int, root: bytes) -> bytes:
    """The stream's signed checkpoint: the one the sealing writer signed (2.1 on); before
    that, one signed now with the golden key over the tree as it is, as a log upgraded from
    that version signs its old records."""
    if "checkpoints" in log:
        return log["checkpoints"][stream].encode()
    text = format_checkpoint(Checkpoint(stream_origin(LOG_KEY_NAME, stream), size, root))
    return format_note(text, [sign(SIGNER, text)])


def test_there_is_a_golden_log_of_every_record_contract_version():
    assert {"1.0", "2.0", "2.1", SCHEMA_VERSION} <= set(LOGS), sorted(LOGS)
    # and of every EvidenceRecord schema this code reads: a new one needs its golden log
    sealed = {bytes.fromhex(r["value"])[2:HEADER_SIZE]
              for log in LOGS.values() for r in log["records"]}
    readable = {fp for fp, s in BY_FINGERPRINT.items() if s.name == "EvidenceRecord"}
    assert readable == sealed, sorted(fp.hex() for fp in readable ^ sealed)


@pytest.mark.parametrize("version", sorted(LOGS))
def test_every_record_decodes_with_its_own_version(version):
    log = LOGS[version]
    assert log["contract"] == log["schema_version"] == version
    for _, _, value in _messages(log):
        stored_body, record = split_record(value)
        assert record["body"]["schema_version"] == version
        assert value[HEADER_SIZE:].startswith(stored_body)
        assert not BY_FINGERPRINT[value[2:HEADER_SIZE]].current or version == SCHEMA_VERSION


@pytest.mark.parametrize("version", sorted(LOGS))
def test_the_audit_finds_nothing_wrong(version):
    log = LOGS[version]
    auditor = LogAuditor()
    for part, offset, value in _messages(log):
        auditor.add(part, offset, value)
    auditor.check_heads({s: (h["seq"], bytes.fromhex(h["record_digest"]))
                         for s, h in log["heads"].items()})
    assert auditor.findings == []
    assert {s: st.records for s, st in auditor.streams.items()} == \
        {s: h["seq"] for s, h in log["heads"].items()}
    assert auditor.output_checks["extracted"] > 0  # output digests were recomputed, not skipped


@pytest.mark.parametrize("version", sorted(LOGS))
def test_tree_roots_are_the_sealed_ones_and_every_record_is_proven(version):
    log = LOGS[version]
    for stream, records in _streams(log).items():
        tree = MerkleTree(record_leaf_hash(v) for _, _, v in records)
        pinned = log["trees"][stream]
        assert (tree.size, tree.root().hex()) == (pinned["size"], pinned["root"])
        if "checkpoints" in log:  # signed by the sealing writer: it verifies with its key
            cp, _, got = open_stream_checkpoint(log["checkpoints"][stream],
                                                parse_vkey(log["log_key"]), stream)
            assert (got, cp.size, cp.root_hash) == (stream, tree.size, tree.root())
        for i, (_, _, value) in enumerate(records):
            verify_inclusion(i, tree.size, record_leaf_hash(value), tree.inclusion_proof(i),
                             tree.root())


@pytest.mark.parametrize("version", sorted(LOGS))
def test_every_record_exports_and_its_export_verifies(version):
    log = LOGS[version]
    for stream, records in _streams(log).items():
        tree = MerkleTree(record_leaf_hash(v) for _, _, v in records)
        proof = TreeProof(_checkpoint(log, stream, tree.size, tree.root()), tree.size, (),
                          SIGNER.verifier)
        for i, (part, offset, value) in enumerate(records):
            files, checks = build_export(value, part, offset, TreeProof(
                proof.checkpoint, tree.size, tree.inclusion_proof(i), SIGNER.verifier))
            got = verify_export(files)
            assert got.ok, (version, stream, i, [c for c in got.checks if not c[1]])
            assert checks and files["record.avro"] == value


@pytest.mark.parametrize("version", sorted(LOGS))
def test_verify_md_commands_recompute_the_digests_of_a_record(version, tmp_path):
    # The export's instructions, run with standard tools, for the first record of the log.
    part, offset, value = _messages(LOGS[version])[0]
    files, checks = build_export(value, part, offset)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    commands = _commands(files["VERIFY.md"].decode())
    assert len(commands) == len(checks) > 3
    for command, expected in commands:
        out = subprocess.run(["sh", "-c", command], cwd=tmp_path, capture_output=True,
                             text=True, check=True).stdout.strip()
        assert out == expected, command
