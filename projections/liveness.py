"""The liveness role: what the API reads to say whether the projections keep up.

A projector follows a generation (:meth:`LivenessStore.follow`: the tables and views that
generations older than them lack), beats a heartbeat into it (the log's end offsets as Kafka
said them, stamped with the server's ``now()``), and after each committed batch tells the
API's waiters which stream heads moved (``pg_notify``, :mod:`projections.notify`).
"""

from __future__ import annotations

from typing import Iterable, Mapping

from . import ddl
from .notify import heads_channel, payload as notice
from .pg import Connection, errors

__all__ = ["FOLLOWED_TABLES", "LivenessStore"]

FOLLOWED_TABLES = ("heartbeat", "tree_nodes", "trees", "checkpoints", "cosignatures",
                   "erasures", "redaction", "log_entries", "log_nodes", "log_checkpoints",
                   "log_cosignatures")
"""The tables generations made before them may lack, and the views schema may not show yet."""


class LivenessStore:
    """Heartbeats and head notices on the shared :class:`~projections.pg.Connection` ``db``."""

    def __init__(self, db: Connection) -> None:
        self.db = db

    def follow(self, gen: str) -> None:
        """Before projecting into ``gen``: make sure it has a heartbeat table and the
        verifiable log's tables and, when it is the live generation, that the views schema
        shows them (generations older than those have neither); under the live row's share
        lock, so no swap runs between."""
        db, conn, views = self.db, self.db.conn, self.db.cfg.views_schema
        with db.transaction():
            # Projectors starting side by side would race to create the same tables and
            # views (the loser failing on a duplicate name): one at a time.
            db.advisory_lock(f"{db.meta}.follow")
            live = db.live() == gen
            for ensure in (ddl.ensure_heartbeat, ddl.ensure_tlog, ddl.ensure_erasures,
                           ddl.ensure_traces, ddl.ensure_redaction, ddl.ensure_logtree):
                ensure(conn, gen)
            for table in FOLLOWED_TABLES:
                if live and not db.has_table(views, table):
                    conn.execute(f'create schema if not exists "{views}"')
                    conn.execute(f'create view "{views}".{table} as '
                                 f'select * from "{gen}".{table}')
            if live and conn.execute(
                    "select count(*) < 2 from information_schema.columns where table_schema = %s "
                    "and table_name = 'records' and column_name in ('key_id', 'trace_id')",
                    (views,)).fetchone()[0]:
                # A records view made before the key id or the trace columns: the columns
                # were added last, so the view can be replaced in place (readers keep reading).
                conn.execute(f'create or replace view "{views}".records as '
                             f'select * from "{gen}".records')

    def beat(self, gen: str, topic: str, end_offsets: Mapping[int, int]) -> bool:
        """The heartbeat: ``end_offsets`` (partition -> the log's end as Kafka said it just
        now) stamped with the server's ``now()``. Only into the live generation, under the
        live row's share lock (a swap, and the drop of the generation it retires, wait);
        False, nothing written, when ``gen`` is no longer live (the next batch says so)."""
        parts = sorted(end_offsets)
        with self.db.transaction():
            if self.db.live() != gen:
                return False
            self.db.conn.execute(
                f'insert into "{gen}".heartbeat as h (topic, partition, end_offset, beat_at) '
                f"select %s, p, e, now() from unnest(%s::int[], %s::bigint[]) v(p, e) "
                f"on conflict (topic, partition) do update "
                f"set end_offset = excluded.end_offset, beat_at = excluded.beat_at",
                (topic, parts, [end_offsets[p] for p in parts]))
        return True

    def heartbeat(self, gen: str) -> tuple[float | None, dict[tuple[str, int], int]]:
        """(seconds since ``gen``'s oldest partition heartbeat or None if it has none, end
        offsets by (topic, partition)). Several projectors each beat the partitions they
        own; the oldest beat is the one that says whether every partition is being
        projected. Keyed by topic too: the same partition numbers of the checkpoints and
        erasures topics have other ends than the log's."""
        with errors("read heartbeat"):
            if not self.db.has_table(gen, "heartbeat"):
                return None, {}
            rows = self.db.conn.execute(
                f"select topic, partition, end_offset, "
                f"extract(epoch from now() - beat_at)::float8 "
                f'from "{gen}".heartbeat').fetchall()
        ages = [r[3] for r in rows]
        return (max(ages) if ages else None), {(r[0], r[1]): r[2] for r in rows}

    def notify_heads(self, streams: Iterable[str]) -> None:
        """After a live batch committed: tell the API's waiters which heads moved (see
        :mod:`projections.notify`; a statement of its own, never inside a batch)."""
        with errors("notify heads"):
            self.db.conn.execute("select pg_notify(%s, %s)",
                                 (heads_channel(self.db.cfg.views_schema), notice(streams)))
