import json

import pytest

from api import ApiConfigError, Keyring, Scope, Settings
from api.auth import parse_patterns
from api.config import load_keyring

URL = "postgresql://u:p@127.0.0.1:5432/db"


def env(**kw):
    return {"EVIDENCE_DATABASE_URL": URL, **kw}


def test_dev_key_and_streams_from_env():
    s = Settings.from_env(env(EVIDENCE_API_KEY="k1", EVIDENCE_API_KEY_STREAMS="acme:*, globex:x"))
    key = s.keyring.lookup("k1")
    assert key is not None and key.name == "dev"
    assert key.scope.allows("acme:chat") and key.scope.allows("globex:x")
    assert not key.scope.allows("globex:y") and not key.scope.allows("acm")
    assert s.views_schema == "evidence" and s.max_lag == 10_000


def test_views_schema_and_numbers_from_env():
    s = Settings.from_env(env(EVIDENCE_API_KEY="k", EVIDENCE_API_KEY_STREAMS="*",
                              EVIDENCE_PG_VIEWS_SCHEMA="tv_abc", EVIDENCE_API_MAX_LAG="5",
                              EVIDENCE_API_POOL_MIN="1", EVIDENCE_API_POOL_MAX="3"))
    assert (s.views_schema, s.max_lag, s.pool_min, s.pool_max) == ("tv_abc", 5, 1, 3)


def test_keys_file_adds_named_keys(tmp_path):
    f = tmp_path / "keys.json"
    f.write_text(json.dumps([{"key": "a-key", "streams": ["acme:*"], "name": "acme"},
                             {"key": "g-key", "streams": ["globex:one", "globex:two"]}]))
    ring = load_keyring({"EVIDENCE_API_KEYS_FILE": str(f)})
    assert ring.names == ["acme", "key-1"]
    assert ring.lookup("a-key").scope.allows("acme:x")
    assert not ring.lookup("g-key").scope.allows("globex:three")
    assert ring.lookup("nope") is None and ring.lookup("") is None


def test_dev_key_and_keys_file_combine(tmp_path):
    f = tmp_path / "keys.json"
    f.write_text(json.dumps([{"key": "a", "streams": ["*"], "name": "ops"}]))
    ring = load_keyring({"EVIDENCE_API_KEY": "d", "EVIDENCE_API_KEY_STREAMS": "x",
                         "EVIDENCE_API_KEYS_FILE": str(f)})
    assert ring.names == ["dev", "ops"]


@pytest.mark.parametrize("variables, words", [
    ({}, "no API key configured"),
    ({"EVIDENCE_API_KEY": "k"}, "EVIDENCE_API_KEY_STREAMS is not"),
    ({"EVIDENCE_API_KEY": "k", "EVIDENCE_API_KEY_STREAMS": ""}, "no stream patterns"),
    ({"EVIDENCE_API_KEY": "k", "EVIDENCE_API_KEY_STREAMS": "a*b"}, "not a stream pattern"),
    ({"EVIDENCE_API_KEY": "k", "EVIDENCE_API_KEY_STREAMS": "bad stream"}, "not a stream pattern"),
    ({"EVIDENCE_API_KEY": "k", "EVIDENCE_API_KEY_STREAMS": "%"}, "not a stream pattern"),
    ({"EVIDENCE_API_KEY": "k", "EVIDENCE_API_KEY_STREAMS": "*", "EVIDENCE_API_MAX_LAG": "x"},
     "not an integer"),
    ({"EVIDENCE_API_KEY": "k", "EVIDENCE_API_KEY_STREAMS": "*",
      "EVIDENCE_PG_VIEWS_SCHEMA": 'ev"; drop'}, "not a plain lowercase"),
    ({"EVIDENCE_API_KEY": "k", "EVIDENCE_API_KEY_STREAMS": "*", "EVIDENCE_API_POOL_MIN": "5",
      "EVIDENCE_API_POOL_MAX": "2"}, "pool sizes"),
])
def test_bad_settings_say_what_to_fix(variables, words):
    with pytest.raises(ApiConfigError, match=words):
        Settings.from_env(env(**variables))


def test_database_url_is_required():
    with pytest.raises(ApiConfigError, match="EVIDENCE_DATABASE_URL"):
        Settings.from_env({"EVIDENCE_API_KEY": "k", "EVIDENCE_API_KEY_STREAMS": "*"})


@pytest.mark.parametrize("content, words", [
    ("not json", "not JSON"),
    ('{"key": "k"}', "expected a JSON list"),
    ('["k"]', "expected an object"),
    ('[{"key": "", "streams": ["*"]}]', "'key' must be a non-empty string"),
    ('[{"key": "k", "streams": "acme:*"}]', "'streams' must be a list"),
    ('[{"key": "k", "streams": []}]', "no stream patterns"),
    ('[{"key": "k", "streams": [1]}]', "must be strings"),
    ('[{"key": "k", "streams": ["*"], "scope": 1}]', "unknown field"),
    ('[{"key": "k", "streams": ["*"]}, {"key": "k", "streams": ["a"]}]', "are the same key"),
])
def test_bad_keys_file_says_what_to_fix(tmp_path, content, words):
    f = tmp_path / "keys.json"
    f.write_text(content)
    with pytest.raises(ApiConfigError, match=words):
        load_keyring({"EVIDENCE_API_KEYS_FILE": str(f)})


def test_missing_keys_file_is_a_config_error(tmp_path):
    with pytest.raises(ApiConfigError, match="cannot read"):
        load_keyring({"EVIDENCE_API_KEYS_FILE": str(tmp_path / "absent.json")})


def test_keyring_keeps_only_digests():
    ring = Keyring([("n", "secret-key-value", ["*"])])
    assert "secret-key-value" not in repr(ring._keys)


def test_scope_star_allows_everything_and_filters_nothing():
    s = Scope.of(["*"])
    assert s.allows("anything:at-all") and s.sql() == ("true", [])


def test_scope_sql_escapes_underscore_in_prefixes():
    cond, params = Scope.of(["a_b:*", "exact"]).sql()
    assert "like any" in cond
    assert params == [["exact"], [r"a\_b:%"]]


def test_parse_patterns_trims_and_drops_empties():
    assert parse_patterns(" acme:* ,, globex:x ", "X") == ("acme:*", "globex:x")
