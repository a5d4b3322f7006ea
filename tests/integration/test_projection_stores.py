"""The projection store's roles against the real PostgreSQL: each role's contract suite
(:mod:`tests.fixtures.projection_stores`), on a configuration and schemas of its own."""

from __future__ import annotations

import pytest

from projections.store import Store
from tests.fixtures.projection_stores import (
    CheckpointsContract,
    DeploymentLogContract,
    ErasuresContract,
    GenerationsContract,
    LivenessContract,
    RecordsContract,
    TreesContract,
)
from topics import TopicNames, TopicSettings

pytestmark = pytest.mark.integration


@pytest.fixture
def store_config(make_projection_config):
    """A configuration of its own (meta, views and generation schemas); the topics are only
    names here: nothing is read from Kafka."""
    return make_projection_config(TopicSettings(names=TopicNames("roles")))


@pytest.fixture
def store(store_config):
    with Store(store_config) as s:
        yield s


@pytest.fixture
def other(store_config):
    with Store(store_config) as s:
        yield s


def test_the_roles_share_one_connection(store):
    roles = (store.gens, store.liveness, store.records, store.trees, store.checkpoints,
             store.erasures, store.log)
    assert {id(role.db) for role in roles} == {id(store.db)}


class TestGenerations(GenerationsContract):
    pass


class TestLiveness(LivenessContract):
    pass


class TestRecords(RecordsContract):
    pass


class TestTrees(TreesContract):
    pass


class TestCheckpoints(CheckpointsContract):
    pass


class TestErasures(ErasuresContract):
    pass


class TestDeploymentLog(DeploymentLogContract):
    pass
