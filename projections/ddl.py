"""Generations and the stable views over them (PostgreSQL DDL).

Layout in the database:
- ``evidence_meta.generations`` — one row per generation schema (``evidence_g<N>``), its state
  (building | live | retired) and when it was made.
- ``evidence_meta.live`` — a single row naming the live generation. Writers of the live
  generation (the projector) take it ``FOR SHARE`` per batch; a swap takes it ``FOR UPDATE``,
  so a swap waits for the batch in flight and the next batch sees the new generation.
- ``evidence_meta.accepted_swaps`` — one row per rebuilt generation swapped in although it
  disagreed with the live one (``evidence projections rebuild --accept-differences``): who,
  when, why, what differed and what the log said of both (:data:`ACCEPTED_SWAPS`).
- schema ``evidence`` (the *views schema*) — views ``records``, ``heads``, ``findings``,
  ``positions``, ``heartbeat`` and the verifiable log's ``tree_nodes``, ``trees``,
  ``checkpoints``, ``cosignatures`` (:data:`TLOG`), ``erasures`` (:data:`ERASURES`) and the
  deployment log's ``log_entries``, ``log_nodes``, ``log_checkpoints``, ``log_cosignatures``
  (:data:`LOGTREE`) over the live generation. Readers only query these. Re-pointing them is one
  transaction, so a reader sees the old generation or the new one, never a mix; dropping the
  old generation afterwards waits for queries still reading it (they hold its tables' locks).

Tests use their own meta and views schemas (``meta=``, ``views=``) so they never touch the
stack's.
"""

from __future__ import annotations

import json
from importlib import resources

TABLES = ("records", "heads", "findings", "positions", "heartbeat", "tree_nodes", "trees",
          "checkpoints", "cosignatures", "erasures", "redaction", "log_entries", "log_nodes",
          "log_checkpoints", "log_cosignatures")

HEARTBEAT = """create table if not exists {gen}.heartbeat (
    topic       text        not null,
    partition   integer     not null,
    end_offset  bigint      not null,
    beat_at     timestamptz not null default now(),
    primary key (topic, partition))"""
"""The projector's heartbeat, beside its positions: every few seconds while it runs, the log's
end offsets as Kafka reports them (read_committed: the last stable offset) and when. A dead
projector stops beating while its positions keep saying "lag 0", so readiness goes by the age
of ``beat_at`` and measures lag against ``end_offset``. ``if not exists``: generations made
before it existed get it when the projector follows them (:func:`ensure_heartbeat`)."""


def ensure_heartbeat(conn, gen: str) -> None:
    """Create ``gen``'s heartbeat table if it has none (a generation older than it)."""
    conn.execute(HEARTBEAT.replace("{gen}", f'"{gen}"'))


TLOG = """
create table if not exists {gen}.tree_nodes (
    stream  text     not null,
    level   smallint not null,   -- 0: the leaf hashes (leaf seq - 1)
    idx     bigint   not null,   -- covers leaves [idx * 2^level, (idx + 1) * 2^level)
    hash    bytea    not null,
    primary key (stream, level, idx));
create table if not exists {gen}.trees (
    stream  text   primary key,
    size    bigint not null,     -- records in the tree: the stream's gapless prefix
    root    bytea  not null);
create table if not exists {gen}.checkpoints (
    stream         text    not null,
    tree_size      bigint  not null,
    root           bytea   not null,
    note           bytea   not null,   -- the signed note, verbatim as on the topic
    log_partition  integer not null,   -- its position on <prefix>.checkpoints
    log_offset     bigint  not null,
    root_matches   boolean,            -- null until the projected tree reaches tree_size
    projected_at   timestamptz not null default now(),
    primary key (stream, tree_size));
create table if not exists {gen}.cosignatures (
    stream         text    not null,
    tree_size      bigint  not null,
    witness        text    not null,   -- the witness key's name
    key_id         bigint  not null,
    timestamp      bigint  not null,   -- the cosignature's POSIX time
    line           text    not null,   -- the signature line, as a note holds it
    log_partition  integer not null,
    log_offset     bigint  not null,
    primary key (stream, tree_size, witness, key_id))"""
"""The verifiable log's tables (:mod:`projections.tlog`): every perfect subtree hash of each
stream's Merkle tree and its size and root, written with the records in one transaction; the
checkpoints and cosignatures folded from ``<prefix>.checkpoints``. ``if not exists``: a
generation made before them gets them when the projector follows it (its trees then start
empty and do not grow past its first record: rebuild it to have proofs)."""


TREE_NODES_KEY = (
    "create unique index tree_nodes_pkey on {gen}.tree_nodes (stream, level, idx)",
    "alter table {gen}.tree_nodes add constraint tree_nodes_pkey primary key "
    "using index tree_nodes_pkey")
"""``tree_nodes``' key, which a bulk load adds after its rows (:func:`index_statements`): its
unique index, then the constraint made of it."""


def ensure_tlog(conn, gen: str, indexes: bool = True) -> None:
    """Create ``gen``'s verifiable-log tables if it has none (a generation older than them);
    ``indexes=False``: ``tree_nodes`` without its key (:data:`TREE_NODES_KEY`)."""
    sql = TLOG
    if not indexes:
        sql = sql.replace(",\n    primary key (stream, level, idx));", ");")
        assert "primary key (stream, level, idx)" not in sql
    conn.execute(sql.replace("{gen}", f'"{gen}"'))


LOGTREE = """
create table if not exists {gen}.log_entries (
    idx         bigint primary key,   -- the entry's leaf index in the deployment tree
    stream      text   not null,      -- the stream checkpoint it is ('' if it says none)
    tree_size   bigint not null,
    entry       bytea  not null,      -- the note, verbatim as the message value
    log_offset  bigint not null);     -- its offset on <prefix>.tree (one partition)
create table if not exists {gen}.log_nodes (
    level   smallint not null,        -- 0: the leaf hashes, SHA-256(0x00 || entry)
    idx     bigint   not null,        -- covers entries [idx * 2^level, (idx + 1) * 2^level)
    hash    bytea    not null,
    primary key (level, idx));
create table if not exists {gen}.log_checkpoints (
    tree_size     bigint  primary key,
    root          bytea   not null,
    note          bytea   not null,   -- the log-signed note (no cosignature lines)
    log_offset    bigint  not null,
    root_matches  boolean,            -- null until the projected tree reaches tree_size
    projected_at  timestamptz not null default now());
create table if not exists {gen}.log_cosignatures (
    tree_size   bigint not null,
    witness     text   not null,      -- the witness key's name
    key_id      bigint not null,
    timestamp   bigint not null,      -- the cosignature's POSIX time
    line        text   not null,      -- the signature line, as a note holds it
    log_offset  bigint not null,
    primary key (tree_size, witness, key_id));
-- A bundle's path to the deployment log: the first entry of a stream that covers a seq.
create index if not exists log_entries_stream on {gen}.log_entries (stream, tree_size, idx)"""
"""The deployment log (docs/witnessing.md, :mod:`projections.logtree`) folded from
``<prefix>.tree``: its entries (the stream checkpoints, in commit order), every perfect
subtree hash of its tree, the deployment checkpoints and their witnesses' cosignatures. The
tree topic's position is a ``positions`` row like any topic's, written with these rows.
``if not exists``: a generation made before them gets them when the projector follows it
(and its tree from the topic's offset 0 then)."""


def ensure_logtree(conn, gen: str) -> None:
    """Create ``gen``'s deployment-log tables if it has none (a generation older than them).
    Their keys come with them, also for a bulk load: it never writes them (the tree topic is
    folded batch by batch, after the records)."""
    conn.execute(LOGTREE.replace("{gen}", f'"{gen}"'))


ERASURES = """
alter table {gen}.records add column if not exists key_id bytea;
create table if not exists {gen}.erasures (
    request_id     text    not null,
    key_id         bytea,               -- one row per key id erased; null: the request erased none
    erased_at      timestamptz not null,
    erased_at_us   bigint  not null,    -- exact micros, as the receipt says
    note           bytea   not null,    -- the signed receipt, verbatim as on the topic
    log_partition  integer not null,    -- its position on <prefix>.erasures
    log_offset     bigint  not null,
    reason         text,                -- the request's reason (a header; not signed)
    projected_at   timestamptz not null default now());
create unique index if not exists erasures_request_key
    on {gen}.erasures (request_id, coalesce(key_id, ''::bytea));
create index if not exists erasures_key_id on {gen}.erasures (key_id)"""
"""Erasure receipts folded from ``<prefix>.erasures`` (:mod:`projections.erasures`) and the
records' key id: a record is erased when its ``key_id`` is in ``erasures``. ``if not
exists``: a generation made before them gets them when the projector follows it (its older
records then have a null key id until a rebuild)."""


ERASURES_INDEX = """create index if not exists records_key_id_idx on {gen}.records (key_id)
    where key_id is not null"""
"""Which records an erasure shreds; a secondary index (a bulk load adds it afterwards)."""


TRACES = """
alter table {gen}.records add column if not exists trace_id bytea;
alter table {gen}.records add column if not exists span_id bytea;
alter table {gen}.records add column if not exists mapped boolean not null default false;
alter table {gen}.records add column if not exists corroborates uuid"""
"""The records' trace context and telemetry mapping (record contract 2.2: ``trace``,
``telemetry``). ``if not exists``: a generation made before them gets them when the projector
follows it, appended after its other columns; its rows are of earlier contracts, which have no
trace and are never mapped, so null and false are what they say."""

TRACES_INDEX = """create index if not exists records_trace_id_idx on {gen}.records (trace_id)
    where trace_id is not null"""
"""The records of a trace (``GET /traces/{trace_id}/records``); a secondary index (a bulk
load adds it afterwards)."""


def ensure_traces(conn, gen: str, indexes: bool = True) -> None:
    """Give ``gen``'s records the 2.2 columns and (``indexes``) the trace index if missing."""
    conn.execute(TRACES.replace("{gen}", f'"{gen}"'))
    if indexes:
        conn.execute(TRACES_INDEX.replace("{gen}", f'"{gen}"'))


def ensure_erasures(conn, gen: str, indexes: bool = True) -> None:
    """Create ``gen``'s erasures table, records.key_id and (``indexes``) its index if missing."""
    conn.execute(ERASURES.replace("{gen}", f'"{gen}"'))
    if indexes:
        conn.execute(ERASURES_INDEX.replace("{gen}", f'"{gen}"'))


REDACTION = """create table if not exists {gen}.redaction (
    singleton    boolean primary key default true check (singleton),
    policy       jsonb,               -- the policy's canonical JSON; null: no policy
    digest       bytea,               -- projections.redact.Policy.digest; null: no policy
    recorded_at  timestamptz not null default now())"""
"""The redaction policy (:mod:`projections.redact`) the generation's rows were built with,
one row, written when the generation is made (or, for a generation made before the table, by
the first projector that follows it). No row: not recorded (a generation older than
redaction, built without a policy). The API's stream audit and ``evidence audit`` recompute
rows with it; a rebuild compares it with the new generation's."""


def ensure_redaction(conn, gen: str) -> None:
    """Create ``gen``'s redaction table if it has none (a generation older than it)."""
    conn.execute(REDACTION.replace("{gen}", f'"{gen}"'))


def record_redaction(conn, gen: str, policy) -> None:
    """Store ``policy`` (a ``projections.redact.Policy`` or None) as ``gen``'s, once."""
    ensure_redaction(conn, gen)
    conn.execute(f'insert into "{gen}".redaction (policy, digest) values (%s::jsonb, %s) '
                 f"on conflict (singleton) do nothing",
                 (None if policy is None else json.dumps(policy.canonical(), sort_keys=True),
                  None if policy is None else policy.digest))


def _schema_lines(gen: str) -> list[str]:
    text = resources.files("projections").joinpath("schema.sql").read_text()
    return text.replace("{gen}", f'"{gen}"').splitlines(keepends=True)


def _is_build(line: str) -> bool:
    return line.lower().startswith(("create index", "create unique index"))


def _is_attach(line: str) -> bool:
    line = line.lower()
    return line.startswith("alter table") and " using index " in line


def _is_index(line: str) -> bool:
    return _is_build(line) or _is_attach(line)


def generation_sql(gen: str, indexes: bool = True) -> str:
    """The tables of one generation; ``indexes=False`` leaves out the indexes (one-line
    ``create [unique] index`` statements, and the ``alter table ... using index`` that makes
    the records' key of its unique index), for a bulk load that adds them afterwards."""
    return "".join(line for line in _schema_lines(gen) if indexes or not _is_index(line))


def index_sql(gen: str) -> str:
    """The indexes that ``generation_sql(gen, indexes=False)`` left out."""
    return "".join(line for line in _schema_lines(gen) if _is_index(line))


def index_statements(gen: str) -> tuple[list[str], list[str]]:
    """``(builds, attaches)``: what adds the indexes to a generation made with
    ``indexes=False`` (``Store.create_indexes`` runs them). The builds are independent, so
    they can run side by side: a primary key is stated as its unique index (``create index``
    locks out writes only, where ``add primary key`` would lock out the other builds), which
    the attaches then make the key (``using index``: no second scan). Built once by sorting,
    an index costs less than maintained row by row through a bulk load."""
    q = f'"{gen}"'
    lines = [line.strip().rstrip(";") for line in index_sql(gen).splitlines() if line.strip()]
    lines += [stmt.replace("{gen}", q) for stmt in TREE_NODES_KEY]
    builds = [line for line in lines if _is_build(line)]
    attaches = [line for line in lines if _is_attach(line)]
    builds.append(ERASURES_INDEX.replace("{gen}", q))
    builds.append(TRACES_INDEX.replace("{gen}", q))
    return builds, attaches





ACCEPTED_SWAPS = """create table if not exists {meta}.accepted_swaps (
    id           bigint      generated always as identity primary key,
    accepted_at  timestamptz not null default now(),
    accepted_by  text        not null,   -- the operator (OS user@host of the rebuild)
    db_user      text        not null default session_user,
    reason       text        not null,   -- --reason, verbatim
    previous     text        not null,   -- the live generation replaced (kept, retired)
    generation   text        not null,   -- the rebuilt generation swapped in
    differences  text[]      not null,   -- what the pre-swap check found differing
    verdict      text[]      not null)   -- what the log said of both (the audit)"""
"""The record of differences accepted at a swap. No reference to ``generations``: the
generations named are dropped by later rebuilds, the record stays."""


def ensure_meta(conn, meta: str = "evidence_meta") -> None:
    conn.execute(f'create schema if not exists "{meta}"')
    conn.execute(f'''create table if not exists "{meta}".generations (
        name        text primary key,
        state       text not null check (state in ('building', 'live', 'retired')),
        created_at  timestamptz not null default now(),
        swapped_at  timestamptz)''')
    conn.execute(f'''create table if not exists "{meta}".live (
        singleton   boolean primary key default true check (singleton),
        generation  text not null references "{meta}".generations(name))''')
    conn.execute(ACCEPTED_SWAPS.replace("{meta}", f'"{meta}"'))


def create_generation(conn, meta: str = "evidence_meta", prefix: str = "evidence_g",
                      indexes: bool = True, redaction=None) -> str:
    """Create the next generation schema with empty tables; returns its name.

    A rebuild passes ``indexes=False`` and runs :func:`index_statements` after its bulk load:
    building an index once by sorting is cheaper than maintaining it row by row.
    ``redaction``: the policy its rows are built with (recorded in its ``redaction`` table)."""
    ensure_meta(conn, meta)
    n = conn.execute(
        f"""select coalesce(max(substring(name from '([0-9]+)$')::int), 0) + 1
            from "{meta}".generations""").fetchone()[0]
    gen = f"{prefix}{n}"
    conn.execute(f'create schema "{gen}"')
    conn.execute(generation_sql(gen, indexes))
    ensure_heartbeat(conn, gen)
    ensure_tlog(conn, gen, indexes)
    ensure_erasures(conn, gen, indexes)
    ensure_traces(conn, gen, indexes)
    ensure_logtree(conn, gen)
    record_redaction(conn, gen, redaction)
    conn.execute(f'insert into "{meta}".generations (name, state) values (%s, %s)',
                 (gen, "building"))
    return gen


def point_views(conn, gen: str, views: str = "evidence") -> None:
    """(Re)create the stable views over ``gen``; call inside the swap's transaction."""
    ensure_heartbeat(conn, gen)
    ensure_tlog(conn, gen)
    ensure_erasures(conn, gen)
    ensure_traces(conn, gen)
    ensure_redaction(conn, gen)
    ensure_logtree(conn, gen)
    conn.execute(f'create schema if not exists "{views}"')
    for table in TABLES:
        conn.execute(f'drop view if exists "{views}".{table}')
        conn.execute(f'create view "{views}".{table} as select * from "{gen}".{table}')


def make_live(conn, gen: str, meta: str = "evidence_meta", views: str = "evidence") -> str | None:
    """Swap ``gen`` in as the live generation; returns the previous one (to drop later).

    Must run in a transaction: the live row is locked, the views re-pointed and the states
    updated together.
    """
    row = conn.execute(f'select generation from "{meta}".live for update').fetchone()
    previous = row[0] if row else None
    point_views(conn, gen, views)
    if previous is not None:
        # The projector's heartbeat carries over: the same projector goes on beating, into
        # ``gen`` from its next batch, and readiness must not flap in between.
        ensure_heartbeat(conn, previous)
        conn.execute(f'insert into "{gen}".heartbeat select * from "{previous}".heartbeat '
                     f"on conflict (topic, partition) do nothing")
    if previous is None:
        conn.execute(f'insert into "{meta}".live (generation) values (%s)', (gen,))
    else:
        conn.execute(f'update "{meta}".live set generation = %s', (gen,))
        conn.execute(f"""update "{meta}".generations set state = 'retired'
                         where name = %s""", (previous,))
    conn.execute(f"""update "{meta}".generations set state = 'live', swapped_at = now()
                     where name = %s""", (gen,))
    return previous


def drop_generation(conn, gen: str, meta: str = "evidence_meta") -> None:
    conn.execute(f'drop schema if exists "{gen}" cascade')
    conn.execute(f'delete from "{meta}".generations where name = %s', (gen,))
