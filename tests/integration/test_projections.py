"""The projector against real Kafka and PostgreSQL: rows equal the log, positions in PG,
restart without duplicates, findings."""

import dataclasses
import hashlib
import os

import psycopg
import pytest

from evidence_contract import GENESIS
from tests.fixtures.log import (T0, heads_of, make_body, running_projector, seal_record,
                                 wait_until)

pytestmark = pytest.mark.integration


def q(cfg, sql, params=()):
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        return conn.execute(sql.format(v=f'"{cfg.views_schema}"', m=f'"{cfg.meta_schema}"'),
                            params).fetchall()


def count(cfg):
    try:
        return q(cfg, "select count(*) from {v}.records")[0][0]
    except psycopg.errors.UndefinedTable:
        return 0


def test_projects_a_chain_and_resumes_from_stored_positions(projection_config, topics,
                                                            produce_chain):
    cfg = projection_config
    recs = produce_chain(topics, streams={"a": 30, "b": 20, "c": 10}, response=os.urandom(700))
    with running_projector(cfg):
        wait_until("60 records", lambda: count(cfg) == 60)
        by_pos = {(r.partition, r.offset): r for r in recs}
        rows = q(cfg, "select log_partition, log_offset, stream, seq, record_bytes, "
                      "response_bytes, request_bytes, record_digest, prev_digest, content_key "
                      "from {v}.records")
        for p, o, stream, seq, value, response, request, digest, prev, key in rows:
            r = by_pos[(p, o)]
            body = r.record["body"]
            assert (stream, seq, value, digest, prev) == (
                r.stream, r.seq, r.value, r.record_digest, r.prev_digest)
            assert (response, request, key) == (
                body["response_bytes"], body["request_bytes"], body["content_key"])
        heads = {s: (seq, d, n) for s, seq, d, n in
                 q(cfg, "select stream, seq, record_digest, record_count from {v}.heads")}
        assert heads == {s: (seq, d, n) for (s, (seq, d)), n in
                         zip(sorted(heads_of(recs).items()), (30, 20, 10))}
        ends = {}
        for r in recs:
            ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
        wait_until("positions at the log's end", lambda: {
            p: n for p, n in q(cfg, "select partition, next_offset from {v}.positions")
            if n} == ends)
        assert q(cfg, "select count(*) from {v}.findings") == [(0,)]
        gen = q(cfg, "select generation from {m}.live")[0][0]
        assert q(cfg, "select count(*) from {m}.generations where state = 'live'") == [(1,)]

    more = produce_chain(topics, streams={"a": 5, "c": 5}, start=heads_of(recs))
    with running_projector(cfg):
        wait_until("70 records", lambda: count(cfg) == 70)
    assert q(cfg, "select count(distinct (log_partition, log_offset)) from {v}.records") == [(70,)]
    assert q(cfg, "select count(*) from {v}.findings") == [(0,)]
    assert q(cfg, "select generation from {m}.live")[0][0] == gen
    assert dict(q(cfg, "select stream, seq from {v}.heads")) == {"a": 35, "b": 20, "c": 15}
    assert {(r.partition, r.offset) for r in recs + more} == set(
        q(cfg, "select log_partition, log_offset from {v}.records"))


def test_transactional_log_reaches_zero_lag(projection_config, topics, produce_chain):
    # The writer produces in transactions: commit markers take offsets. Positions must still
    # reach the partition ends, so lag (high_watermark - next_offset) comes to 0.
    cfg = projection_config
    produce_chain(topics, streams={"a": 10, "b": 10}, transactional=True)
    produce_chain(topics, streams={"c": 10}, transactional=True)
    with running_projector(cfg):
        wait_until("30 records", lambda: count(cfg) == 30)
        wait_until("zero lag", lambda: q(
            cfg, "select sum(high_watermark - next_offset), sum(high_watermark) "
                 "from {v}.positions")[0] == (0, 33))


def test_findings_for_gap_duplicate_broken_link_and_undecodable(projection_config, topics,
                                                                 produce_log):
    cfg = projection_config
    s1 = seal_record(make_body("f", 1), 1, GENESIS)
    s2 = seal_record(make_body("f", 2), 2, s1.record_digest)
    s4 = seal_record(make_body("f", 4), 4, b"\x07" * 32)                 # gap: 3 missing
    s2_again = seal_record(make_body("f", 22), 2, s1.record_digest)      # duplicate seq 2
    s5 = seal_record(make_body("f", 5), 5, b"\x08" * 32)                 # broken link
    s6 = seal_record(make_body("f", 6), 6, s5.record_digest)             # fine again
    items = [s1, s2, s4, s2_again, s5, ("f", b"\x00not an evidence record"), s6]
    produced = produce_log(topics, items)
    with running_projector(cfg):
        wait_until("6 records", lambda: count(cfg) == 6)
        wait_until("4 findings", lambda: q(cfg, "select count(*) from {v}.findings")[0][0] == 4)
    findings = q(cfg, "select kind, stream, seq, log_partition, log_offset, detail "
                      "from {v}.findings order by log_offset")
    bad = produced[5]
    assert [f[:5] for f in findings] == [
        ("gap", "f", 4, s4.partition, s4.offset),
        ("duplicate", "f", 2, s2_again.partition, s2_again.offset),
        ("broken_link", "f", 5, s5.partition, s5.offset),
        ("undecodable", None, None, bad.partition, bad.offset),
    ]
    assert "seq 3 missing" in findings[0][5]
    assert q(cfg, "select stream, seq, record_digest, record_count from {v}.heads") == [
        ("f", 6, s6.record_digest, 6)]
    assert sorted(r[0] for r in q(cfg, "select seq from {v}.records")) == [1, 2, 2, 4, 5, 6]


def test_a_late_seq_in_a_later_batch_is_out_of_order_through_the_stored_head(
        projection_config, topics, produce_log):
    # The heads table keeps the seqs a gap skipped ("missing"): when seq 2 arrives after the
    # projector stored 1 and 3, it is out of order; the same seq again is a duplicate.
    cfg = projection_config
    s1 = seal_record(make_body("o", 1), 1, GENESIS)
    s2 = seal_record(make_body("o", 2), 2, s1.record_digest)
    s3 = seal_record(make_body("o", 3), 3, s2.record_digest)
    produce_log(topics, [s1, s3])
    with running_projector(cfg):
        wait_until("2 records", lambda: count(cfg) == 2)
        assert q(cfg, "select seq, missing from {v}.heads") == [(3, "2-2")]
        late, again = produce_log(topics, [s2, dataclasses.replace(s2)])
        wait_until("4 records", lambda: count(cfg) == 4)
        wait_until("3 findings", lambda: q(cfg, "select count(*) from {v}.findings")[0][0] == 3)
    assert q(cfg, "select kind, seq, log_offset from {v}.findings order by log_offset") == [
        ("gap", 3, s3.offset),
        ("out_of_order", 2, late.offset), ("duplicate", 2, again.offset)]
    assert q(cfg, "select seq, record_count, missing from {v}.heads") == [(3, 4, "")]


def test_log_checksums_match_sql_digest(projection_config, topics, produce_chain):
    cfg = projection_config
    recs = produce_chain(topics, streams={"a": 7, "b": 3})
    with running_projector(cfg):
        wait_until("10 records", lambda: count(cfg) == 10)
    got = dict(q(cfg, "select stream, sha256(string_agg(record_digest, ''::bytea order by seq)) "
                      "from {v}.records group by stream"))
    want = {}
    for s in ("a", "b"):
        want[s] = hashlib.sha256(b"".join(r.record_digest for r in sorted(
            (r for r in recs if r.stream == s), key=lambda r: r.seq))).digest()
    assert got == want


def test_an_event_id_sealed_again_in_another_stream_is_a_finding(projection_config, topics,
                                                                  produce_log):
    # One call, two records: stream b reuses a's event_id. A later batch brings a record in
    # stream c that the writer sealed *before* both (earlier occurred_at): it becomes the
    # original, so a's record is flagged then too, and every record is flagged at most once.
    cfg = projection_config
    eid = make_body("x")["event_id"]
    a1 = seal_record(make_body("ten-a:chat", 1, event_id=eid), 1, GENESIS, T0 + 100)
    b1 = seal_record(make_body("ten-b:chat", 1, event_id=eid), 1, GENESIS, T0 + 200)
    c1 = seal_record(make_body("ten-c:chat", 1, event_id=eid), 1, GENESIS, T0 + 50)
    b1_again = dataclasses.replace(b1)  # the same record again: a chain duplicate only
    with running_projector(cfg):
        produce_log(topics, [a1, b1, b1_again])
        wait_until("3 records", lambda: count(cfg) == 3)
        wait_until("2 findings", lambda: q(cfg, "select count(*) from {v}.findings")[0][0] == 2)
        produce_log(topics, [c1])
        wait_until("4 records", lambda: count(cfg) == 4)
        wait_until("3 findings", lambda: q(cfg, "select count(*) from {v}.findings")[0][0] == 3)
    found = q(cfg, "select kind, stream, seq, detail from {v}.findings order by kind, stream")
    assert [f[:3] for f in found] == [
        ("duplicate", "ten-b:chat", 1),
        ("duplicate_event_id", "ten-a:chat", 1),
        ("duplicate_event_id", "ten-b:chat", 1),
    ], found
    assert all(eid in f[3] for f in found if f[0] == "duplicate_event_id")


def test_the_store_connection_commits_without_waiting_for_the_flush(projection_config):
    """ProjectorConfig.synchronous_commit: off by default (a lost batch is re-read from the
    log, rows and positions together), on when asked."""
    from projections.store import Store

    with Store(projection_config) as store:
        assert store.conn.execute("show synchronous_commit").fetchone()[0] == "off"
    on = dataclasses.replace(projection_config, synchronous_commit="on")
    with Store(on) as store:
        assert store.conn.execute("show synchronous_commit").fetchone()[0] == "on"


def test_tree_node_tuples_are_the_bytes_psycopg_writes(projection_config):
    """projections.trees.node_tuples builds tree_nodes' binary COPY data itself (a write_row a node was
    a third of a batch's tree work): the same table as psycopg's write_row makes, byte for
    byte on the way out."""
    import psycopg

    from projections.trees import node_tuples

    nodes = [("acme:chat", 0, 0, bytes(range(32))), ("ten-ä:ü", 3, 2**40, b"\xff" * 32),
             ("acme:chat", 1, 7, bytes(32))]

    def table(conn):
        with conn.cursor() as cur, cur.copy("copy n to stdout (format binary)") as c:
            return b"".join(bytes(b) for b in c)

    with psycopg.connect(projection_config.database_url, autocommit=True) as conn:
        conn.execute("create temp table n (stream text, level int2, idx int8, hash bytea)")
        with conn.cursor() as cur:
            with cur.copy("copy n (stream, level, idx, hash) from stdin (format binary)") as c:
                c.set_types(("text", "int2", "int8", "bytea"))
                for node in nodes:
                    c.write_row(node)
        want = table(conn)
        conn.execute("truncate n")
        with conn.cursor() as cur:
            with cur.copy("copy n (stream, level, idx, hash) from stdin (format binary)") as c:
                c.write(node_tuples(nodes))
        assert table(conn) == want
        assert [tuple(r) for r in conn.execute("select stream, level, idx, hash from n")] == nodes
