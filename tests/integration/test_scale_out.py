"""Scale-out: two writers and two projectors share a stack's partitions through their
consumer groups; one of each is killed -9 under load and a new one of each added. Whatever
the rebalances did, every capture is sealed once, every stream's chain is gapless and valid,
the projection is the log, and the survivors and newcomers own the partitions between them."""

from __future__ import annotations

import uuid

import psycopg

from evidence_contract.topics import partition_for
from tests.fixtures.log import wait_until
from tests.fixtures.scale import SteadyFeeder, owned, run_projector  # noqa: F401 - fixture
from tests.fixtures.writer import (
    log_signing_key,
    make_capture,
    produce_captures,
    read_all,
    verify_log,
    wait_for_count,
)

PARTITIONS = 6
# A zombie's open transaction blocks read_committed readers of its partitions until the
# coordinator aborts it; the writer that replaces a killed one has another transactional
# id, so nothing fences the zombie sooner than this.
WRITER_OPTS = {"transaction_timeout_ms": 15_000}


def _streams(per_partition: int = 3) -> list[str]:
    """Streams spread so that every partition carries some."""
    out: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    i = 0
    while any(len(v) < per_partition for v in out.values()):
        s = f"tenant-{i}:chat"
        i += 1
        p = partition_for(s, PARTITIONS)
        if len(out[p]) < per_partition:
            out[p].append(s)
    return [s for v in out.values() for s in v]


def _split(procs, event: str) -> list[set[int]] | None:
    sets = [owned(p, event) for p in procs]
    if any(s is None for s in sets):
        return None
    union = set().union(*sets)
    if union != set(range(PARTITIONS)) or sum(len(s) for s in sets) != PARTITIONS:
        return None  # a rebalance still under way: not every partition, or one twice
    return sets


def _projection(cfg) -> tuple[int, dict[str, tuple[int, bytes]], list[tuple], int]:
    v = cfg.views_schema
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        count = conn.execute(f'select count(*) from "{v}".records').fetchone()[0]
        heads = {r[0]: (r[1], bytes(r[2])) for r in conn.execute(
            f'select stream, seq, record_digest from "{v}".heads')}
        findings = [tuple(r) for r in conn.execute(
            f'select kind, stream, seq, detail from "{v}".findings')]
        mismatched = conn.execute(
            f'select count(*) from "{v}".checkpoints where root_matches is false').fetchone()[0]
    return count, heads, findings, mismatched


def test_the_survivor_of_two_writers_takes_over_a_killed_ones_partitions(
        kafka_bootstrap, make_topics, run_writer):
    """kill -9 of one of two writers under a small load, nobody started in its place: the
    survivor waits out the dead writer's open transaction (stable offsets), restores its
    partitions and seals their next captures; nothing lost, duplicated or gapped. The
    timeouts are the smallest the writer accepts, to keep the test short; how long the
    takeover takes is measured by ``bench/scale_out.py``, not here."""
    settings = make_topics(partitions=PARTITIONS)
    tx = f"tx-{uuid.uuid4().hex[:8]}"
    opts = {"transaction_timeout_ms": 5_000, "session_timeout_ms": 6_000}
    w1 = run_writer(settings, transactional_id=f"{tx}-1", **opts)
    w2 = run_writer(settings, transactional_id=f"{tx}-2", **opts)
    split = wait_until("two writers splitting the partitions", lambda: _split([w1, w2], "assigned"),
                       timeout=120, interval=0.2)
    dead_parts = split[0]

    streams = _streams(per_partition=2)
    feeder = SteadyFeeder(kafka_bootstrap, settings, streams, total=3000, burst=10, pause=0.02,
                          seed=28)
    feeder.start()
    wait_for_count(kafka_bootstrap, settings.names.log, 300, 120, w1.assert_alive)
    assert feeder.is_alive(), "the kill is meant to land under load"
    assert w1.kill() == -9
    sent = feeder.finish(timeout=300)
    # One capture more on every stream after the load: on the dead writer's partitions only
    # the survivor can seal them.
    last = [make_capture(s) for s in streams]
    produce_captures(kafka_bootstrap, settings, last)
    sent += [e["event_id"] for e in last]

    everything = set(range(PARTITIONS))
    wait_until("the survivor to own every partition",
               lambda: w2.assert_alive() or owned(w2, "assigned") == everything,
               timeout=240, interval=0.2)
    wait_for_count(kafka_bootstrap, settings.names.log, len(sent), 240, w2.assert_alive)
    by_stream = _sealed_once(kafka_bootstrap, settings, sent)
    by_survivor = {partition_for(s, PARTITIONS) for s, recs in by_stream.items()
                   if recs[-1]["seal"]["writer"]["transactional_id"] == f"{tx}-2"}
    assert dead_parts <= by_survivor, (dead_parts, by_survivor)
    assert w2.terminate() == 0


def test_writers_and_projectors_killed_and_added_under_load_lose_and_duplicate_nothing(
        kafka_bootstrap, make_topics, run_writer, make_projection_config, run_projector):
    settings = make_topics(partitions=PARTITIONS)
    cfg = make_projection_config(settings, log_signing_key_file=str(log_signing_key()[1]))
    tx = f"tx-{uuid.uuid4().hex[:8]}"

    w1 = run_writer(settings, transactional_id=f"{tx}-1", **WRITER_OPTS)
    w2 = run_writer(settings, transactional_id=f"{tx}-2", **WRITER_OPTS)
    p1, p2 = run_projector(cfg), run_projector(cfg)
    wait_until("two writers splitting the partitions", lambda: _split([w1, w2], "assigned"),
               timeout=120, interval=0.2)
    wait_until("two projectors splitting the partitions", lambda: _split([p1, p2], "owned"),
               timeout=120, interval=0.2)

    feeder = SteadyFeeder(kafka_bootstrap, settings, _streams(), total=6000, burst=20,
                          pause=0.02, seed=14)
    feeder.start()
    wait_for_count(kafka_bootstrap, settings.names.log, 1500, 180, w2.assert_alive)
    assert feeder.is_alive(), "the kills are meant to land under load"

    assert w1.kill() == -9
    assert p1.kill() == -9
    w3 = run_writer(settings, wait_ready=False, transactional_id=f"{tx}-3", **WRITER_OPTS)
    p3 = run_projector(cfg)

    sent = feeder.finish(timeout=300)
    live_writers, live_projectors = [w2, w3], [p2, p3]

    def all_sealed() -> bool:
        for p in live_writers + live_projectors:
            p.assert_alive()
        return True

    wait_for_count(kafka_bootstrap, settings.names.log, len(sent), 300, all_sealed)
    by_stream = _sealed_once(kafka_bootstrap, settings, sent)
    log = read_all(kafka_bootstrap, settings.names.log)

    # The projection is the log: every record once, every stream's head the log's last.
    want_heads = {s: (len(recs), recs[-1]["seal"]["record_digest"])
                  for s, recs in by_stream.items()}

    def projected_all():
        for p in live_projectors:
            p.assert_alive()
        got = _projection(cfg)
        return got if got[0] >= len(sent) and got[1] == want_heads else None

    count, heads, findings, mismatched = wait_until(
        "the projection to equal the log", projected_all, timeout=300, interval=0.5)
    assert count == len(sent)
    assert heads == want_heads
    assert findings == []
    assert mismatched == 0

    # Rebalanced: the survivor and the newcomer own every partition between them.
    writer_sets = wait_until("the live writers to split the partitions",
                             lambda: _split(live_writers, "assigned"), timeout=120, interval=0.2)
    projector_sets = wait_until("the live projectors to split the partitions",
                                lambda: _split(live_projectors, "owned"), timeout=120,
                                interval=0.2)
    assert all(writer_sets) and all(projector_sets), (writer_sets, projector_sets)
    # The survivors were assigned again after the kill and the additions (one rebalance or
    # more: a dead member's leaving and a newcomer's joining may land in the same one).
    for survivor, event in ((w2, "assigned"), (p2, "owned")):
        assert len([e for e in survivor.events() if e.get("event") == event
                    and e.get("partitions")]) >= 2, survivor.output()[-4000:]
    # Nothing more arrives: the positions the projection stores are past the log's last
    # record on every partition, and it still holds each record once.
    ends: dict[int, int] = {}
    for m in log:
        ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)

    def positions_at_the_end() -> bool:
        with psycopg.connect(cfg.database_url, autocommit=True) as conn:
            got = dict(conn.execute(
                f'select partition, next_offset from "{cfg.views_schema}".positions '
                "where topic = %s", (settings.names.log,)).fetchall())
        return all(got.get(p, 0) >= end for p, end in ends.items())

    wait_until("the stored positions at the log's end", positions_at_the_end, timeout=60)
    assert _projection(cfg)[0] == len(sent)
    for p in live_writers + live_projectors:
        assert p.terminate() == 0


def test_one_event_id_in_two_projectors_batches_at_once_is_flagged_exactly_once(
        make_projection_config):
    """Two projectors' batches on different partitions share an event_id; neither sees the
    other's uncommitted row, so without the event-id lock neither would flag it."""
    import threading

    from evidence_contract import GENESIS, new_event_id
    from projections.fold import decode_message
    from projections.store import Store
    from tests.fixtures.log import make_body, seal_record
    from topics import TopicNames, TopicSettings

    cfg = make_projection_config(TopicSettings(names=TopicNames(f"t{uuid.uuid4().hex[:10]}")))
    eid = new_event_id()
    first = seal_record(make_body("tenant-a:chat", 1, event_id=eid), seq=1, prev=GENESIS)
    second = seal_record(make_body("tenant-b:chat", 1, event_id=eid), seq=1, prev=GENESIS)

    with Store(cfg) as a, Store(cfg) as b:
        gen = a.live_generation(create=True)
        a.follow(gen)

        def apply(store, partition, rec):
            return store.apply(gen, cfg.log_topic, {partition: 0},
                               [decode_message(partition, 0, rec.value)], {}, {},
                               follow_live=True)

        results, errors = [], []

        def other() -> None:
            try:
                results.append(apply(b, 1, second))
            except BaseException as e:  # noqa: BLE001 - handed to the test thread
                errors.append(e)

        with a.transaction():  # A's batch stays uncommitted while B's runs
            apply(a, 0, first)
            t = threading.Thread(target=other, daemon=True)
            t.start()
            t.join(1.5)
            assert t.is_alive(), "B judged its event ids while A's batch was uncommitted"
        t.join(30)
        assert not t.is_alive() and not errors, errors

    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        found = conn.execute(
            f'select stream, log_partition from "{cfg.views_schema}".findings '
            f"where kind = 'duplicate_event_id'").fetchall()
        records = conn.execute(f'select count(*) from "{cfg.views_schema}".records').fetchone()[0]
    assert records == 2
    assert len(found) == 1, found


def _sealed_once(bootstrap, settings, sent):
    """The log's records by stream, after checking each stream gapless and chained, every
    capture sent sealed exactly once, and nothing rejected."""
    by_stream = verify_log(read_all(bootstrap, settings.names.log))
    sealed = [r["body"]["event_id"] for recs in by_stream.values() for r in recs]
    assert len(sealed) == len(set(sealed)), "a capture was sealed twice"
    assert sorted(sealed) == sorted(sent), "a capture was lost or invented"
    assert read_all(bootstrap, settings.names.rejected) == []
    return by_stream
