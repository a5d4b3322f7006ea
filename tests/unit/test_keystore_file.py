"""The local file key store: the contract suite, plus what only files can show."""

from __future__ import annotations

import json
import os
import stat

import pytest

from evidence_client.errors import ConfigError
from evidence_client.keystore import FileKeyStore, load_kek
from evidence_contract.keys import EPOCH_ALL, KeyErased, KeyStoreError, LegalHold
from evidence_contract.sealing import LocalKek
from tests.fixtures.keystore import KeyStoreContract

KEK = LocalKek(bytes(range(32)))


class TestFileKeyStore(KeyStoreContract):
    @pytest.fixture
    def store(self, tmp_path):
        return FileKeyStore(tmp_path / "keys", KEK)

    @pytest.fixture
    def reopen(self, tmp_path):
        return lambda: FileKeyStore(tmp_path / "keys", KEK)

    @pytest.fixture
    def make(self, tmp_path):
        return lambda **kw: FileKeyStore(tmp_path / "keys", KEK, **kw)


def test_files_are_private_and_hold_only_the_wrapped_key(tmp_path):
    store = FileKeyStore(tmp_path / "keys", KEK)
    k = store.data_key("user-42")
    assert stat.S_IMODE(os.stat(tmp_path / "keys").st_mode) == 0o700
    path = tmp_path / "keys" / f"{k.key_id}.key"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    raw = path.read_bytes()
    assert k.material not in raw and k.material.hex().encode() not in raw
    assert not [p for p in (tmp_path / "keys").iterdir() if p.name.endswith(".tmp")]


def test_destroy_overwrites_then_replaces_the_key_file(tmp_path, monkeypatch):
    store = FileKeyStore(tmp_path / "keys", KEK)
    k = store.data_key("user-42")
    path = tmp_path / "keys" / f"{k.key_id}.key"
    before = path.read_bytes()
    written = []
    real_write = os.write

    def spy(fd, data):
        written.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", spy)
    store.destroy("user-42")
    assert b"\x00" * len(before) in written  # the key file's own bytes were zeroed
    after = path.read_bytes()
    assert b"wrapped" not in after and before not in after
    assert not [p for p in (tmp_path / "keys").iterdir() if p.name.endswith(".tmp")]


def test_a_destroy_cut_after_the_overwrite_still_reads_as_erased(tmp_path):
    store = FileKeyStore(tmp_path / "keys", KEK)
    k = store.data_key("user-42")
    path = tmp_path / "keys" / f"{k.key_id}.key"
    path.write_bytes(b"\x00" * len(path.read_bytes()))
    with pytest.raises(KeyErased):
        store.key(k.key_id)


def test_another_kek_cannot_unwrap(tmp_path):
    k = FileKeyStore(tmp_path / "keys", KEK).data_key("user-42")
    with pytest.raises(KeyStoreError):
        FileKeyStore(tmp_path / "keys", LocalKek(bytes(32))).key(k.key_id)


def test_load_kek_from_a_private_file_or_the_environment(tmp_path):
    f = tmp_path / "kek"
    f.write_bytes(bytes(range(32)))
    f.chmod(0o600)
    assert load_kek({"EVIDENCE_KEK_FILE": str(f)}).kek_id == KEK.kek_id
    f.write_text(bytes(range(32)).hex() + "\n")
    assert load_kek({"EVIDENCE_KEK_FILE": str(f)}).kek_id == KEK.kek_id
    assert load_kek({"EVIDENCE_KEK": bytes(range(32)).hex()}).kek_id == KEK.kek_id
    f.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        load_kek({"EVIDENCE_KEK_FILE": str(f)})
    for env in ({}, {"EVIDENCE_KEK": "abcd"}, {"EVIDENCE_KEK_FILE": str(tmp_path / "none")}):
        with pytest.raises(ConfigError):
            load_kek(env)


def test_a_key_file_from_before_epochs_is_epoch_all_and_never_ends(tmp_path):
    store = FileKeyStore(tmp_path / "keys", KEK)
    k = store.data_key("user-42")
    path = tmp_path / "keys" / f"{k.key_id}.key"
    doc = json.loads(path.read_text())
    del doc["epoch"], doc["streams"]  # what phase 1 wrote
    path.write_text(json.dumps(doc))
    legacy = store.key(k.key_id)
    assert legacy.epoch == EPOCH_ALL and legacy.expires_at is None
    # New content goes under the current epoch's key; the old key still opens.
    new = store.data_key("user-42")
    assert new.key_id != k.key_id and new.epoch != EPOCH_ALL
    gone = store.destroy("user-42", before_epoch=2**62)
    assert [s.key_id for s in gone] == [new.key_id]  # "all" never ends: a bound keeps it
    assert {s.key_id: s.state for s in store.subjects()}[k.key_id] == "live"
    assert {s.key_id for s in store.destroy("user-42")} == {k.key_id}


def test_holds_are_one_private_file_with_their_history(tmp_path):
    store = FileKeyStore(tmp_path / "keys", KEK)
    store.hold("user-42", "case 1", "h1")
    store.release("user-42", "r1")
    store.hold("user-42", "case 2", "h2")
    path = tmp_path / "keys" / "holds.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    log = json.loads(path.read_text())["holds"]
    assert [(h["reason"], h.get("release_request_id")) for h in log] == [("case 1", "r1"),
                                                                          ("case 2", None)]
    with pytest.raises(LegalHold):
        store.destroy("user-42")
