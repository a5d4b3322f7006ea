"""``evidence export --stream S --seq A..B`` (and ``--all``) against a real pipeline: one
bundle, every record proved in one signed checkpoint, verified offline by ``evidence verify``
and by the shell commands it writes; a file tampered with fails both, with the reason."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.integration.test_audit_range import evidence, sealed_stream, wait_covered

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def checks(verify_md: str) -> list[tuple[str, str, str]]:
    """(title, command, expected) of each numbered check of a VERIFY.md."""
    found = re.findall(r"## \d+\. (.+?)\n\n```sh\n(.+?)\n```\n\nexpected: `([^`]+)`",
                       verify_md, re.S)
    assert found, verify_md
    return found


def run_checks(directory) -> int:
    n = 0
    for title, command, expected in checks((directory / "VERIFY.md").read_text()):
        p = subprocess.run(["sh", "-c", command], cwd=directory, capture_output=True,
                           text=True, timeout=60)
        assert p.stdout.strip() == expected, (directory.name, title, command, p.stderr)
        n += 1
    return n


def test_a_range_export_verifies_offline_and_a_tampered_file_does_not(
        make_pipeline, kafka_bootstrap, tmp_path):
    p, stream = sealed_stream(make_pipeline, kafka_bootstrap, 7, "export")

    out = tmp_path / "range"
    r = evidence(p, "export", "--stream", stream, "--seq", "2..5", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "wrote seqs 2..5" in r.stdout
    manifest = json.loads((out / "range.json").read_text())
    assert (manifest["first_seq"], manifest["last_seq"]) == (2, 5)
    assert [m["seq"] for m in manifest["records"]] == [2, 3, 4, 5]
    dirs = sorted((out / "records").iterdir())
    assert len(dirs) == 4
    note = (out / "checkpoint.note").read_bytes()
    assert all((d / "checkpoint.note").read_bytes() == note for d in dirs)  # ONE checkpoint

    v = evidence(p, "verify", str(out))
    assert v.returncode == 0 and "VERIFIED" in v.stdout, v.stdout + v.stderr
    # The shell commands, as VERIFY.md lists them, then verify.sh running them all.
    assert run_checks(out) == 2 + 3
    assert sum(run_checks(d) for d in dirs) > 4 * 5
    sh = subprocess.run(["sh", str(out / "verify.sh")], capture_output=True, text=True,
                        timeout=300)
    assert sh.returncode == 0 and ", 0 failed" in sh.stdout, sh.stdout

    # One file of the bundle altered: both say so, naming the record and the file.
    response = dirs[1] / "response.bin"
    response.write_bytes(response.read_bytes().replace(b"answer", b"Answer", 1))
    v = evidence(p, "verify", str(out))
    assert v.returncode == 1 and "NOT VERIFIED" in v.stdout
    assert f"records/{dirs[1].name}" in v.stdout and "response.bin" in v.stdout, v.stdout
    sh = subprocess.run(["sh", str(out / "verify.sh")], capture_output=True, text=True,
                        timeout=300)
    assert sh.returncode == 1 and f"FAIL records/{dirs[1].name}: response_digest" in sh.stdout


def test_the_whole_stream_and_usage_errors(make_pipeline, kafka_bootstrap, tmp_path):
    p, stream = sealed_stream(make_pipeline, kafka_bootstrap, 3, "export")
    out = tmp_path / "all"
    r = evidence(p, "export", "--stream", stream, "--all", "--out", str(out))
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "range.json").read_text())
    assert manifest["first_seq"] == 1 and manifest["last_seq"] == manifest["tree_size"] >= 3
    assert evidence(p, "verify", str(out)).returncode == 0

    r = evidence(p, "export", "--stream", stream, "--seq", "2..50", "--out",
                 str(tmp_path / "past"))
    assert r.returncode == 2 and "runs past" in r.stderr, r.stderr
    assert not (tmp_path / "past").exists()
    r = evidence(p, "export", "--stream", stream, "--out", str(tmp_path / "none"))
    assert r.returncode == 2 and "give --seq N" in r.stderr
    r = evidence(p, "export", "--stream", stream, "--seq", "2", "--last", "2", "--out",
                 str(tmp_path / "both"))
    assert r.returncode == 2 and "one record" in r.stderr
    # The single record is exported as before.
    one = tmp_path / "one"
    r = evidence(p, "export", "--stream", stream, "--seq", "2", "--out", str(one))
    assert r.returncode == 0, r.stderr
    assert (one / "record.avro").is_file() and not (one / "range.json").exists()


def test_a_range_with_an_erased_record_carries_the_logs_receipt(tmp_path, make_erased_stream):
    erased = make_erased_stream("export", request_id="dsr-range")
    p, stream = erased.pipeline, erased.stream
    wait_covered(p, stream, 2)

    out = tmp_path / "erased"
    r = evidence(p, "export", "--stream", stream, "--seq", "1..2", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "1 records' content erased" in r.stdout
    erased_dir = out / "records" / f"{erased.seq:010d}"
    assert (erased_dir / "erasure.note").is_file()
    assert "dsr-range" in (erased_dir / "VERIFY.md").read_text()
    assert json.loads((out / "range.json").read_text())["records"][erased.seq - 1]["erased"]
    v = evidence(p, "verify", str(out))
    assert v.returncode == 0 and "VERIFIED" in v.stdout, v.stdout + v.stderr
    sh = subprocess.run(["sh", str(out / "verify.sh")], capture_output=True, text=True,
                        timeout=300)
    assert sh.returncode == 0 and ", 0 failed" in sh.stdout, sh.stdout
