"""A rebuild's bulk load (``projections.bulk``) against real PostgreSQL: batch for batch it
writes exactly what ``Store.apply`` writes (rows, heads, findings, tree nodes, trees,
positions), and a write that fails in its thread fails the load instead of being lost."""

from __future__ import annotations

import dataclasses
import os

import psycopg
import pytest

from evidence_contract import GENESIS
from projections.bulk import BulkLoad
from projections.errors import StoreError
from projections.fold import decode_message
from projections.store import Store
from tests.fixtures.log import T0, chain, make_body, seal_record

pytestmark = pytest.mark.integration

TOPIC = "bulk-test.log"


def _positions(records, partitions=3):
    """``(partition, offset, value)`` of each record, spread over ``partitions`` by stream."""
    nxt = [0] * partitions
    out = []
    for r in records:
        p = sum(r.stream.encode()) % partitions
        out.append((p, nxt[p], r.value))
        nxt[p] += 1
    return out


def _log():
    """Chains over 7 streams with what a fold flags: a gap, a broken link, a duplicate seq,
    an event_id reused across streams and batches, and bytes that are no record."""
    recs = chain({f"s{i}": 30 for i in range(7)}, response=os.urandom(200))
    eid = make_body("x")["event_id"]
    recs.insert(5, seal_record(make_body("dup-a", 1, event_id=eid), 1, GENESIS, T0 + 100))
    recs.append(seal_record(make_body("dup-b", 1, event_id=eid), 1, GENESIS, T0 + 50))
    recs.append(seal_record(make_body("s1", 35), 35, b"\x01" * 32, T0 + 500))  # gap, bad link
    recs.append(dataclasses.replace(recs[10]))  # the same record again
    msgs = _positions(recs)
    msgs.insert(40, (1, 10_000, b"\x00not a record"))
    return msgs


def _tables(cfg, gen):
    sql = {
        "records": "select * from {g}.records order by log_partition, log_offset",
        "heads": "select * from {g}.heads order by stream",
        "findings": "select stream, seq, kind, detail, log_partition, log_offset "
                    "from {g}.findings order by log_partition, log_offset, kind",
        "tree_nodes": "select * from {g}.tree_nodes order by stream, level, idx",
        "trees": "select * from {g}.trees order by stream",
        "positions": "select topic, partition, next_offset, high_watermark "
                     "from {g}.positions order by topic, partition",
    }
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        return {k: conn.execute(v.format(g=f'"{gen}"')).fetchall() for k, v in sql.items()}


def _batches(msgs, size):
    expected = {0: 0, 1: 0, 2: 0}
    for i in range(0, len(msgs), size):
        batch = msgs[i:i + size]
        yield dict(expected), batch, {}, {p: 20_000 for p in expected}
        for p, o, _ in batch:
            expected[p] = max(expected[p], o + 1)


@pytest.fixture(params=["one connection", "two connections"])
def split(request, monkeypatch):
    """Each test of a bulk load runs with every batch on one connection, and with every batch
    of two records or more split over two (``projections.bulk.SPLIT_MIN``)."""
    if request.param == "two connections":
        monkeypatch.setattr("projections.bulk.SPLIT_MIN", 2)
    return request.param


def test_the_bulk_load_writes_what_apply_writes(projection_config, split):
    cfg = projection_config
    msgs = _log()
    with Store(cfg) as store:
        by_apply = store.create_generation(indexes=False)
        by_bulk = store.create_generation(indexes=False)
        expected = {0: 0, 1: 0, 2: 0}
        for _, batch, reached, marks in _batches(msgs, 17):
            folded = store.apply(by_apply, TOPIC, expected,
                                 [decode_message(p, o, v) for p, o, v in batch], reached, marks,
                                 follow_live=False)
            expected = folded.next_offsets
        bulk = BulkLoad(store, by_bulk, TOPIC)
        expected = {0: 0, 1: 0, 2: 0}
        findings = []
        try:
            for _, batch, reached, marks in _batches(msgs, 17):
                folded = bulk.apply(expected, batch, reached, marks)
                expected, findings = folded.next_offsets, findings + folded.findings
            bulk.close()
        finally:
            bulk.stop()
    a, b = _tables(cfg, by_apply), _tables(cfg, by_bulk)
    assert {k: len(v) for k, v in a.items()} == {k: len(v) for k, v in b.items()}
    for table in a:
        assert a[table] == b[table], table
    kinds = {f[2] for f in a["findings"]}
    assert {"duplicate_event_id", "undecodable"} <= kinds and len(kinds) >= 4, kinds
    assert sorted(f.kind for f in findings) == sorted(f[2] for f in b["findings"])
    assert expected == {p: n for _, p, n, _ in b["positions"]}


@pytest.mark.parametrize("split_min, failure", [
    (10_000, "the writer's write"),  # one connection
    (2, "the writer's write"),  # two: the side's half, committed, would be left behind
    (2, "the side's write"),  # its backend terminated: the writer's half must go too
])
def test_a_batch_whose_write_fails_stores_nothing_and_fails_the_load(
        projection_config, monkeypatch, split_min, failure):
    monkeypatch.setattr("projections.bulk.SPLIT_MIN", split_min)
    cfg = projection_config
    msgs = _positions(chain({"a": 40, "b": 40}))
    with Store(cfg) as store:
        gen = store.create_generation(indexes=False)
        bulk = BulkLoad(store, gen, TOPIC)
        try:
            batches = list(_batches(msgs, 10))
            expected, batch, reached, marks = batches[0]
            bulk.apply(expected, batch, reached, marks)
            bulk.drain()
            with psycopg.connect(cfg.database_url, autocommit=True) as conn:
                if failure == "the writer's write":
                    conn.execute(f'drop table "{gen}".tree_nodes')
                else:
                    conn.execute("select pg_terminate_backend(%s)",
                                 (bulk._side.store.conn.info.backend_pid,))
                positions = conn.execute(f'select partition, next_offset from "{gen}".positions '
                                         f"order by 1").fetchall()
            with pytest.raises(StoreError, match="tree_nodes" if "writer" in failure else None):
                for expected, batch, reached, marks in batches[1:]:
                    bulk.apply(expected, batch, reached, marks)
                bulk.close()
            # Nothing of the failed batch was stored, and the first batch stands.
            with psycopg.connect(cfg.database_url, autocommit=True) as conn:
                assert conn.execute(f'select count(*) from "{gen}".records').fetchone()[0] == 10
                assert conn.execute(f'select partition, next_offset from "{gen}".positions '
                                    f"order by 1").fetchall() == positions
        finally:
            bulk.stop()
    assert not bulk._thread.is_alive() and not bulk._side._thread.is_alive()


def test_a_generation_with_checkpoints_is_not_bulk_loaded(projection_config):
    cfg = projection_config
    with Store(cfg) as store:
        gen = store.create_generation(indexes=False)
        with psycopg.connect(cfg.database_url, autocommit=True) as conn:
            conn.execute(f'insert into "{gen}".checkpoints (stream, tree_size, root, note, '
                         f"log_partition, log_offset) values ('a', 1, '\\x00', '\\x00', 0, 0)")
        with pytest.raises(StoreError, match="holds checkpoints"):
            BulkLoad(store, gen, TOPIC)


def test_indexes_built_after_a_bulk_load_are_those_of_a_generation_made_with_them(
        projection_config):
    """create_indexes builds them side by side (keys as unique indexes, then attached): the
    same indexes and constraints, under the same names, as a generation created with its
    indexes."""
    cfg = projection_config

    def shape(gen):
        with psycopg.connect(cfg.database_url, autocommit=True) as conn:
            idx = conn.execute(
                "select tablename, indexname, replace(indexdef, %s, 'G.') from pg_indexes "
                "where schemaname = %s order by 1, 2", (f"{gen}.", gen)).fetchall()
            keys = conn.execute(
                "select c.conrelid::regclass::text, c.conname, c.contype, "
                "pg_get_constraintdef(c.oid) from pg_constraint c "
                "join pg_namespace n on n.oid = c.connamespace where n.nspname = %s "
                "order by 2", (gen,)).fetchall()
        return idx, [(t.split(".")[-1], n, ty, d) for t, n, ty, d in keys]

    with Store(cfg) as store:
        made = store.create_generation(indexes=True)
        bulk = store.create_generation(indexes=False)
        bare_idx, bare_keys = shape(bulk)
        assert not any(n in ("records_pkey", "tree_nodes_pkey") for _, n, _ in bare_idx)
        store.create_indexes(bulk)
    assert shape(bulk) == shape(made)
    assert ("tree_nodes", "tree_nodes_pkey", "p", "PRIMARY KEY (stream, level, idx)") in shape(bulk)[1]


@pytest.mark.parametrize("bodies", [True, False])
def test_the_summary_a_bulk_load_keeps_is_the_one_summaries_reads_back(projection_config,
                                                                        split, bodies):
    """What ``projections.summary`` folds from the rows a load writes is byte for byte what
    ``RecordStore.summaries`` computes from the table (a rebuild compares one with the other
    generation's); a log whose seqs do not rise along it gives no summary."""
    from projections.summary import RunningSummaries

    cfg = projection_config
    clean = _positions(chain({f"s{i}": 30 for i in range(7)}, response=os.urandom(200)))
    with Store(cfg) as store:
        for msgs, usable in ((clean, True), (_log(), False)):
            gen = store.create_generation(indexes=False)
            running = RunningSummaries(bodies)
            bulk = BulkLoad(store, gen, TOPIC, running)
            expected = {0: 0, 1: 0, 2: 0}
            try:
                for _, batch, reached, marks in _batches(msgs, 17):
                    expected = bulk.apply(expected, batch, reached, marks).next_offsets
                bulk.close()
            finally:
                bulk.stop()
            assert running.usable is usable
            if usable:
                got = running.result()
                assert len(got[0]) == 7 and sum(c for c, _, _ in got[0].values()) == 210
                assert got == store.records.summaries(gen, expected, bodies)
