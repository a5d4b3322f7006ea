from projections.config import ProjectorConfig
from projections.ddl import generation_sql, index_sql

import pytest

from projections.errors import ProjectionError


def test_a_generation_without_indexes_plus_its_indexes_is_the_whole_schema():
    full, bare, idx = generation_sql("g1"), generation_sql("g1", indexes=False), index_sql("g1")
    assert "create index" not in bare.lower() and "unique index" not in bare.lower()
    assert "primary key" in bare
    assert idx.lower().count("create index") == full.lower().count("create index") == 4
    assert "create unique index records_pkey on \"g1\".records (log_partition, log_offset)" in idx
    assert "add constraint records_pkey primary key using index records_pkey" in idx
    assert sorted(full.splitlines()) == sorted((bare + idx).splitlines())
    assert '"g1".records' in full and "{gen}" not in full


def test_config_reads_env_and_flags_win():
    env = {"EVIDENCE_PG_META_SCHEMA": "m1", "EVIDENCE_PG_VIEWS_SCHEMA": "v1",
           "EVIDENCE_PG_GENERATION_PREFIX": "p1_g", "EVIDENCE_TOPIC_PREFIX": "x",
           "EVIDENCE_PROJECTOR_METRICS_PORT": "0"}
    cfg = ProjectorConfig.from_env(env)
    assert (cfg.meta_schema, cfg.views_schema, cfg.generation_prefix, cfg.log_topic,
            cfg.metrics_port) == ("m1", "v1", "p1_g", "x.log", 0)

    class Args:
        meta_schema = "m2"
        topic_prefix = "y"

    cfg2 = cfg.with_args(Args())
    assert (cfg2.meta_schema, cfg2.views_schema, cfg2.log_topic) == ("m2", "v1", "y.log")
    assert ProjectorConfig.from_env(cfg2.env()) == cfg2


def test_config_refuses_names_unsafe_in_sql():
    with pytest.raises(ProjectionError):
        ProjectorConfig(meta_schema='x"; drop table y; --').checked()


def test_a_bulk_load_s_keys_are_built_as_unique_indexes_then_attached():
    from projections.ddl import index_statements

    builds, attaches = index_statements("g1")
    assert not any("primary key" in b for b in builds)
    assert 'create unique index records_pkey on "g1".records (log_partition, log_offset)' in builds
    assert 'create unique index tree_nodes_pkey on "g1".tree_nodes (stream, level, idx)' in builds
    assert attaches == [
        'alter table "g1".records add constraint records_pkey primary key using index records_pkey',
        'alter table "g1".tree_nodes add constraint tree_nodes_pkey primary key using index '
        'tree_nodes_pkey']
    assert sum(b.startswith("create index on") for b in builds) == 4
