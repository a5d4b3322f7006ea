"""`evidence projections rebuild|status` against real Kafka and PostgreSQL."""

import hashlib
import os
import threading

import psycopg
import pytest

from cli.main import main
from tests.fixtures.log import heads_of, make_body, running_projector, seal_record, wait_until

pytestmark = pytest.mark.integration


def flags(cfg):
    return ["--database-url", cfg.database_url, "--bootstrap", cfg.bootstrap,
            "--topic-prefix", cfg.topics.names.prefix, "--meta-schema", cfg.meta_schema,
            "--views-schema", cfg.views_schema, "--generation-prefix", cfg.generation_prefix]


def q(cfg, sql, params=()):
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        return conn.execute(sql.format(v=f'"{cfg.views_schema}"', m=f'"{cfg.meta_schema}"'),
                            params).fetchall()


def count(cfg):
    try:
        return q(cfg, "select count(*) from {v}.records")[0][0]
    except psycopg.errors.UndefinedTable:
        return 0


def live(cfg):
    return q(cfg, "select generation from {m}.live")[0][0]


def schema_exists(cfg, name):
    return q(cfg, "select count(*) from pg_namespace where nspname = %s", (name,))[0][0] == 1


def log_checksums(records):
    by_stream = {}
    for r in sorted(records, key=lambda r: (r.stream, r.seq)):
        by_stream.setdefault(r.stream, []).append(r.record_digest)
    return {s: hashlib.sha256(b"".join(ds)).digest() for s, ds in by_stream.items()}


def sql_checksums(cfg, gen=None):
    table = f'"{gen}".records' if gen else f'"{cfg.views_schema}".records'
    return dict(q(cfg, f"select stream, sha256(string_agg(record_digest, ''::bytea order by seq))"
                       f" from {table} group by stream"))


class Reader(threading.Thread):
    """Queries the views in a loop, as the API does, recording answers and errors."""

    SQL = ("select (select count(*) from {v}.records), "
           "(select sha256(string_agg(record_digest, ''::bytea "
           "  order by stream, seq, log_partition, log_offset)) from {v}.records), "
           "(select sum(record_count) from {v}.heads), (select count(*) from {v}.findings)")

    def __init__(self, cfg):
        super().__init__(daemon=True)
        self.cfg, self.stop = cfg, threading.Event()
        self.answers, self.errors = [], []

    def run(self):
        sql = self.SQL.format(v=f'"{self.cfg.views_schema}"')
        with psycopg.connect(self.cfg.database_url, autocommit=True) as conn:
            while not self.stop.is_set():
                try:
                    self.answers.append(conn.execute(sql).fetchone())
                except psycopg.Error as e:
                    self.errors.append(repr(e))


@pytest.fixture
def projected_log(projection_config, topics, produce_chain, produce_log):
    """A log of 3 000 records with 1 KiB responses, a gap and an undecodable message,
    projected into the live generation by a projector that keeps running."""
    cfg = projection_config
    recs = produce_chain(topics, streams={"a": 1500, "b": 1000, "c": 500},
                         response=os.urandom(1024))
    gap = seal_record(make_body("c", 999), 502, heads_of(recs)["c"][1])
    produce_log(topics, [gap, ("c", b"junk")])
    with running_projector(cfg) as projector:
        wait_until("3001 records", lambda: count(cfg) == 3001)
        wait_until("2 findings", lambda: q(cfg, "select count(*) from {v}.findings")[0][0] == 2)
        yield cfg, recs + [gap], projector


def test_rebuild_swaps_in_an_equal_generation_while_readers_keep_answering(
        projected_log, topics, produce_chain, capsys):
    cfg, recs, _projector = projected_log
    old = live(cfg)
    reader = Reader(cfg)
    reader.start()
    wait_until("a first answer", lambda: reader.answers)
    try:
        assert main(["projections", "rebuild", *flags(cfg)]) == 0
        n = len(reader.answers)
        wait_until("answers after the swap", lambda: len(reader.answers) > n + 5)
    finally:
        reader.stop.set()
        reader.join(10)
    out, err = capsys.readouterr()
    assert reader.errors == []
    assert len(set(reader.answers)) == 1, set(reader.answers)
    assert reader.answers[0][0] == 3001
    new = live(cfg)
    assert new != old and "is live" in out and "records/s" in err
    # Each step's time, in the order they ran.
    steps = [part.split()[0] for part in out.split("rebuild: steps: ")[1].splitlines()[0].split(", ")]
    assert steps == ["load", "indexes", "catch_up", "summarise", "check", "drop"], out
    assert not schema_exists(cfg, old)
    assert q(cfg, "select name, state from {m}.generations") == [(new, "live")]
    assert sql_checksums(cfg) == log_checksums(recs)

    # The running projector follows the swap and carries on in the new generation.
    more = produce_chain(topics, streams={"a": 10}, start=heads_of(recs))
    wait_until("3011 records", lambda: count(cfg) == 3011)
    assert sql_checksums(cfg) == log_checksums(recs + more)
    assert q(cfg, "select count(distinct (log_partition, log_offset)) from {v}.records") == [
        (3011,)]

    code = main(["projections", "status", *flags(cfg)])
    out, _ = capsys.readouterr()
    assert code == 0, out  # ready: the projector's heartbeat carried over the swap
    assert new in out and "lag" in out and cfg.topics.names.log in out


def test_rebuild_in_place(projected_log, capsys):
    cfg, recs, _projector = projected_log
    old = live(cfg)
    before = sql_checksums(cfg)
    assert main(["projections", "rebuild", "--in-place", "--no-progress", *flags(cfg)]) == 0
    new = live(cfg)
    assert new != old and not schema_exists(cfg, old)
    wait_until("3001 records", lambda: count(cfg) == 3001)
    assert sql_checksums(cfg) == before == log_checksums(recs)
    assert q(cfg, "select count(distinct (log_partition, log_offset)) from {v}.records") == [
        (3001,)]
    assert q(cfg, "select kind from {v}.findings order by 1") == [("gap",), ("undecodable",)]


def test_rebuild_that_disagrees_does_not_swap_and_exits_non_zero(projected_log, capsys):
    cfg, _recs, _projector = projected_log
    old = live(cfg)
    q(cfg, f'update "{old}".records set record_digest = %s where stream = %s and seq = 7 '
           f"returning 1", (b"\xee" * 32, "b"))
    assert main(["projections", "rebuild", "--no-progress", *flags(cfg)]) == 3
    out, _ = capsys.readouterr()
    assert "disagrees" in out and "stream b:" in out and "not swapped" in out
    assert live(cfg) == old
    gens = dict(q(cfg, "select name, state from {m}.generations"))
    assert gens[old] == "live" and sorted(gens.values()) == ["building", "live"]
    rebuilt = next(g for g, s in gens.items() if s == "building")
    assert schema_exists(cfg, rebuilt)
    # The rebuilt generation is right: it matches the log where the live one was tampered,
    # and the rebuild says so, having audited both against the log.
    assert sql_checksums(cfg, rebuilt)["b"] != sql_checksums(cfg, old)["b"]
    assert f"the log supports {rebuilt} (rebuilt from it now)" in out, out
    assert f"{old}: projection_altered stream b seq 7" in out and "record_digest" in out, out
    assert "--accept-differences --reason TEXT" in out
    assert q(cfg, "select count(*) from {m}.accepted_swaps") == [(0,)]


def test_a_response_moved_to_the_error_column_is_a_difference(projected_log, capsys):
    """The same bytes served from another body column (a response served as an error, the
    record's own bytes untouched) is a difference of the served bodies: the rebuild does not
    swap (the per-row body digest carries each column's length, not only its hash)."""
    cfg, _recs, _projector = projected_log
    old = live(cfg)
    q(cfg, f'update "{old}".records set error_bytes = response_bytes, response_bytes = null '
           f"where stream = %s and seq = 9 returning 1", ("a",))
    assert main(["projections", "rebuild", "--no-progress", *flags(cfg)]) == 3
    out, _ = capsys.readouterr()
    assert "stream a: served bodies differ under the same redaction policy" in out, out
    assert "not swapped" in out and live(cfg) == old


def response_of(cfg, stream, seq, schema=None):
    table = f'"{schema}".records' if schema else '"{v}".records'.format(
        v=cfg.views_schema)
    return bytes(q(cfg, f"select response_bytes from {table} where stream = %s and seq = %s",
                   (stream, seq))[0][0])


def test_a_tampered_projection_is_healed_by_a_rebuild_the_log_supports(
        projected_log, topics, produce_chain, capsys):
    """One byte appended to a record's response in PostgreSQL, through the views (what
    anyone with database access can do): the rebuild says the log supports the rebuilt
    generation and names the flag; with it, the rebuilt one is swapped in, serving the
    log's bytes again, and what differed, the log's verdict, who and why are recorded."""
    cfg, recs, _projector = projected_log
    old = live(cfg)
    sealed = next(r for r in recs if (r.stream, r.seq) == ("b", 7))
    truth = sealed.record["body"]["response_bytes"]
    assert response_of(cfg, "b", 7) == truth
    q(cfg, "update {v}.records set response_bytes = response_bytes || 'x'::bytea "
           "where stream = 'b' and seq = 7 returning 1")
    assert response_of(cfg, "b", 7) == truth + b"x"

    assert main(["projections", "rebuild", "--no-progress", *flags(cfg)]) == 3
    out, _ = capsys.readouterr()
    first = next(g for g, s in q(cfg, "select name, state from {m}.generations")
                 if s == "building")
    assert f"{first} disagrees with the live generation {old}; not swapped" in out, out
    assert f"the log supports {first} (rebuilt from it now): its records match the log; " \
           f"{old}'s differ from it in 1 row:" in out, out
    assert f"{old}: projection_altered stream b seq 7 at {sealed.partition}/" \
           f"{sealed.offset}: row columns differ from the record: response_bytes" in out, out
    assert "evidence projections rebuild --accept-differences --reason TEXT" in out
    assert live(cfg) == old and response_of(cfg, "b", 7) == truth + b"x"

    # The flag wants a reason, and is refused without one.
    assert main(["projections", "rebuild", "--no-progress", "--accept-differences",
                 *flags(cfg)]) == 2
    assert "--reason" in capsys.readouterr().err
    assert live(cfg) == old

    reason = "response bytes of b#7 altered in SQL (INC-23); the log is the truth"
    assert main(["projections", "rebuild", "--no-progress", "--accept-differences",
                 "--reason", reason, *flags(cfg)]) == 0
    out, _ = capsys.readouterr()
    new = live(cfg)
    assert new != old  # (the name of the first try's leftover, dropped, may come again)
    assert f"{new} is live (checked 3 streams, differences accepted, swapped)" in out, out
    assert f"reason: {reason}" in out and f"{old} -> {new}" in out
    assert f"{old} is kept (retired) for inspection" in out
    # The live generation serves the log's bytes; the replaced one is kept as it was.
    assert response_of(cfg, "b", 7) == truth
    assert response_of(cfg, "b", 7, schema=old) == truth + b"x"
    gens = dict(q(cfg, "select name, state from {m}.generations"))
    assert gens == {old: "retired", new: "live"}, gens  # the first try's leftover dropped
    assert sql_checksums(cfg) == log_checksums(recs)

    (by, db_user, got_reason, previous, generation, differences, verdict), = q(
        cfg, "select accepted_by, db_user, reason, previous, generation, differences, "
             "verdict from {m}.accepted_swaps")
    assert (got_reason, previous, generation) == (reason, old, new)
    assert "@" in by and db_user
    assert len(differences) >= 1 and all(d.startswith("stream b:") for d in differences), \
        differences
    assert verdict[0].startswith(f"the log supports {new} (rebuilt from it now)")
    assert verdict[1].startswith(f"{old}: projection_altered stream b seq 7")

    # The running projector follows the swap and carries on in the new generation.
    more = produce_chain(topics, streams={"b": 5}, start=heads_of(recs))
    wait_until("3006 records", lambda: count(cfg) == 3006)
    assert sql_checksums(cfg) == log_checksums(recs + more)

    code = main(["projections", "status", *flags(cfg)])
    out, _ = capsys.readouterr()
    assert code == 0, out
    assert "differences accepted at a swap: 1" in out
    assert f"accepted differences #" in out and f"{old} -> {new}; reason: {reason}" in out
    assert "differed: stream b:" in out and f"verdict: the log supports {new}" in out

    # A later rebuild that agrees swaps as always and drops the kept generation.
    assert main(["projections", "rebuild", "--no-progress", *flags(cfg)]) == 0
    assert not schema_exists(cfg, old)
    assert q(cfg, "select count(*) from {m}.accepted_swaps") == [(1,)]


def test_the_flag_never_swaps_to_a_generation_the_log_does_not_support(projected_log):
    from projections.errors import RebuildMismatch
    from projections.rebuild import Acceptance, Verdict, rebuild

    cfg, _recs, _projector = projected_log
    old = live(cfg)
    q(cfg, "update {v}.records set response_bytes = response_bytes || 'x'::bytea "
           "where stream = 'a' and seq = 3 returning 1")

    def judge(live_gen, rebuilt):  # as if the rebuilt generation's records differed too
        return Verdict(live_gen, rebuilt, {live_gen: ("altered",), rebuilt: ("altered",)})

    with pytest.raises(RebuildMismatch) as e:
        rebuild(cfg, judge=judge, accept=Acceptance("because", "test@host"))
    assert e.value.verdict.supports is None
    assert live(cfg) == old
    assert q(cfg, "select count(*) from {m}.accepted_swaps") == [(0,)]


def test_records_projected_while_the_log_is_judged_are_compared_before_an_accepted_swap(
        projected_log, topics, produce_chain):
    """The judge reads the log outside the live lock; a live row altered meanwhile (in the
    records the projector added during the read) was not judged, so it stops the swap."""
    from cli.projections import _judge
    from projections.errors import RebuildMismatch
    from projections.rebuild import Acceptance, rebuild

    cfg, recs, _projector = projected_log
    old = live(cfg)
    q(cfg, "update {v}.records set response_bytes = response_bytes || 'x'::bytea "
           "where stream = 'a' and seq = 3 returning 1")
    audit = _judge(cfg)

    def judge(live_gen, rebuilt):
        verdict = audit(live_gen, rebuilt)
        produce_chain(topics, streams={"c": 5}, start=heads_of(recs))
        wait_until("3006 records", lambda: count(cfg) == 3006)
        q(cfg, f'update "{live_gen}".records set response_bytes = response_bytes || %s '
               f"where stream = 'c' and seq = 503 returning 1", (b"y",))
        return verdict

    with pytest.raises(RebuildMismatch) as e:
        rebuild(cfg, judge=judge, accept=Acceptance("because", "test@host"))
    assert e.value.verdict.supports == e.value.generation
    assert any(d.startswith("stream c:") and "not judged, not accepted" in d
               for d in e.value.differences), e.value.differences
    assert live(cfg) == old
    assert q(cfg, "select count(*) from {m}.accepted_swaps") == [(0,)]


def test_a_bulk_rebuild_flags_the_same_event_id_duplicates_as_the_live_projector(
        projection_config, topics, produce_chain, produce_log):
    """The rebuild's bulk load has no event_id index: it judges event ids against the ids it
    has put into the new generation so far, looking up only a batch that repeats one. With
    batches of three, the duplicates fall in different batches of the rebuild than of the
    live projector; the findings must be the same (the pre-swap check compares them), with
    an original that comes after its duplicate in the log (earlier occurred_at)."""
    import dataclasses

    from evidence_contract import GENESIS
    from projections.rebuild import rebuild
    from tests.fixtures.log import T0

    cfg = projection_config
    eid, eid2 = make_body("x")["event_id"], make_body("y")["event_id"]
    a1 = seal_record(make_body("ten-a:chat", 1, event_id=eid), 1, GENESIS, T0 + 100)
    b1 = seal_record(make_body("ten-b:chat", 1, event_id=eid), 1, GENESIS, T0 + 200)
    filler = produce_chain(topics, streams={"f": 20, "g": 20}, response=os.urandom(64))
    d1 = seal_record(make_body("ten-d:chat", 1, event_id=eid2), 1, GENESIS, T0 + 300)
    c1 = seal_record(make_body("ten-c:chat", 1, event_id=eid), 1, GENESIS, T0 + 50)
    e1 = seal_record(make_body("ten-e:chat", 1, event_id=eid2), 1, GENESIS, T0 + 400)
    with running_projector(cfg):
        produce_log(topics, [a1, b1, dataclasses.replace(b1), d1])
        produce_log(topics, [c1, e1])
        wait_until("46 records", lambda: count(cfg) == 46)
        wait_until("4 findings", lambda: q(cfg, "select count(*) from {v}.findings")[0][0] == 4)
        # The flagged records are the same whatever the batches (what the pre-swap check
        # compares); the detail names the original as known when flagged, which can differ.
        sql = "select kind, stream, seq, log_partition, log_offset, detail from {v}.findings"
        before = sorted(r[:5] for r in q(cfg, sql))
        old = live(cfg)
        result = rebuild(dataclasses.replace(cfg, batch_max_messages=3))
    assert result.generation != old and result.records == 46
    found = q(cfg, sql)
    after = sorted(r[:5] for r in found)
    assert after == before
    assert all((eid in r[5] or eid2 in r[5]) for r in found if r[0] == "duplicate_event_id")
    assert [f[:3] for f in after if f[0] == "duplicate_event_id"] == [
        ("duplicate_event_id", "ten-a:chat", 1), ("duplicate_event_id", "ten-b:chat", 1),
        ("duplicate_event_id", "ten-e:chat", 1)]
    assert len(filler) == 40


def _during_the_rebuild(monkeypatch, action):
    """Run ``action`` once the rebuild has read the live generation's early positions and
    before it takes the live lock (at its first early summary), so what the live projector
    adds meanwhile is compared in the tail, under the lock."""
    import threading

    import projections.rebuild as rebuild_module

    summarise, once = rebuild_module.summarise_apart, threading.Lock()
    done = []

    def summarise_apart(*args, **kwargs):
        with once:
            if not done:
                action()
                done.append(True)
        return summarise(*args, **kwargs)

    monkeypatch.setattr(rebuild_module, "summarise_apart", summarise_apart)


def test_rows_the_live_projector_adds_during_a_rebuild_are_compared_under_the_lock(
        projected_log, topics, produce_chain, monkeypatch):
    from projections.rebuild import rebuild

    cfg, recs, _projector = projected_log
    old = live(cfg)
    more = []

    def add():
        more.extend(produce_chain(topics, streams={"a": 10, "b": 5}, start=heads_of(recs)))
        wait_until("3016 records", lambda: count(cfg) == 3016)

    _during_the_rebuild(monkeypatch, add)
    result = rebuild(cfg)
    assert result.generation != old and result.records == 3016 and live(cfg) == result.generation
    assert result.phases["summarise"] >= 0 and "check" in result.phases
    assert sql_checksums(cfg) == log_checksums(recs + more)


@pytest.mark.parametrize("where", ["early", "tail"])
def test_a_live_row_altered_before_or_after_the_early_positions_stops_the_swap(
        projected_log, topics, produce_chain, monkeypatch, where):
    """The live generation's rows below its positions at the start are summarised during
    the load, the rest under the lock; an altered row is found in either part."""
    from projections.errors import RebuildMismatch
    from projections.rebuild import rebuild

    cfg, recs, _projector = projected_log
    old = live(cfg)
    seq = 7 if where == "early" else 1502

    def add_and_alter():
        produce_chain(topics, streams={"a": 10}, start=heads_of(recs))
        wait_until("3011 records", lambda: count(cfg) == 3011)
        if where == "tail":
            q(cfg, f'update "{old}".records set record_bytes = record_bytes || %s '
                   f"where stream = 'a' and seq = %s returning 1", (b"\x00", seq))

    if where == "early":
        q(cfg, f'update "{old}".records set record_bytes = record_bytes || %s '
               f"where stream = 'a' and seq = %s returning 1", (b"\x00", seq))
    _during_the_rebuild(monkeypatch, add_and_alter)
    with pytest.raises(RebuildMismatch) as e:
        rebuild(cfg)
    assert any(d.startswith("stream a:") for d in e.value.differences), e.value.differences
    assert not any(d.startswith("stream b:") for d in e.value.differences)
    assert live(cfg) == old


def status_rows(out, gen):
    """``evidence projections status``'s position lines of ``gen``: (topic, part, next, end,
    lag)."""
    block = out.split(f"positions of {gen}:")[1].split("\n\n")[0].splitlines()[2:]
    return [(t, int(p), int(n), int(e), int(lag)) for t, p, n, e, lag, *_ in
            (line.split() for line in block if line.strip())]


def test_status_measures_each_topic_against_its_own_end(projection_config, topics,
                                                         produce_chain, capsys):
    """The heartbeat stores the log's ends; the checkpoints and erasures topics' positions
    are measured against their own (was: the log's end of the same partition number, a
    false lag of the log's size for a projection that is caught up)."""
    cfg = projection_config
    recs = produce_chain(topics, streams={"a": 40, "b": 30, "c": 20})
    with running_projector(cfg):
        wait_until("90 records", lambda: count(cfg) == 90)
        gen = live(cfg)
        wait_until("a heartbeat", lambda: q(
            cfg, f'select count(*) from "{gen}".heartbeat')[0][0] > 0)
        wait_until("the side topics' positions", lambda: {t for t, *_ in q(
            cfg, f'select topic from "{gen}".positions')} >= {
            topics.names.checkpoints, topics.names.erasures})
        code = main(["projections", "status", *flags(cfg)])
    out, _ = capsys.readouterr()
    assert code == 0, out
    rows = status_rows(out, gen)
    by_topic = {}
    for t, p, n, e, lag in rows:
        by_topic.setdefault(t, {})[p] = (n, e, lag)
    assert set(by_topic) >= {topics.names.log, topics.names.checkpoints, topics.names.erasures}
    assert all(lag == 0 for *_x, lag in rows), out
    # The log's ends are where its records are; the side topics hold nothing here.
    assert sum(e for e, _l in ((e, lag) for _n, e, lag in by_topic[topics.names.log].values())
               ) >= len(recs)
    for side in (topics.names.checkpoints, topics.names.erasures):
        assert all(e == n for n, e, _lag in by_topic[side].values()), out
    table_line = next(line for line in out.splitlines() if line.startswith(gen))
    assert table_line.split()[-3] == "0", out  # the generation's total lag
