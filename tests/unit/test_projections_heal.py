"""Which failures the projector rides out (new connections, re-seek) and which end it."""

import psycopg
import pytest
from confluent_kafka import KafkaError
from psycopg import errors as pg

from projections.errors import LogError, ProjectionError, RebuildMismatch, StoreError
from projections.service import heals
from projections.store import is_transient


@pytest.mark.parametrize("error, transient", [
    (psycopg.OperationalError("server closed the connection unexpectedly"), True),
    (psycopg.OperationalError("connection refused"), True),
    (psycopg.InterfaceError("the connection is closed"), True),
    (pg.AdminShutdown("terminating connection due to administrator command"), True),  # 57P01
    (pg.CannotConnectNow("the database system is starting up"), True),               # 57P03
    (pg.SerializationFailure("could not serialize access"), True),                   # 40001
    (pg.DeadlockDetected("deadlock detected"), True),                                # 40P01
    (pg.LockNotAvailable("lock timeout"), True),                                     # 55P03
    (pg.UndefinedTable("relation does not exist"), False),                           # 42P01
    (pg.UniqueViolation("duplicate key"), False),                                    # 23505
    (pg.InvalidPassword("password authentication failed"), False),                   # 28P01
], ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v))
def test_a_psycopg_error_is_transient_when_the_connection_or_server_failed(error, transient):
    assert is_transient(error) is transient


def test_the_projector_heals_kafka_errors_and_transient_database_errors_only():
    assert heals(LogError("Kafka: list topics: transport", code=KafkaError._TRANSPORT))
    assert heals(StoreError("PostgreSQL: lost", transient=True))
    assert not heals(StoreError("PostgreSQL: relation does not exist", sqlstate="42P01"))
    assert not heals(RebuildMismatch("g2", "g1", ["x"]))
    assert not heals(ProjectionError("anything else"))


def test_synchronous_commit_is_off_by_default_and_checked():
    from projections.config import ProjectorConfig
    from projections.errors import ProjectionError

    assert ProjectorConfig().synchronous_commit == "off"
    cfg = ProjectorConfig.from_env({"EVIDENCE_PROJECTOR_SYNCHRONOUS_COMMIT": "on"})
    assert cfg.synchronous_commit == "on"
    with pytest.raises(ProjectionError, match="synchronous_commit 'maybe'"):
        ProjectorConfig(synchronous_commit="maybe").checked()
