"""The devstack makes the log's key pair once, the signer 0600, and exports where they are;
likewise an admin API key, and the policy files the services run with."""

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


def test_an_admin_key_is_made_once_and_the_api_takes_it(tmp_path, monkeypatch):
    from api.config import load_keyring

    monkeypatch.delenv("EVIDENCE_API_ADMIN_KEYS", raising=False)
    cfg = StackConfig(root=tmp_path)
    env = _write_env(cfg)
    admin = env["EVIDENCE_API_ADMIN_KEYS"]
    assert f"export EVIDENCE_API_ADMIN_KEYS={admin}" in cfg.env_file.read_text()
    assert admin != env["EVIDENCE_API_KEY"]
    ring = load_keyring(env)  # strong enough for the API, and it has the admin role
    assert ring.lookup(admin).admin and not ring.lookup(env["EVIDENCE_API_KEY"]).admin
    assert _write_env(cfg)["EVIDENCE_API_ADMIN_KEYS"] == admin  # kept across `up`s


def test_the_policy_files_the_services_run_with_are_exported(tmp_path, monkeypatch):
    from devstack.stack import read_env

    cfg = StackConfig(root=tmp_path)
    monkeypatch.delenv("EVIDENCE_REDACTION_FILE", raising=False)
    monkeypatch.delenv("EVIDENCE_RETENTION_FILE", raising=False)
    env = _write_env(cfg)
    assert "EVIDENCE_RETENTION_FILE" not in env and "EVIDENCE_REDACTION_FILE" not in env
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVIDENCE_RETENTION_FILE", "retention.json")  # relative to the caller
    monkeypatch.setenv("EVIDENCE_REDACTION_FILE", str(tmp_path / "redaction.json"))
    env = _write_env(cfg)
    assert env["EVIDENCE_RETENTION_FILE"] == str(tmp_path / "retention.json")
    assert read_env(cfg)["EVIDENCE_REDACTION_FILE"] == str(tmp_path / "redaction.json")
    # A later `up` without them keeps them (the services still run with them) ...
    monkeypatch.delenv("EVIDENCE_REDACTION_FILE")
    monkeypatch.delenv("EVIDENCE_RETENTION_FILE")
    assert read_env(cfg)["EVIDENCE_RETENTION_FILE"] == _write_env(cfg)["EVIDENCE_RETENTION_FILE"]
    # ... and one that sets a variable empty drops that policy.
    monkeypatch.setenv("EVIDENCE_RETENTION_FILE", "")
    env = _write_env(cfg)
    assert "EVIDENCE_RETENTION_FILE" not in env and "EVIDENCE_RETENTION_FILE" not in read_env(cfg)
    assert env["EVIDENCE_REDACTION_FILE"] == str(tmp_path / "redaction.json")
