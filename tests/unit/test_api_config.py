import json
import secrets
import uuid

import pytest

from api import ApiConfigError, Keyring, Scope, Settings
from api.auth import key_weakness, parse_patterns
from api.config import load_keyring

URL = "postgresql://u:p@127.0.0.1:5432/db"
# Keys that pass api.auth.key_weakness (32+ bytes, ~128 bits): what the checks now require.
K1 = "k1-6f1d0c9a2b7e4f3a8d5c6b1e0f9a2d7c"
K = "k-3a9e1f7c0b2d4e6f8a1c3e5b7d9f0a2c"
A_KEY = "a-key-5b8d0f2a4c6e8b1d3f5a7c9e0b2d4f6a"
G_KEY = "g-key-9c1e3a5f7b0d2f4a6c8e1b3d5f7a9c0e"


def env(**kw):
    return {"EVIDENCE_DATABASE_URL": URL, **kw}


def keys_file(path, content):
    """A keys file as the API accepts it: readable by its owner only."""
    path.write_text(content)
    path.chmod(0o600)
    return path


def test_dev_key_and_streams_from_env():
    s = Settings.from_env(env(EVIDENCE_API_KEY=K1, EVIDENCE_API_KEY_STREAMS="acme:*, globex:x"))
    key = s.keyring.lookup(K1)
    assert key is not None and key.name == "dev"
    assert key.scope.allows("acme:chat") and key.scope.allows("globex:x")
    assert not key.scope.allows("globex:y") and not key.scope.allows("acm")
    assert s.views_schema == "evidence" and s.max_lag == 10_000


def test_views_schema_and_numbers_from_env():
    s = Settings.from_env(env(EVIDENCE_API_KEY=K, EVIDENCE_API_KEY_STREAMS="*",
                              EVIDENCE_PG_VIEWS_SCHEMA="tv_abc", EVIDENCE_API_MAX_LAG="5",
                              EVIDENCE_API_POOL_MIN="1", EVIDENCE_API_POOL_MAX="3"))
    assert (s.views_schema, s.max_lag, s.pool_min, s.pool_max) == ("tv_abc", 5, 1, 3)
    assert s.max_wait_ms == 5_000
    assert Settings.from_env(env(EVIDENCE_API_KEY=K, EVIDENCE_API_KEY_STREAMS="*",
                                 EVIDENCE_API_MAX_WAIT_MS="0")).max_wait_ms == 0
    assert s.max_audits_per_key == 2
    assert Settings.from_env(env(EVIDENCE_API_KEY=K, EVIDENCE_API_KEY_STREAMS="*",
                                 EVIDENCE_API_MAX_AUDITS_PER_KEY="5")).max_audits_per_key == 5


def test_keys_file_adds_named_keys(tmp_path):
    f = keys_file(tmp_path / "keys.json",
                  json.dumps([{"key": A_KEY, "streams": ["acme:*"], "name": "acme"},
                              {"key": G_KEY, "streams": ["globex:one", "globex:two"]}]))
    ring = load_keyring({"EVIDENCE_API_KEYS_FILE": str(f)})
    assert ring.names == ["acme", "key-1"]
    assert ring.lookup(A_KEY).scope.allows("acme:x")
    assert not ring.lookup(G_KEY).scope.allows("globex:three")
    assert ring.lookup("nope") is None and ring.lookup("") is None


def test_dev_key_and_keys_file_combine(tmp_path):
    f = keys_file(tmp_path / "keys.json",
                  json.dumps([{"key": A_KEY, "streams": ["*"], "name": "ops"}]))
    ring = load_keyring({"EVIDENCE_API_KEY": K1, "EVIDENCE_API_KEY_STREAMS": "x",
                         "EVIDENCE_API_KEYS_FILE": str(f)})
    assert ring.names == ["dev", "ops"]


@pytest.mark.parametrize("variables, words", [
    ({}, "no API key configured"),
    ({"EVIDENCE_API_KEY": K}, "EVIDENCE_API_KEY_STREAMS is not"),
    ({"EVIDENCE_API_KEY": K, "EVIDENCE_API_KEY_STREAMS": ""}, "no stream patterns"),
    ({"EVIDENCE_API_KEY": K, "EVIDENCE_API_KEY_STREAMS": "a*b"}, "not a stream pattern"),
    ({"EVIDENCE_API_KEY": K, "EVIDENCE_API_KEY_STREAMS": "bad stream"}, "not a stream pattern"),
    ({"EVIDENCE_API_KEY": K, "EVIDENCE_API_KEY_STREAMS": "%"}, "not a stream pattern"),
    ({"EVIDENCE_API_KEY": K, "EVIDENCE_API_KEY_STREAMS": "*", "EVIDENCE_API_MAX_LAG": "x"},
     "not an integer"),
    ({"EVIDENCE_API_KEY": K, "EVIDENCE_API_KEY_STREAMS": "*",
      "EVIDENCE_PG_VIEWS_SCHEMA": 'ev"; drop'}, "not a plain lowercase"),
    ({"EVIDENCE_API_KEY": K, "EVIDENCE_API_KEY_STREAMS": "*", "EVIDENCE_API_POOL_MIN": "5",
      "EVIDENCE_API_POOL_MAX": "2"}, "pool sizes"),
    ({"EVIDENCE_API_KEY": K, "EVIDENCE_API_KEY_STREAMS": "*",
      "EVIDENCE_API_MAX_VERIFY_BYTES": "0"}, "must be at least 1"),
    ({"EVIDENCE_API_KEY": K, "EVIDENCE_API_KEY_STREAMS": "*",
      "EVIDENCE_API_HEADER_TIMEOUT": "inf"}, "positive number of seconds"),
    ({"EVIDENCE_API_KEY": K, "EVIDENCE_API_KEY_STREAMS": "*",
      "EVIDENCE_API_MAX_WAIT_MS": "-1"}, "EVIDENCE_API_MAX_WAIT_MS=-1 must be at least 0"),
    ({"EVIDENCE_API_KEY": K, "EVIDENCE_API_KEY_STREAMS": "*",
      "EVIDENCE_API_MAX_WAIT_MS": "5s"}, "EVIDENCE_API_MAX_WAIT_MS='5s' is not an integer"),
    ({"EVIDENCE_API_KEY": K, "EVIDENCE_API_KEY_STREAMS": "*",
      "EVIDENCE_API_MAX_AUDITS_PER_KEY": "0"},
     "EVIDENCE_API_MAX_AUDITS_PER_KEY=0 must be at least 1"),
])
def test_bad_settings_say_what_to_fix(variables, words):
    with pytest.raises(ApiConfigError, match=words):
        Settings.from_env(env(**variables))


def test_database_url_is_required():
    with pytest.raises(ApiConfigError, match="EVIDENCE_DATABASE_URL"):
        Settings.from_env({"EVIDENCE_API_KEY": K, "EVIDENCE_API_KEY_STREAMS": "*"})


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
    f = keys_file(tmp_path / "keys.json", content)
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


# -- key strength and the keys file's mode -----------------------------------------------------

@pytest.mark.parametrize("key, words", [
    ("k", "1 bytes long"),
    ("x" * 31, "31 bytes long"),
    (" " * 40, "whitespace"),
    ("\t" * 40, "whitespace"),
    ("a" * 16 + " " + "b" * 16, "whitespace"),
    ("abc\x00" * 10, "control"),
    ("a" * 40, "distinct characters"),
    ("abababababababababababababababab", "distinct characters"),
    ("abcdefgh" * 5, "repeated"),
    ("1" * 10 + "2" * 10 + "3" * 10 + "45678", "estimated entropy"),  # 35 decimal digits
    ("12345678901234567890123456789012", "estimated entropy"),
])
def test_weak_dev_keys_are_refused_at_start(key, words):
    with pytest.raises(ApiConfigError, match=f"EVIDENCE_API_KEY is too weak: .*{words}"):
        Settings.from_env(env(EVIDENCE_API_KEY=key, EVIDENCE_API_KEY_STREAMS="*"))


def test_a_weak_admin_key_is_named_as_one(tmp_path):
    path = keys_file(tmp_path / "keys.json", json.dumps([{"key": A_KEY, "streams": ["*"]}]))
    with pytest.raises(ApiConfigError, match="^admin key 2 of EVIDENCE_API_ADMIN_KEYS is too weak"):
        load_keyring(env(EVIDENCE_API_KEY=K, EVIDENCE_API_KEY_STREAMS="*",
                         EVIDENCE_API_KEYS_FILE=str(path),
                         EVIDENCE_API_ADMIN_KEYS=f"{A_KEY}, short"))


def test_a_weak_key_in_the_keys_file_is_named(tmp_path):
    f = keys_file(tmp_path / "keys.json", json.dumps([
        {"key": A_KEY, "streams": ["*"], "name": "ops"},
        {"key": "short", "streams": ["*"], "name": "intern"}]))
    with pytest.raises(ApiConfigError, match="'intern' of EVIDENCE_API_KEYS_FILE is too weak"):
        load_keyring({"EVIDENCE_API_KEYS_FILE": str(f)})


@pytest.mark.parametrize("make", [
    # how the devstack (devstack/stack.py), the test fixtures (pipeline, rebuild, harness)
    # and the docs' recipe make keys: each must pass
    lambda: "dev-" + secrets.token_hex(16),
    lambda: f"test-{uuid.uuid4().hex}",
    lambda: f"k-{uuid.uuid4().hex}",
    lambda: f"harness-{uuid.uuid4().hex}",
    lambda: secrets.token_hex(16),
    lambda: secrets.token_urlsafe(32),
    lambda: uuid.uuid4().hex,
])
def test_generated_keys_pass(make):
    for _ in range(200):
        key = make()
        assert key_weakness(key) is None, key


def test_the_devstack_key_passes():
    from devstack.stack import __file__ as stack_py

    source = open(stack_py).read()
    assert '"dev-" + secrets.token_hex(16)' in source  # what the next test generates
    s = Settings.from_env(env(EVIDENCE_API_KEY="dev-" + secrets.token_hex(16),
                              EVIDENCE_API_KEY_STREAMS="*"))
    assert s.keyring.names == ["dev"]


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606, 0o666])
def test_a_keys_file_others_may_read_is_refused(tmp_path, mode):
    f = keys_file(tmp_path / "keys.json", json.dumps([{"key": A_KEY, "streams": ["*"]}]))
    f.chmod(mode)
    with pytest.raises(ApiConfigError, match=rf"mode {mode:04o}\); .*chmod 600"):
        load_keyring({"EVIDENCE_API_KEYS_FILE": str(f)})


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_keys_file_only_its_owner_may_read_is_accepted(tmp_path, mode):
    f = keys_file(tmp_path / "keys.json", json.dumps([{"key": A_KEY, "streams": ["*"]}]))
    f.chmod(mode)
    assert load_keyring({"EVIDENCE_API_KEYS_FILE": str(f)}).names == ["key-0"]


def test_limits_and_timeouts_from_env():
    s = Settings.from_env(env(EVIDENCE_API_KEY=K, EVIDENCE_API_KEY_STREAMS="*",
                              EVIDENCE_API_MAX_BODY_BYTES="1000",
                              EVIDENCE_API_MAX_VERIFY_BYTES="2000",
                              EVIDENCE_API_BODY_TIMEOUT="3", EVIDENCE_API_HEADER_TIMEOUT="4",
                              EVIDENCE_API_KEEP_ALIVE_TIMEOUT="5.5",
                              EVIDENCE_API_MAX_HEADER_BYTES="8192"))
    assert (s.max_body_bytes, s.max_verify_bytes, s.body_timeout, s.header_timeout,
            s.keep_alive_timeout, s.max_header_bytes) == (1000, 2000, 3.0, 4.0, 5.5, 8192)
    d = Settings.from_env(env(EVIDENCE_API_KEY=K, EVIDENCE_API_KEY_STREAMS="*"))
    assert (d.max_body_bytes, d.max_verify_bytes) == (1 << 20, 8 << 20)
