"""The devstack makes the log's key pair once, the signer 0600, and exports where they are."""

import os
import stat

import pytest

from devstack import StackConfig
from devstack.stack import _log_keys, _write_env
from evidence_contract.note import parse_skey, parse_vkey


def test_the_log_keys_are_made_once_private_and_exported(tmp_path, monkeypatch):
    monkeypatch.delenv("EVIDENCE_LOG_NAME", raising=False)
    cfg = StackConfig(root=tmp_path)
    env = _write_env(cfg)
    signer, verifier = env["EVIDENCE_LOG_SIGNING_KEY_FILE"], env["EVIDENCE_LOG_VERIFIER_KEY_FILE"]
    assert env["EVIDENCE_LOG_NAME"] == "evidence-store.local/log"
    assert stat.S_IMODE(os.stat(signer).st_mode) == 0o600
    key = parse_skey(open(signer).read().strip())
    assert parse_vkey(open(verifier).read().strip()) == key.verifier
    assert f"export EVIDENCE_LOG_SIGNING_KEY_FILE={signer}" in cfg.env_file.read_text()
    _write_env(cfg)  # a second `up` keeps the key
    assert parse_skey(open(signer).read().strip()) == key
    with pytest.raises(SystemExit, match="EVIDENCE_LOG_NAME"):
        _log_keys(cfg, "another.example/log")


def test_the_key_store_and_its_kek_are_made_once_private_and_exported(tmp_path):
    from server.keystore import from_env

    cfg = StackConfig(root=tmp_path)
    env = _write_env(cfg)
    kek = env["EVIDENCE_KEK_FILE"]
    assert env["EVIDENCE_KEY_STORE"] == f"file:{cfg.stack / 'keys'}"
    assert stat.S_IMODE(os.stat(kek).st_mode) == 0o600 and len(open(kek).read().strip()) == 64
    text = cfg.env_file.read_text()
    assert f"export EVIDENCE_KEK_FILE={kek}" in text and "export EVIDENCE_KEY_STORE=file:" in text
    before = open(kek).read()
    store = from_env(env)
    key = store.data_key("user-1")
    assert _write_env(cfg)["EVIDENCE_KEK_FILE"] == kek and open(kek).read() == before
    assert from_env(_write_env(cfg)).key(key.key_id) == key  # the same KEK opens it again
