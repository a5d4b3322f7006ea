"""`evidence replay` usage errors need no service: they exit 2 with a message, never a
traceback (a finding: non-UTF-8 --output ended in a UnicodeEncodeError traceback, exit 1)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def replay(*args: bytes | str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", "replay", *args], cwd=ROOT,
                          capture_output=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "EVIDENCE_API_URL": "http://127.0.0.1:9",
                               "EVIDENCE_API_KEY": "k" * 40})


def test_output_that_is_not_utf8_is_a_usage_error():
    r = replay("--stream", "acme:x", "--seq", "1", "--output", b"abc\xff")
    assert r.returncode == 2, r.stderr
    assert b"not UTF-8 text (byte ff" in r.stderr
    assert b"Traceback" not in r.stderr


def test_output_with_any_valid_utf8_is_accepted_past_usage_checks():
    r = replay("--stream", "acme:x", "--seq", "1", "--output", "h\u00e9llo \u2713")
    assert r.returncode != 2, r.stderr  # it got as far as the (unreachable) API
    assert b"Traceback" not in r.stderr
