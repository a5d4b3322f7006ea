"""server.witnesses: the witnesses file's format and its watcher (re-read on change, the last
good list kept while a new version is malformed, a missing file is no witnesses)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evidence_contract.note import (
    SIG_COSIGNATURE_V1, SIG_ED25519, SIG_MLDSA44, format_vkey, generate_signer,
)
from server.witnesses import WatchedWitnesses, Witness, WitnessesFileError, parse_witnesses
from tests.fixtures.log import wait_until

ED = generate_signer("witness.example/ed", SIG_COSIGNATURE_V1).verifier
PQ = generate_signer("witness.example/pq", SIG_MLDSA44).verifier
LOG = generate_signer("log.example/log", SIG_ED25519).verifier


def test_keys_urls_comments_and_blank_lines():
    text = (f"# the witnesses\n\n{format_vkey(ED)} http://127.0.0.1:7380/  # local\n"
            f"   {format_vkey(PQ)}\t\n#{format_vkey(LOG)} http://x\n")
    assert parse_witnesses(text) == [Witness(ED, "http://127.0.0.1:7380"), Witness(PQ, None)]
    assert Witness(ED, "https://w.example/a").add_checkpoint_url == \
        "https://w.example/a/add-checkpoint"
    assert Witness(PQ).add_checkpoint_url is None


def test_empty_text_is_no_witnesses():
    assert parse_witnesses("# nobody yet\n\n") == []


@pytest.mark.parametrize("line, reason", [
    ("nonsense", "line 2: not a note verifier key"),
    (format_vkey(LOG), "line 2: key log.example/log\\+[0-9a-f]{8} has type 0x01, not a witness"),
    (f"{format_vkey(ED)} ftp://w.example", "line 2: the submission URL 'ftp://w.example' is not"),
    (f"{format_vkey(ED)} w.example:7380", "line 2: the submission URL"),
    (f"{format_vkey(ED)} http://", "line 2: the submission URL 'http://' is not"),
    (f"{format_vkey(ED)} http://w.example:99999", "line 2: 'http://w.example:99999' is not a URL"),
    (f"{format_vkey(ED)} http://w.example/?a=1", "line 2: .* no user, query or fragment"),
    (f"{format_vkey(ED)} http://u:p@w.example", "line 2: .* no user, query or fragment"),
    (f"{format_vkey(ED)} http://w.example extra", "line 2: expected .* got 3 fields"),
    (format_vkey(PQ), "line 2: witness key witness.example/pq\\+[0-9a-f]{8} is already on line 1"),
])
def test_a_bad_line_is_named_with_its_reason(line, reason):
    with pytest.raises(WitnessesFileError, match=f"^/etc/w {reason}"):
        parse_witnesses(f"{format_vkey(PQ)}\n{line}\n", "/etc/w")


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict]] = []

    def __call__(self, level: str, event: str, **fields) -> None:
        self.lines.append((level, event, fields))

    def events(self) -> list[str]:
        return [e for _, e, _ in self.lines]


def _write(path: Path, text: str) -> None:
    # A new file renamed over the old one, as an editor or a config manager writes it.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_watched_file_follows_changes_and_keeps_the_last_good(tmp_path, monkeypatch):
    path, log = tmp_path / "witnesses", _Log()
    watched = WatchedWitnesses(path, log=log)
    assert watched.current() == () and log.events() == ["witnesses_file_missing"]
    assert watched.current() == () and len(log.lines) == 1  # said once

    _write(path, f"{format_vkey(ED)} http://127.0.0.1:1\n")
    assert watched.current() == (Witness(ED, "http://127.0.0.1:1"),)
    assert log.lines[-1][1] == "witnesses_file_loaded"

    # Unchanged: a stat, no read.
    monkeypatch.setattr(Path, "read_text", lambda *a, **k: pytest.fail("re-read unchanged"))
    assert watched.keys() == (ED,)
    monkeypatch.undo()

    _write(path, f"{format_vkey(ED)} http://127.0.0.1:1\n{format_vkey(LOG)}\n")
    assert watched.current() == (Witness(ED, "http://127.0.0.1:1"),)  # kept
    level, event, fields = log.lines[-1]
    assert (level, event, fields["kept"]) == ("error", "witnesses_file_invalid", 1)
    assert "line 2" in fields["reason"] and "type 0x01" in fields["reason"]
    n = len(log.lines)
    assert watched.current() == (Witness(ED, "http://127.0.0.1:1"),) and len(log.lines) == n

    _write(path, f"{format_vkey(PQ)}\n{format_vkey(ED)} https://w.example\n")
    assert watched.current() == (Witness(PQ), Witness(ED, "https://w.example"))
    assert watched.keys() == (PQ, ED)

    path.unlink()
    assert watched.current() == ()
    assert log.lines[-1][:2] == ("warning", "witnesses_file_missing")


def test_an_in_place_edit_of_the_same_size_is_seen(tmp_path):
    path = tmp_path / "witnesses"
    path.write_text(f"{format_vkey(ED)} http://127.0.0.1:1111\n")
    watched = WatchedWitnesses(path, log=_Log())
    assert watched.current()[0].url == "http://127.0.0.1:1111"
    st = path.stat()
    path.write_text(f"{format_vkey(ED)} http://127.0.0.1:2222\n")  # same inode, same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert watched.current()[0].url == "http://127.0.0.1:2222"


def test_an_undecodable_file_keeps_the_last_good(tmp_path):
    path, log = tmp_path / "witnesses", _Log()
    _write(path, f"{format_vkey(ED)}\n")
    watched = WatchedWitnesses(path, log=log)
    assert watched.keys() == (ED,)
    path.write_bytes(b"\xff\xfe\n")
    assert watched.keys() == (ED,)
    assert log.lines[-1][1] == "witnesses_file_invalid" and "UTF-8" in log.lines[-1][2]["reason"]


def test_the_api_takes_the_witnesses_file_as_it_is_at_request_time(tmp_path):
    from api import Settings

    path = tmp_path / "witnesses"
    static = generate_signer("witness.example/static", SIG_COSIGNATURE_V1).verifier
    settings = Settings.from_env({
        "EVIDENCE_DATABASE_URL": "postgresql://u:p@127.0.0.1:5432/db",
        "EVIDENCE_API_KEY": "k-3a9e1f7c0b2d4e6f8a1c3e5b7d9f0a2c", "EVIDENCE_API_KEY_STREAMS": "*",
        "EVIDENCE_WITNESS_KEYS": format_vkey(static), "EVIDENCE_WITNESSES_FILE": str(path)})
    assert settings.current_witness_keys() == (static,)  # no file yet
    _write(path, f"{format_vkey(PQ)} http://127.0.0.1:1\n{format_vkey(static)}\n")
    assert settings.current_witness_keys() == (static, PQ)
    _write(path, f"{format_vkey(ED)}\n")
    assert settings.current_witness_keys() == (static, ED)
    unwatched = Settings.from_env({
        "EVIDENCE_DATABASE_URL": "postgresql://u:p@127.0.0.1:5432/db",
        "EVIDENCE_API_KEY": "k-3a9e1f7c0b2d4e6f8a1c3e5b7d9f0a2c", "EVIDENCE_API_KEY_STREAMS": "*"})
    assert unwatched.current_witness_keys() == ()


def test_a_witness_added_to_the_file_is_taken_without_a_restart(tmp_path):
    from tests.unit.test_api_tlog import FakeDb, FakeProducer, _cosigned, _post, client_for

    path = tmp_path / "witnesses"
    pq = generate_signer("witness.example/pq-api", SIG_MLDSA44)
    producer = FakeProducer()
    c = client_for(FakeDb(), producer, witness_keys=(), witnesses_file=str(path))
    body = _cosigned(13, pq)
    r = _post(c, body)
    assert r.status_code == 403 and "EVIDENCE_WITNESSES_FILE" in r.json()["message"]
    _write(path, f"{format_vkey(pq.verifier)}\n")
    r = _post(c, body)
    assert r.status_code == 202, r.text
    assert r.json()["witnesses"] == [pq.name]
    assert producer.sent[0][2]["evidence-witness"] == pq.name.encode()
    _write(path, "# removed\n")
    assert _post(c, body).status_code == 403


def test_an_unreadable_version_is_read_again_once_it_is_readable(tmp_path, monkeypatch):
    path, log = tmp_path / "witnesses", _Log()
    _write(path, f"{format_vkey(ED)}\n")
    watched = WatchedWitnesses(path, log=log)
    assert watched.keys() == (ED,)
    path.write_text(f"{format_vkey(PQ)}\n")
    path.chmod(0)
    real = Path.read_text

    def denied(self, *a, **k):  # what a non-root reader meets (root reads any mode)
        if self == path and not self.stat().st_mode & 0o444:
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", denied)
    assert watched.keys() == (ED,) and log.lines[-1][1] == "witnesses_file_invalid"
    st = path.stat()

    def readable_with_a_new_change_time() -> bool:
        # The same size and modification time: only the change time moves, by a clock tick.
        path.chmod(0o600)
        path.chmod(0o644)
        return path.stat().st_ctime_ns != st.st_ctime_ns

    wait_until("a chmod with a later change time", readable_with_a_new_change_time, 10, 0.001)
    assert path.stat().st_mtime_ns == st.st_mtime_ns
    assert watched.keys() == (PQ,)
