"""The key store's settings (server.settings.KeyStoreSettings) and the CLI's policy files
(cli.settings.PolicyFiles): read from the environment once, a value that cannot work an error
naming its variable, an empty value unset; server.keystore opens what they name."""

from __future__ import annotations

import pytest

from cli.settings import PolicyFiles
from evidence_client.keystore import FileKeyStore
from evidence_contract.keys import KeyStoreError
from server.keystore import from_env, open_key_store
from server.settings import KeyStoreSettings, SettingsError

KEK = bytes(range(32)).hex()


def test_a_file_store_with_its_defaults():
    s = KeyStoreSettings.from_env({"EVIDENCE_KEY_STORE": " file:/keys ", "EVIDENCE_KEK": KEK})
    assert (s.store, s.directory, s.epoch, s.schema, s.database_url) == (
        "file:/keys", "/keys", "day", "evidence_keys", None)
    assert s.kek_env() == {"EVIDENCE_KEK": KEK}
    assert KEK not in repr(s)


def test_a_postgres_store_takes_its_database_schema_and_epoch():
    s = KeyStoreSettings.from_env({
        "EVIDENCE_KEY_STORE": "postgres", "EVIDENCE_DATABASE_URL": "postgresql://db/x",
        "EVIDENCE_KEY_STORE_SCHEMA": "keys_a", "EVIDENCE_KEY_EPOCH": "Month",
        "EVIDENCE_KEK_FILE": "/kek", "EVIDENCE_KEK": ""})
    assert (s.directory, s.database_url, s.schema, s.epoch) == (
        None, "postgresql://db/x", "keys_a", "month")
    assert s.kek_env() == {"EVIDENCE_KEK_FILE": "/kek"}


@pytest.mark.parametrize("env, message", [
    ({}, "no key store: set EVIDENCE_KEY_STORE"),
    ({"EVIDENCE_KEY_STORE": "  "}, "no key store: set EVIDENCE_KEY_STORE"),
    ({"EVIDENCE_KEY_STORE": "file:"}, "EVIDENCE_KEY_STORE 'file:': expected file:<dir> or postgres"),
    ({"EVIDENCE_KEY_STORE": "s3"}, "EVIDENCE_KEY_STORE 's3': expected file:<dir> or postgres"),
    ({"EVIDENCE_KEY_STORE": "postgres", "EVIDENCE_DATABASE_URL": ""},
     "EVIDENCE_KEY_STORE=postgres needs EVIDENCE_DATABASE_URL"),
    ({"EVIDENCE_KEY_STORE": "file:/k", "EVIDENCE_KEY_EPOCH": "week"}, "EVIDENCE_KEY_EPOCH"),
])
def test_a_setting_that_cannot_work_names_its_variable(env, message):
    with pytest.raises(SettingsError, match="^" + message.replace("(", r"\(")):
        KeyStoreSettings.from_env(env)
    with pytest.raises(KeyStoreError, match="^" + message.replace("(", r"\(")):
        from_env(env)  # the one call the API and `evidence erase` make


def test_open_key_store_opens_the_file_store_the_settings_name(tmp_path):
    settings = KeyStoreSettings(f"file:{tmp_path / 'keys'}", kek=KEK)
    store = open_key_store(settings)
    assert isinstance(store, FileKeyStore)
    key = store.data_key("user-1")
    assert from_env({"EVIDENCE_KEY_STORE": settings.store, "EVIDENCE_KEK": KEK}).key(
        key.key_id) == key


def test_a_store_without_a_kek_is_a_key_store_error(tmp_path):
    with pytest.raises(KeyStoreError, match="no key-encryption key"):
        open_key_store(KeyStoreSettings(f"file:{tmp_path}"))


def test_policy_files_empty_is_unset():
    assert PolicyFiles.from_env({}) == PolicyFiles(None, None)
    assert PolicyFiles.from_env({"EVIDENCE_REDACTION_FILE": "", "EVIDENCE_RETENTION_FILE": "r.json"}
                                ) == PolicyFiles(redaction=None, retention="r.json")
