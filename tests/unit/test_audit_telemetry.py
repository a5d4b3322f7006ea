"""Record contract 2.2 in the audit and the export: a record with a trace and one mapped from
telemetry audit clean and export with commands that hold; a record that breaks a 2.2 rule
(sealed past the writer) is named."""

from __future__ import annotations

import subprocess

from audit import LogAuditor
from audit.export import build_export
from evidence_contract import GENESIS, content_key, encode, seal
from evidence_contract.vectors import mapped_event, traced_event
from tests.unit.test_audit_export import _commands, _write

WRITER = {"writer_id": "w", "transactional_id": "t", "version": "0.1.0"}
T = 1_800_000_000_000_000


def _sealed(*bodies: dict) -> list[bytes]:
    out, prev = [], GENESIS
    for i, b in enumerate(bodies):
        rec = seal(b, i, prev, T + i, WRITER, 0, i)
        prev = rec["seal"]["record_digest"]
        out.append(encode("EvidenceRecord", rec))
    return out


def _audit(values: list[bytes]) -> LogAuditor:
    a = LogAuditor()
    for off, v in enumerate(values):
        a.add(0, off, v)
    return a


def test_a_traced_and_a_mapped_record_audit_clean():
    traced, mapped = traced_event(), mapped_event()
    a = _audit(_sealed(traced, {**mapped, "stream": traced["stream"]}))
    assert a.findings == []
    st = a.streams[traced["stream"]]
    assert st.records == 2 and st.mapped == 1


def test_a_mapped_record_whose_content_key_is_not_its_span_digest_is_named():
    forged = {**mapped_event(), "content_key": content_key(b'{"rebuilt":"json"}')}
    a = _audit(_sealed(forged))
    assert [f.kind for f in a.findings] == ["bad_telemetry"]
    assert "span_digest" in a.findings[0].detail


def test_a_record_with_a_trace_no_span_can_have_is_named():
    bad = {**traced_event(), "trace": {"trace_id": bytes(16), "span_id": b"\x01" * 8}}
    a = _audit(_sealed(bad))
    assert [f.kind for f in a.findings] == ["bad_trace"]


def _run_export(tmp_path, body: dict) -> str:
    rec = seal(body, 0, GENESIS, T, WRITER, 0, 0)
    files, checks = build_export(encode("EvidenceRecord", rec), 0, 0)
    _write(tmp_path, files)
    md = files["VERIFY.md"].decode()
    cmds = _commands(md)
    assert len(cmds) == len(checks)
    for command, expected in cmds:
        got = subprocess.run(["sh", "-c", command], cwd=tmp_path, capture_output=True,
                             text=True, check=True).stdout.strip()
        assert got == expected, command
    return md


def test_a_traced_record_exports_and_verifies(tmp_path):
    md = _run_export(tmp_path, traced_event())
    assert "content_key = sha256(0x00 || request bytes)" in md
    assert "Mapped from telemetry" not in md


def test_a_mapped_record_exports_what_it_has_and_says_what_cannot_be_checked(tmp_path):
    e = mapped_event()
    md = _run_export(tmp_path, e)
    assert "input_digest = sha256(0x02 || input bytes)" in md
    assert "content_key = sha256(0x00" not in md  # there were no request bytes
    assert "## Mapped from telemetry, not captured at the wire" in md
    assert e["telemetry"]["span_digest"].hex() in md and "(equal to it)" in md
    assert e["telemetry"]["corroborates"] in md
    assert not (tmp_path / "request.bin").exists() and not (tmp_path / "response.bin").exists()
