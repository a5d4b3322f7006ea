"""A range bundle (audit.range_export): every record a single export proved in ONE checkpoint,
the range's own checks, verify.sh, and `evidence verify`'s offline check of it; a tampered
file fails both, with the reason."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from audit.range_export import RangeRecord, build_range_export, record_dir, verify_range_export
from audit.range_spec import RangeSpec, Span
from tests.unit.test_audit_range import LOG, STREAM, W1, Log


def _bundle(first: int, last: int, cosigned: bool = True) -> dict[str, bytes]:
    log = Log(cosigned=cosigned)
    report = log.check(RangeSpec(seqs=Span(first, last)))
    assert report.clean
    records = [RangeRecord(c.partition, c.offset, c.message, c.proof)
               for c in report.read if c.seq >= first]
    keys = (W1.verifier,) if cosigned else ()
    return build_range_export(STREAM, records, log.note, LOG.verifier, keys)


def _write(files: dict[str, bytes], root: Path) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def _split(files: dict[str, bytes]):
    top = {n: d for n, d in files.items() if "/" not in n}
    recs: dict[str, dict[str, bytes]] = {}
    for n, d in files.items():
        if n.startswith("records/"):
            _r, dirname, name = n.split("/")
            recs.setdefault(dirname, {})[name] = d
    return top, recs


def _checks(md: str) -> list[tuple[str, str]]:
    return re.findall(r"```sh\n(.*?)\n```\n\nexpected: `([^`]+)`", md, flags=re.S)


def test_the_bundle_holds_each_record_as_a_single_export_in_one_checkpoint():
    files = _bundle(5, 9)
    top, recs = _split(files)
    assert {"range.json", "checkpoint.note", "log.vkey", "witnesses.vkey", "VERIFY.md",
            "verify.sh"} <= set(top)
    assert sorted(recs) == [record_dir(s).split("/")[1] for s in range(5, 10)]
    for one in recs.values():
        assert one["checkpoint.note"] == top["checkpoint.note"]
        assert {"record.avro", "inclusion.json", "VERIFY.md"} <= set(one)
    result = verify_range_export(top, recs)
    assert result.ok, result.to_dict()
    assert result.summary["cosigners"] == [W1.name]
    assert result.summary["prev_digest_of_first"]


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_the_shell_commands_verify_the_range(tmp_path, shell):
    root = _write(_bundle(1, 4), tmp_path)
    top = _checks((root / "VERIFY.md").read_text())
    assert len(top) == 2 + 3  # the listing, the one checkpoint, three links
    for command, expected in top:
        out = subprocess.run([shell, "-c", command], cwd=root, capture_output=True, text=True)
        assert out.stdout.strip() == expected, command
    for d in sorted((root / "records").iterdir()):
        for command, expected in _checks((d / "VERIFY.md").read_text()):
            out = subprocess.run([shell, "-c", command], cwd=d, capture_output=True, text=True)
            assert out.stdout.strip() == expected, (d.name, command)
    p = subprocess.run([shell, "verify.sh"], cwd=root, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^\d+ checks passed, 0 failed$", p.stdout, re.M), p.stdout


def test_a_tampered_content_file_fails_the_shell_and_evidence_verify_with_the_reason(tmp_path):
    files = _bundle(5, 7)
    name = f"{record_dir(6)}/response.bin"
    files[name] = files[name].replace(b"5", b"6", 1)
    root = _write(files, tmp_path)
    p = subprocess.run(["sh", "verify.sh"], cwd=root, capture_output=True, text=True)
    assert p.returncode == 1 and f"FAIL {record_dir(6)}: response_digest" in p.stdout, p.stdout
    result = verify_range_export(*_split(files))
    assert not result.ok
    failed = [(n, d) for n, ok, d in result.checks if not ok]
    assert len(failed) == 1 and "records/0000000006" in failed[0][1] \
        and "response.bin is the record's response_bytes" in failed[0][1], failed


def test_a_record_swapped_for_another_and_a_missing_record_are_found():
    files = _bundle(5, 8, cosigned=False)
    top, recs = _split(files)
    recs[record_dir(7).split("/")[1]]["record.avro"] = recs[record_dir(6).split("/")[1]][
        "record.avro"]
    result = verify_range_export(top, recs)
    failed = " | ".join(d for _n, ok, d in result.checks if not ok)
    assert "records/0000000007" in failed and "its record is seq 6" in failed, failed
    del recs[record_dir(8).split("/")[1]]
    result = verify_range_export(top, recs)
    assert any(not ok and "missing 0000000008" in d for _n, ok, d in result.checks)


def test_another_checkpoint_or_log_key_is_refused():
    files = _bundle(2, 3, cosigned=False)
    top, recs = _split(files)
    other = Log()
    other_note = other.note.replace(b"\n\n", b"\n\n", 1)
    result = verify_range_export({**top, "checkpoint.note": other_note.replace(b"20\n", b"21\n")},
                                 recs)
    assert not result.ok and "checkpoint.note" in result.checks[-1][0]
    result = verify_range_export(top, recs, witness_keys=[W1.verifier])
    assert any(not ok and "no valid cosignature" in d for _n, ok, d in result.checks)


def test_evidence_verify_reads_a_range_directory(tmp_path):
    root = _write(_bundle(3, 5), tmp_path)
    p = subprocess.run([sys.executable, "-m", "cli.main", "verify", str(root)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "VERIFIED" in p.stdout and "each of the 3 records verifies" in p.stdout
    (root / record_dir(4) / "record.avro").write_bytes(b"\xc3\x01broken")
    p = subprocess.run([sys.executable, "-m", "cli.main", "verify", str(root)],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "NOT VERIFIED" in p.stdout
    assert "records/0000000004: record.avro is a sealed EvidenceRecord" in p.stdout, p.stdout


def test_the_single_record_format_is_unchanged_by_the_range():
    # A record directory of a bundle is a single-record export: verify_export accepts it.
    from audit.offline import verify_export

    _top, recs = _split(_bundle(1, 2, cosigned=False))
    for one in recs.values():
        assert verify_export(one).ok
