"""The export's VERIFY.md commands, run with standard tools, recompute every digest."""

from __future__ import annotations

import re
import subprocess

import pytest

from audit.export import build_export
from evidence_contract import GENESIS, encode, seal
from tests.unit.test_audit_verify import WRITER, answering, body, chain


def _write(tmp_path, files):
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)


def _commands(md: str) -> list[tuple[str, str]]:
    return re.findall(r"```sh\n(.*?)\n```\n\nexpected: `([0-9a-f]+)`", md, flags=re.S)


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_every_command_prints_its_expected_digest(tmp_path, shell):
    recs = chain("acme:bot", 3)
    b = answering(body("acme:bot", 9), "Grüße, world")
    rec = seal(b, 3, recs[-1]["seal"]["record_digest"], 1_800_000_000_123_456, WRITER, 2, 77)
    files, checks = build_export(encode("EvidenceRecord", rec), 2, 77)
    assert files["output.txt"] == "Grüße, world".encode()
    _write(tmp_path, files)
    md = files["VERIFY.md"].decode()
    cmds = _commands(md)
    assert len(cmds) == len(checks) == 10  # with input, prompt and chunk digests
    for command, expected in cmds:
        out = subprocess.run([shell, "-c", command], cwd=tmp_path, capture_output=True,
                             text=True, check=True).stdout.strip()
        assert out == expected, command
    assert rec["seal"]["prev_digest"].hex() in md


def test_a_tampered_export_fails_its_commands(tmp_path):
    rec = seal(body("s", 0), 0, GENESIS, 1, WRITER, 0, 0)
    files, _ = build_export(encode("EvidenceRecord", rec), 0, 0)
    files["response.bin"] = files["response.bin"] + b" "
    body_avro = bytearray(files["body.avro"])
    body_avro[-1] ^= 1
    files["body.avro"] = bytes(body_avro)
    _write(tmp_path, files)
    failed = [c for c, exp in _commands(files["VERIFY.md"].decode())
              if subprocess.run(["sh", "-c", c], cwd=tmp_path, capture_output=True,
                                text=True).stdout.strip() != exp]
    assert len(failed) == 3  # body.avro, response_digest, record_digest


def test_an_output_digest_of_an_unknown_wire_format_is_named_in_verify_md():
    b = answering(body("s", 0), "hi", endpoint="https://llm.example/v2/generate")
    files, checks = build_export(encode("EvidenceRecord", seal(b, 0, GENESIS, 1, WRITER, 0, 0)),
                                 0, 0)
    assert "output.txt" not in files
    assert not any("output_digest" in c["name"] for c in checks)
    md = files["VERIFY.md"].decode()
    assert "## output_digest: not checked" in md and "/v2/generate" in md


def test_a_record_of_the_earlier_contract_version_exports_and_verifies(tmp_path):
    # A 2.0 record (sealed before contract 2.1, read with its own schema from avro/history/)
    # exports like any other: its header names its own version's fingerprint.
    import io

    import fastavro

    from evidence_contract import record_digest
    from evidence_contract._avro import BY_FINGERPRINT, HISTORY, RECORD_FOR_CAPTURE
    from evidence_contract.codec import encode_sealed

    old_capture = next(s for s in HISTORY if s.name == "CaptureEvent")
    old_record = BY_FINGERPRINT[RECORD_FOR_CAPTURE[old_capture.fingerprint]]
    b = answering(body("acme:bot", 1), "an answer")
    for added_since in ("encryption", "trace", "telemetry"):
        b.pop(added_since, None)
    b["schema_version"] = "2.0"
    out = io.BytesIO()
    fastavro.schemaless_writer(out, old_capture.parsed, b, strict=True)
    body_avro = out.getvalue()
    at = 1_800_000_000_000_000
    sealed = {"seq": 1, "occurred_at": at, "prev_digest": GENESIS,
              "record_digest": record_digest(GENESIS, 1, at, body_avro), "writer": WRITER,
              "intake_partition": 0, "intake_offset": 5}
    message = encode_sealed(body_avro, sealed, old_record.fingerprint)
    files, checks = build_export(message, 0, 5)
    _write(tmp_path, files)
    for command, expected in _commands(files["VERIFY.md"].decode()):
        got = subprocess.run(["sh", "-c", command], cwd=tmp_path, capture_output=True,
                             text=True, check=True).stdout.strip()
        assert got == expected, command
    assert f"c301{old_record.fingerprint.hex()}" in files["VERIFY.md"].decode()
