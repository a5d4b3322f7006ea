"""The projector against real Kafka and PostgreSQL: rows equal the log, positions in PG,
restart without duplicates, findings."""

import dataclasses
import hashlib
import os

import psycopg
import pytest

from evidence_contract import GENESIS
from tests.fixtures.log import heads_of, make_body, running_projector, seal_record, wait_until

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
