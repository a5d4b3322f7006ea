"""``evidence export`` on records captured by the real gateway (against the fake provider),
sealed by the real writer and projected by the real projector; then every command of VERIFY.md
is run with ``sh`` and must print what it says."""

import json
import re
import subprocess

import openai
import pytest

from tests.fixtures.audit import evidence

pytestmark = pytest.mark.integration

STREAM = "acme:export"


def checks(verify_md: str) -> list[tuple[str, str, str]]:
    """(title, command, expected) of each numbered check in VERIFY.md."""
    found = re.findall(r"## \d+\. (.+?)\n\n```sh\n(.+?)\n```\n\nexpected: `([0-9a-f]+)`",
                       verify_md, re.S)
    assert found, verify_md
    return found


def run_checks(out_dir) -> dict[str, str]:
    results = {}
    for title, command, expected in checks((out_dir / "VERIFY.md").read_text()):
        p = subprocess.run(["sh", "-c", command], cwd=out_dir, capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 0, (title, command, p.stderr)
        assert p.stdout.strip() == expected, (title, command, p.stdout)
        results[title] = expected
    return results


@pytest.fixture
def sealed(make_sealed, make_recorder, fake_provider):
    s = make_sealed({})
    recorder = make_recorder(s.topics, stream=STREAM)
    client = openai.OpenAI(base_url=fake_provider.url + "/v1", api_key="sk-test",
                           max_retries=0, http_client=recorder.http_client())
    client.chat.completions.create(model="gpt-4o", seed=7,
                                   messages=[{"role": "user", "content": "héllo"}])
    for _chunk in client.chat.completions.create(
            model="gpt-4o", stream=True, messages=[{"role": "user", "content": "streamed"}]):
        pass
    recorder.close()
    s.counts[STREAM] = 2
    s.wait_sealed()
    return s


def export(s, tmp_path, seq, name=None):
    out = tmp_path / (name or f"seq{seq}")
    p = evidence("export", "--stream", STREAM, "--seq", str(seq), "--out", str(out),
                 env=s.env())
    return p, out


def test_every_verify_command_recomputes_its_digest(sealed, tmp_path):
    p, out = export(sealed, tmp_path, 1)
    assert p.returncode == 0, p.stderr
    names = {f.name for f in out.iterdir()}
    assert {"record.avro", "body.avro", "request.bin", "response.bin", "output.txt",
            "record.json", "VERIFY.md"} <= names
    assert (out / "output.txt").read_text("utf-8") == "echo: héllo ✓"
    results = run_checks(out)
    titles = " | ".join(results)
    for digest in ("content_key", "response_digest", "output_digest", "record_digest"):
        assert digest in titles, titles
    doc = json.loads((out / "record.json").read_text())
    assert doc["body"]["stream"] == STREAM and doc["seal"]["seq"] == 1
    assert doc["body"]["content_key"] in results.values()
    assert doc["body"]["output_digest"] in results.values()
    assert doc["seal"]["record_digest"] in results.values()
    assert doc["seal"]["prev_digest"] == "00" * 32

    # The streamed capture: its output text is the deltas joined; the chain links to seq 1.
    p, out2 = export(sealed, tmp_path, 2)
    assert p.returncode == 0, p.stderr
    run_checks(out2)
    doc2 = json.loads((out2 / "record.json").read_text())
    assert doc2["body"]["capture"]["streamed"] is True
    assert (out2 / "output.txt").read_text("utf-8")
    assert doc2["seal"]["prev_digest"] == doc["seal"]["record_digest"]
    assert doc["seal"]["record_digest"] in (out2 / "VERIFY.md").read_text()


def test_exit_codes(sealed, tmp_path):
    p, _ = export(sealed, tmp_path, 99)
    assert p.returncode == 1 and b"no record" in p.stderr
    p, _ = export(sealed, tmp_path, 0)
    assert p.returncode == 2
    p = evidence("export", "--stream", STREAM, "--seq", "1", env=sealed.env())
    assert p.returncode == 2 and b"--out" in p.stderr
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("x")
    p, _ = export(sealed, tmp_path, 1, name="taken")
    assert p.returncode == 2 and b"not empty" in p.stderr
