"""One settings module per service: the shared connection settings (server.settings), each
service's settings built on them, and the CLI's shared options (cli.settings). A bad value is
an error that names its variable; an empty value is unset, for every reader alike."""

import argparse

import pytest

from api.config import Settings as ApiSettings
from api.errors import ApiConfigError
from cli.settings import CliSettings, add_options, resolve
from projections.config import ProjectorConfig
from projections.errors import ProjectionError
from publisher.config import PublisherConfig
from server.settings import (DEFAULT_BOOTSTRAP, DEFAULT_DATABASE_URL, Connection,
                             SettingsError, add_connection_options, read)
from writer.config import WriterConfig

API_KEY = "k" * 8 + "Zq3-vT9_xL2pR7mN4bW8cY1dF6gH0jKs"


def test_connection_defaults_once():
    c = Connection.from_env({})
    assert (c.bootstrap, c.topic_prefix, c.database_url, c.views_schema) == (
        DEFAULT_BOOTSTRAP, "evidence", DEFAULT_DATABASE_URL, "evidence")
    assert c.names.log == "evidence.log"


def test_connection_empty_is_unset():
    env = {"EVIDENCE_KAFKA_BOOTSTRAP": "", "EVIDENCE_TOPIC_PREFIX": "",
           "EVIDENCE_DATABASE_URL": "", "EVIDENCE_PG_VIEWS_SCHEMA": ""}
    assert Connection.from_env(env) == Connection()


def test_connection_from_env_and_flags():
    env = {"EVIDENCE_KAFKA_BOOTSTRAP": "k:1", "EVIDENCE_TOPIC_PREFIX": "t1",
           "EVIDENCE_DATABASE_URL": "postgresql:///x", "EVIDENCE_PG_VIEWS_SCHEMA": "v1"}
    c = Connection.from_env(env)
    assert (c.bootstrap, c.topic_prefix, c.database_url, c.views_schema) == (
        "k:1", "t1", "postgresql:///x", "v1")
    flags = argparse.Namespace(bootstrap="k:2", topic_prefix=None, database_url=None,
                               views_schema="v2")
    assert c.with_args(flags) == Connection("k:2", "t1", "postgresql:///x", "v2")
    assert Connection.from_env(c.env()) == c


@pytest.mark.parametrize("env, named", [
    ({"EVIDENCE_PG_VIEWS_SCHEMA": "Views;drop"}, "EVIDENCE_PG_VIEWS_SCHEMA"),
    ({"EVIDENCE_TOPIC_PREFIX": " t"}, "EVIDENCE_TOPIC_PREFIX"),
])
def test_connection_bad_value_names_the_variable(env, named):
    with pytest.raises(SettingsError, match=named):
        Connection.from_env(env)


def test_optional_and_required():
    c = Connection.from_env({}, optional=("bootstrap",))
    assert c.bootstrap is None and c.database_url == DEFAULT_DATABASE_URL
    with pytest.raises(SettingsError, match="EVIDENCE_DATABASE_URL is not set; do this"):
        Connection.from_env({}, optional=("database_url",), required=("database_url",),
                            hint="do this")


@pytest.mark.parametrize("raw, conv, least, message", [
    ("x", int, None, "EVIDENCE_X='x' is not an integer"),
    ("1.5", int, None, "EVIDENCE_X='1.5' is not an integer"),
    ("1_0", int, None, "EVIDENCE_X='1_0' is not an integer"),
    ("0", int, 1, "EVIDENCE_X='0' must be at least 1"),
    ("abc", float, None, "EVIDENCE_X='abc' is not a number"),
    ("nan", float, None, "EVIDENCE_X='nan' is not a finite number"),
    ("0", float, 0.0, "EVIDENCE_X='0' must be positive"),
])
def test_read_names_the_variable(raw, conv, least, message):
    entry = ("EVIDENCE_X", conv) if least is None else ("EVIDENCE_X", conv, least)
    with pytest.raises(SettingsError) as e:
        read({"EVIDENCE_X": raw}, {"x": entry})
    assert str(e.value) == message


def test_read_converts_what_is_set_and_skips_the_rest():
    table = {"a": ("EVIDENCE_A", int, 0), "b": ("EVIDENCE_B", float), "c": ("EVIDENCE_C", str)}
    assert read({"EVIDENCE_A": "3", "EVIDENCE_B": "2.5", "EVIDENCE_C": ""}, table) == {
        "a": 3, "b": 2.5}


# -- every service builds on the same connection --------------------------------------------

def _api_env(**kw):
    return {"EVIDENCE_DATABASE_URL": "postgresql:///api", "EVIDENCE_API_KEY": API_KEY,
            "EVIDENCE_API_KEY_STREAMS": "*", **kw}


def test_views_schema_empty_means_the_default_in_every_service():
    env = {"EVIDENCE_PG_VIEWS_SCHEMA": ""}
    assert ProjectorConfig.from_env(env).views_schema == "evidence"
    assert PublisherConfig.from_env(env).views_schema == "evidence"
    assert ApiSettings.from_env(_api_env(**env)).views_schema == "evidence"
    args = argparse.Namespace(views_schema=None)
    assert resolve(args, env).views_schema == "evidence"


def test_every_service_reads_the_connection_alike():
    env = {"EVIDENCE_KAFKA_BOOTSTRAP": "k:9", "EVIDENCE_TOPIC_PREFIX": "p9",
           "EVIDENCE_DATABASE_URL": "postgresql:///d9", "EVIDENCE_PG_VIEWS_SCHEMA": "v9"}
    w, pr, pu = (WriterConfig.from_env(env), ProjectorConfig.from_env(env),
                 PublisherConfig.from_env(env))
    a = ApiSettings.from_env(_api_env(**env))
    assert {w.bootstrap, pr.bootstrap, pu.bootstrap, a.kafka_bootstrap} == {"k:9"}
    assert {w.topics.names.prefix, pr.topics.names.prefix, pu.topics.names.prefix,
            a.topic_prefix} == {"p9"}
    assert {pr.database_url, pu.database_url, a.database_url} == {"postgresql:///d9"}
    assert {pr.views_schema, pu.views_schema, a.views_schema} == {"v9"}


def test_the_api_needs_its_database_and_not_kafka():
    with pytest.raises(ApiConfigError, match="EVIDENCE_DATABASE_URL is not set"):
        ApiSettings.from_env({"EVIDENCE_API_KEY": API_KEY, "EVIDENCE_API_KEY_STREAMS": "*"})
    assert ApiSettings.from_env(_api_env()).kafka_bootstrap is None


@pytest.mark.parametrize("build, env, error, named", [
    (WriterConfig.from_env, {"EVIDENCE_WRITER_BATCH_MAX_MESSAGES": "0"}, ValueError,
     "EVIDENCE_WRITER_BATCH_MAX_MESSAGES"),
    (WriterConfig.from_env, {"EVIDENCE_WRITER_METRICS_PORT": "x"}, ValueError,
     "EVIDENCE_WRITER_METRICS_PORT"),
    (WriterConfig.from_env, {"EVIDENCE_PG_VIEWS_SCHEMA": "A B"}, ValueError,
     "EVIDENCE_PG_VIEWS_SCHEMA"),
    (ProjectorConfig.from_env, {"EVIDENCE_PROJECTOR_BATCH": "0"}, ProjectionError,
     "EVIDENCE_PROJECTOR_BATCH"),
    (ProjectorConfig.from_env, {"EVIDENCE_PROJECTOR_HEARTBEAT_S": "soon"}, ProjectionError,
     "EVIDENCE_PROJECTOR_HEARTBEAT_S"),
    (PublisherConfig.from_env, {"EVIDENCE_WITNESS_TIMEOUT_S": "0"}, ValueError,
     "EVIDENCE_WITNESS_TIMEOUT_S"),
    (PublisherConfig.from_env, {"EVIDENCE_LOG_CHECKPOINT_INTERVAL_S": "x"}, ValueError,
     "EVIDENCE_LOG_CHECKPOINT_INTERVAL_S"),
])
def test_a_service_setting_that_cannot_work_names_its_variable(build, env, error, named):
    with pytest.raises(error, match=named):
        build(env)


def test_metrics_host_is_a_setting():
    assert WriterConfig.from_env({}).metrics_host == "127.0.0.1"
    assert ProjectorConfig.from_env({"EVIDENCE_METRICS_HOST": "0.0.0.0"}).metrics_host == \
        "0.0.0.0"


# -- the CLI's shared options ----------------------------------------------------------------

def _parser(*names, **kw):
    p = argparse.ArgumentParser()
    add_options(p, *names, **kw)
    return p


def test_cli_options_flag_then_environment_then_default():
    p = _parser("bootstrap", "topic_prefix", "database_url", "views_schema", "api", "api_key",
                "timeout")
    env = {"EVIDENCE_KAFKA_BOOTSTRAP": "env:1", "EVIDENCE_API_URL": "http://env",
           "EVIDENCE_API_KEY": "env-key"}
    s = resolve(p.parse_args(["--bootstrap", "flag:1", "--timeout", "3"]), env)
    assert (s.bootstrap, s.api, s.api_key, s.timeout) == ("flag:1", "http://env", "env-key", 3.0)
    assert (s.topic_prefix, s.views_schema, s.database_url) == ("evidence", "evidence", None)
    assert s.need("bootstrap", "api", "api_key") is None
    missing = s.need("database_url")
    assert missing is not None and "--database-url" in missing \
        and "EVIDENCE_DATABASE_URL" in missing


def test_cli_resolution_reads_the_stack_env_under_the_process(monkeypatch, tmp_path):
    from cli import settings

    monkeypatch.setattr(settings, "stack_env", lambda stack=None: {
        "EVIDENCE_API_URL": "http://stack", "EVIDENCE_API_KEY": "stack-key"})
    s = resolve(_parser("api", "api_key").parse_args(["--api-key", "flag-key"]))
    assert (s.api, s.api_key) == ("http://stack", "flag-key")


def test_cli_bad_flag_value_names_it():
    p = _parser("views_schema")
    with pytest.raises(SettingsError, match="--views-schema"):
        resolve(p.parse_args(["--views-schema", "No"]), {})


def test_cli_timeout_default_is_the_commands():
    assert _parser("timeout", timeout=60.0).parse_args([]).timeout == 60.0
    assert resolve(_parser("timeout").parse_args(["--timeout", "0"]), {}).timeout == 0.0


def test_options_are_declared_once_for_services_and_cli():
    services, cli = argparse.ArgumentParser(), argparse.ArgumentParser()
    add_connection_options(services)
    add_options(cli, "bootstrap", "topic_prefix", "database_url", "views_schema")
    flags = lambda p: {o for a in p._actions for o in a.option_strings} - {"-h", "--help"}
    assert flags(services) == flags(cli) == {"--bootstrap", "--topic-prefix",
                                             "--database-url", "--views-schema"}
    with pytest.raises(ValueError, match="no shared option"):
        add_options(cli, "bootstrapp")


def test_cli_settings_is_what_commands_read():
    s = CliSettings(Connection(bootstrap=None), api="http://x")
    assert s.need("api") is None and "no Kafka" in str(s.need("bootstrap"))
