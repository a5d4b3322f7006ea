"""Generations and the stable views over them (PostgreSQL DDL).

Layout in the database:
- ``evidence_meta.generations`` — one row per generation schema (``evidence_g<N>``), its state
  (building | live | retired) and when it was made.
- ``evidence_meta.live`` — a single row naming the live generation. Writers of the live
  generation (the projector) take it ``FOR SHARE`` per batch; a swap takes it ``FOR UPDATE``,
  so a swap waits for the batch in flight and the next batch sees the new generation.
- schema ``evidence`` (the *views schema*) — views ``records``, ``heads``, ``findings``,
  ``positions``, ``heartbeat`` over the live generation. Readers only query these. Re-pointing them is one
  transaction, so a reader sees the old generation or the new one, never a mix; dropping the
  old generation afterwards waits for queries still reading it (they hold its tables' locks).

Tests use their own meta and views schemas (``meta=``, ``views=``) so they never touch the
stack's.
"""

from __future__ import annotations

from importlib import resources

TABLES = ("records", "heads", "findings", "positions", "heartbeat")

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


def _schema_lines(gen: str) -> list[str]:
    text = resources.files("projections").joinpath("schema.sql").read_text()
    return text.replace("{gen}", f'"{gen}"').splitlines(keepends=True)


def generation_sql(gen: str, indexes: bool = True) -> str:
    """The tables of one generation; ``indexes=False`` leaves out the secondary indexes
    (one-line ``create index`` statements), for a bulk load that adds them afterwards."""
    return "".join(line for line in _schema_lines(gen)
                   if indexes or not line.lower().startswith("create index"))


def index_sql(gen: str) -> str:
    """The secondary indexes that ``generation_sql(gen, indexes=False)`` left out."""
    return "".join(line for line in _schema_lines(gen)
                   if line.lower().startswith("create index"))


def create_indexes(conn, gen: str) -> None:
    """Add the secondary indexes to a generation made with ``indexes=False``."""
    conn.execute(index_sql(gen))


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


def create_generation(conn, meta: str = "evidence_meta", prefix: str = "evidence_g",
                      indexes: bool = True) -> str:
    """Create the next generation schema with empty tables; returns its name.

    A rebuild passes ``indexes=False`` and calls :func:`create_indexes` after its bulk load:
    building an index once by sorting is cheaper than maintaining it row by row."""
    ensure_meta(conn, meta)
    n = conn.execute(
        f"""select coalesce(max(substring(name from '([0-9]+)$')::int), 0) + 1
            from "{meta}".generations""").fetchone()[0]
    gen = f"{prefix}{n}"
    conn.execute(f'create schema "{gen}"')
    conn.execute(generation_sql(gen, indexes))
    ensure_heartbeat(conn, gen)
    conn.execute(f'insert into "{meta}".generations (name, state) values (%s, %s)',
                 (gen, "building"))
    return gen


def point_views(conn, gen: str, views: str = "evidence") -> None:
    """(Re)create the stable views over ``gen``; call inside the swap's transaction."""
    ensure_heartbeat(conn, gen)
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
