"""The deployment log (``<prefix>.tree``, docs/witnessing.md) folded by the projector into
PostgreSQL against real Kafka: entries in commit order, the tree's nodes, deployment
checkpoints checked against it, cosignatures; across a restart and a rebuild, which gives the
same tables; and a stack without the tree topic still projects its records."""

from __future__ import annotations

import hashlib
import itertools
import os

import psycopg
import pytest

from evidence_contract.merkle import MerkleTree, leaf_hash
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, Checkpoint, format_checkpoint, format_note, format_vkey, generate_signer,
    sign, stream_origin,
)
from evidence_contract.tlog import DEFAULT_LOG_NAME
from projections import logtree
from projections.rebuild import rebuild
from tests.fixtures.log import projected, running_projector, wait_until

pytestmark = pytest.mark.integration

_tx = itertools.count()


@pytest.fixture
def log_key(tmp_path):
    """A log signer named as the projector's log, its verifier key in a file."""
    key = generate_signer(DEFAULT_LOG_NAME)
    path = tmp_path / "log.vkey"
    path.write_text(format_vkey(key.verifier) + "\n")
    return key, str(path)


def stream_entry(key, stream: str, size: int) -> bytes:
    """A stream checkpoint note as the writer signs it (the root made up: the deployment tree
    takes the note as it is)."""
    root = hashlib.sha256(os.urandom(8)).digest()
    text = format_checkpoint(Checkpoint(stream_origin(key.name, stream), size, root))
    return format_note(text, [sign(key, text)])


def deployment_checkpoint(key, size: int, root: bytes, *witnesses) -> bytes:
    text = format_checkpoint(Checkpoint(key.name, size, root))
    return format_note(text, [sign(key, text)] + [sign(w, text, timestamp=1_700_000_000)
                                                  for w in witnesses])


def entry(value: bytes, stream: str, size: int):
    return (value, [("evidence-kind", b"checkpoint"), ("evidence-stream", stream.encode()),
                    ("evidence-tree-size", str(size).encode())])


def log_checkpoint(value: bytes, size: int):
    return (value, [("evidence-kind", b"log-checkpoint"),
                    ("evidence-tree-size", str(size).encode())])


def log_cosignature(value: bytes, size: int, witness: str):
    return (value, [("evidence-kind", b"log-cosignature"),
                    ("evidence-tree-size", str(size).encode()),
                    ("evidence-witness", witness.encode())])


def produce_tree(bootstrap: str, topic: str, messages, transactional: bool = False) -> None:
    """Produce ``(value, headers)`` to the tree topic in order (one partition)."""
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    if transactional:
        conf["transactional.id"] = f"test-tree-{os.getpid()}-{next(_tx)}"
    p = Producer(conf)
    errors: list[str] = []
    if transactional:
        p.init_transactions(30)
        p.begin_transaction()
    for value, headers in messages:
        p.produce(topic, value=value, headers=headers, partition=0,
                  on_delivery=lambda err, _m: err is not None and errors.append(str(err)))
    if transactional:
        p.commit_transaction(60)
    assert p.flush(60) == 0 and not errors, errors


def q(cfg, sql, params=()):
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def live(cfg):
    return q(cfg, f'select generation from "{cfg.meta_schema}".live')[0][0]


def log_tables(cfg, schema: str):
    """Everything of the deployment log in ``schema`` but when it was projected."""
    s = f'"{schema}"'
    return {
        "entries": q(cfg, f"select idx, stream, tree_size, entry, log_offset "
                          f"from {s}.log_entries order by idx"),
        "nodes": q(cfg, f"select level, idx, hash from {s}.log_nodes order by level, idx"),
        "checkpoints": q(cfg, f"select tree_size, root, note, log_offset, root_matches "
                              f"from {s}.log_checkpoints order by tree_size"),
        "cosignatures": q(cfg, f"select tree_size, witness, key_id, timestamp, line, log_offset "
                               f"from {s}.log_cosignatures order by 1, 2, 3"),
    }


def tree_findings(cfg, schema: str):
    return q(cfg, f'select kind, stream, seq, detail from "{schema}".findings '
                  f"where detail like %s order by detail", (f"%{cfg.tree_topic} partition%",))


def perfect_subtrees(values):
    """Every perfect subtree hash of the tree over ``values`` as entries: (level, idx) -> hash."""
    levels = MerkleTree([leaf_hash(v) for v in values])._levels
    return {(lv, i): h for lv, level in enumerate(levels) for i, h in enumerate(level)}


def matches(cfg):
    """Size -> root_matches of the deployment checkpoints projected (None: no views yet)."""
    try:
        return dict(q(cfg, f'select tree_size, root_matches '
                           f'from "{cfg.views_schema}".log_checkpoints'))
    except psycopg.errors.UndefinedTable:
        return None


def entries(cfg):
    try:
        return q(cfg, f'select count(*) from "{cfg.views_schema}".log_entries')[0][0]
    except psycopg.errors.UndefinedTable:
        return 0


def test_the_projector_folds_the_tree_topic_and_a_rebuild_gives_the_same_tables(
        make_topics, make_projection_config, produce_chain, kafka_bootstrap, log_key):
    key, vkey_file = log_key
    other = generate_signer(DEFAULT_LOG_NAME)  # the log's name, not its key: a forgery
    witness = generate_signer("witness.example/w1", SIG_COSIGNATURE_V1)
    topics = make_topics(partitions=2)
    cfg = make_projection_config(topics, log_verifier_key_file=vkey_file)
    produce_chain(topics, streams={"s0": 5, "s1": 3})

    # Six good entries and a forged one (an entry all the same), then the deployment
    # checkpoints: size 3 with a wrong root, size 7 cosigned, size 10 before the tree has it.
    named = [("s0", 1), ("s1", 1), ("s0", 2), ("s1", 2), ("s0", 99), ("s0", 3), ("s1", 3)]
    values = [stream_entry(other if n == 99 else key, s, n) for s, n in named]
    first = [entry(v, s, n) for v, (s, n) in zip(values, named)]
    later = [stream_entry(key, "s2", n) for n in (1, 2, 3)]
    tree = MerkleTree([leaf_hash(v) for v in values + later])
    cosigned = deployment_checkpoint(key, 7, tree.root(7), witness)
    produce_tree(kafka_bootstrap, cfg.tree_topic, first[:3])
    produce_tree(kafka_bootstrap, cfg.tree_topic, first[3:] + [
        log_checkpoint(deployment_checkpoint(key, 3, tree.root(2)), 3),
        log_checkpoint(deployment_checkpoint(key, 7, tree.root(7)), 7),
        log_cosignature(cosigned, 7, witness.name),
        log_checkpoint(deployment_checkpoint(key, 10, tree.root(10)), 10),
        log_checkpoint(deployment_checkpoint(other, 8, tree.root(8)), 8),
    ], transactional=True)

    with running_projector(cfg):
        wait_until("7 entries, sizes 3 and 7 checked",
                   lambda: matches(cfg) == {3: False, 7: True, 10: None})
    gen = live(cfg)
    got = log_tables(cfg, gen)
    assert [(r[0], r[1], r[2], bytes(r[3])) for r in got["entries"]] == [
        (i, s, n, v) for i, (v, (s, n)) in enumerate(zip(values, named))]
    assert {(lv, i): bytes(h) for lv, i, h in got["nodes"]} == perfect_subtrees(values)
    (cosig,) = got["cosignatures"]
    assert (cosig[0], cosig[1], cosig[2], cosig[3]) == (7, witness.name, witness.verifier.key_id,
                                                        1_700_000_000)
    assert cosigned.decode().endswith(cosig[4])
    kinds = [(k, s, n) for k, s, n, _d in tree_findings(cfg, gen)]
    assert sorted(kinds, key=repr) == sorted([("checkpoint_invalid", "s0", None),
                                              ("checkpoint_invalid", None, None),
                                              ("checkpoint_mismatch", None, 3)], key=repr), kinds

    # The read functions the publisher calls.
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        assert logtree.tree_size(conn, cfg.views_schema) == 7
        nodes = logtree.read_nodes(conn, cfg.views_schema, [(0, 6), (2, 0), (1, 2), (1, 3)])
        assert nodes == {(0, 6): leaf_hash(values[6]), (2, 0): tree._levels[2][0],
                         (1, 2): tree._levels[1][2]}
        assert logtree.read_entries(conn, cfg.views_schema, 5, 9) == values[5:7]

    # A restart: the tree grows on from what is stored, and size 10 is checked when reached.
    produce_tree(kafka_bootstrap, cfg.tree_topic,
                 [entry(v, "s2", n) for n, v in enumerate(later, 1)], transactional=True)
    with running_projector(cfg):
        wait_until("size 10 checked", lambda: (matches(cfg) or {}).get(10) is not None)
    assert matches(cfg) == {3: False, 7: True, 10: True}
    before, found = log_tables(cfg, gen), tree_findings(cfg, gen)
    assert [bytes(r[3]) for r in before["entries"]] == values + later
    assert {(lv, i): bytes(h) for lv, i, h in before["nodes"]} == perfect_subtrees(values + later)
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        assert logtree.tree_size(conn, cfg.views_schema) == 10

    # A rebuild from offset 0 gives the same deployment log, and swaps (nothing differs).
    result = rebuild(cfg)
    assert result.previous == gen and live(cfg) == result.generation != gen
    assert log_tables(cfg, result.generation) == before
    assert tree_findings(cfg, result.generation) == found


def test_a_rebuild_says_when_the_live_deployment_log_differs(
        make_topics, make_projection_config, kafka_bootstrap, log_key, produce_chain):
    key, vkey_file = log_key
    topics = make_topics(partitions=1)
    cfg = make_projection_config(topics, log_verifier_key_file=vkey_file)
    produce_chain(topics, streams={"a": 2})
    values = [stream_entry(key, "a", n) for n in (1, 2)]
    produce_tree(kafka_bootstrap, cfg.tree_topic, [entry(v, "a", n) for n, v in
                                                   enumerate(values, 1)])
    with running_projector(cfg):
        wait_until("2 entries", lambda: entries(cfg) == 2)
    gen = live(cfg)
    q(cfg, f'update "{gen}".log_entries set entry = %s where idx = 1 returning idx', (b"x",))
    from projections.errors import RebuildMismatch

    with pytest.raises(RebuildMismatch) as e:
        rebuild(cfg)
    assert any("deployment log entries" in d for d in e.value.differences), e.value.differences


def test_without_the_tree_topic_the_projector_projects_records(
        make_topics, make_projection_config, kafka_bootstrap, produce_chain, log_key):
    from confluent_kafka.admin import AdminClient

    topics = make_topics(partitions=2)
    cfg = make_projection_config(topics, log_verifier_key_file=log_key[1])
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for fut in admin.delete_topics([cfg.tree_topic], operation_timeout=30).values():
        fut.result()
    wait_until("the tree topic gone", lambda: cfg.tree_topic not in admin.list_topics(
        timeout=10).topics)
    produce_chain(topics, streams={"x": 4, "y": 2})
    with running_projector(cfg):
        wait_until("6 records", lambda: projected(cfg) == 6)
    assert q(cfg, f'select count(*) from "{cfg.views_schema}".log_entries') == [(0,)]
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        assert logtree.tree_size(conn, cfg.views_schema) == 0
        assert logtree.read_nodes(conn, cfg.views_schema, [(0, 0)]) == {}


def test_two_projectors_fold_the_tree_once_and_the_survivor_takes_it_over(
        make_topics, make_projection_config, kafka_bootstrap, produce_chain, log_key):
    key, vkey_file = log_key
    topics = make_topics(partitions=4)
    cfg = make_projection_config(topics, log_verifier_key_file=vkey_file,
                                 group_session_timeout_ms=6000)
    produce_chain(topics, streams={f"p{i}": 3 for i in range(8)})
    values = [stream_entry(key, f"p{i % 8}", 1 + i // 8) for i in range(40)]

    def put(lo, hi, transactional=False):
        produce_tree(kafka_bootstrap, cfg.tree_topic,
                     [entry(values[i], f"p{i % 8}", 1 + i // 8) for i in range(lo, hi)],
                     transactional=transactional)

    # The first projector alone owns log partition 0 and so the tree; a second joins, the
    # first stops: the tree topic has changed hands at least once, at a stored position.
    with running_projector(cfg) as first:
        put(0, 15)
        wait_until("15 entries", lambda: entries(cfg) == 15)
        with running_projector(cfg):
            put(15, 25)
            wait_until("25 entries", lambda: entries(cfg) == 25)
            first.stop.set()
            first.thread.join(30)
            put(25, 40, transactional=True)
            wait_until("40 entries", lambda: entries(cfg) == 40, timeout=60)
    got = q(cfg, f'select idx, entry, log_offset from "{cfg.views_schema}".log_entries '
                 f"order by idx")
    assert [bytes(r[1]) for r in got] == values
    assert [r[2] for r in got] == sorted({r[2] for r in got})  # each message once, in order
    with psycopg.connect(cfg.database_url, autocommit=True) as conn:
        assert logtree.read_nodes(conn, cfg.views_schema, [(5, 0)]) == {
            (5, 0): MerkleTree([leaf_hash(v) for v in values]).root(32)}
