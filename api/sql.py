"""The read model's SQL: the columns each kind of row has and the queries :class:`api.db.Database`
runs, built once per views schema.

Every query reads the stable views (``<views_schema>.records`` etc.), never a generation, so a
projection rebuild swaps under the API without it noticing. :func:`queries` names each query;
a query with ``{scope}`` takes the caller's stream condition (``api.auth.Scope.sql``).

A record is *erased* when its ``key_id`` (its ``encryption.key_id``) is in the ``erasures`` view
(folded from the log's signed receipts): every record query adds :data:`ERASED_COLUMNS`, the
earliest erasure of the record's key (its µs and request id, null for a record that is plain
or whose key is live), by an indexed subquery on ``erasures.key_id`` (:func:`erased_sql`).

A lookup by event id is scoped to the caller's streams: an event id is unique only within what
one writer dedups, so a record of another stream that reuses it must neither hide the caller's
record nor be verified in its place. Among the records with that id the key may read, it
answers the original by the contract's rule (``evidence_contract.chain.Sighting.order``: the
earliest ``occurred_at``, then the log position; the projector flags every other one
``duplicate_event_id``), never a copy, and adds :data:`EVENT_COLUMNS` (:func:`event_sql`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from projections.columns import RECORD_COLUMNS

__all__ = ["BYTES_COLUMNS", "ERASED_COLUMNS", "EVENT_COLUMNS", "FINDING_COLUMNS", "HEAD_COLUMNS",
           "META_COLUMNS", "VERIFY_COLUMNS", "RecordFilter", "bound_sql", "erased_sql",
           "event_sql", "filter_sql", "meta_select", "queries", "records_sql"]

META_COLUMNS = (
    "stream", "seq", "event_id", "schema_version", "occurred_at", "occurred_at_us",
    "captured_at", "outcome", "content_key", "prev_digest", "record_digest",
    "response_digest", "output_digest", "input_digest", "prompt_digest", "provider_name",
    "provider_endpoint", "provider_api_version", "model_id", "response_model", "fingerprint",
    "params", "http_status", "response_content_type", "seed", "temperature", "top_p",
    "deterministic", "request_policy", "streamed", "closed_early", "truncated", "writer_id",
    "request_length", "response_length", "log_partition", "log_offset",
    "trace_id", "span_id", "mapped", "corroborates", "telemetry_record",
)
_META_EXPRESSIONS = {"telemetry_record": "case when mapped then record_bytes end"}
"""META_COLUMNS that are not columns: ``telemetry_record`` is a record mapped from telemetry's
log message (null for any other record), whose ``telemetry`` the API shows; the rest of the
mapping is not projected."""


def meta_select() -> str:
    """``META_COLUMNS`` as a select list."""
    return ", ".join(_META_EXPRESSIONS.get(c, c) for c in META_COLUMNS)


ERASED_COLUMNS = ("key_id", "erased_at_us", "erasure_request_id")
"""After ``META_COLUMNS`` in every record query: the record's key id (null: plain) and, when
that key was erased, the earliest erasure's µs and request id."""
BYTES_COLUMNS = ("request_bytes", "response_bytes", "error_bytes", "input_bytes",
                 "prompt_bytes", "record_bytes")
VERIFY_COLUMNS = ("stream", "seq", "output_digest", "response_digest", "deterministic",
                  "seed", "model_version", "outcome", "endpoint", "telemetry_record")
"""Then ``ERASED_COLUMNS``: a verify row is ``VERIFY_COLUMNS + ERASED_COLUMNS``.
``telemetry_record`` is a mapped record's log message (null for any other), whose telemetry
claims the verify basis ``bijotel`` compares with."""
EVENT_COLUMNS = ("copies", "is_copy")
"""Last in a lookup by event id (``verify_event``, ``*_event``): the number of *other* records
with that event id in the key's scope, and whether the record answered carries a
``duplicate_event_id`` finding (a later copy of an id sealed before)."""
HEAD_COLUMNS = ("stream", "seq", "record_digest", "record_count", "first_at", "last_at")
FINDING_COLUMNS = ("id", "stream", "seq", "kind", "detail", "log_partition", "log_offset",
                   "found_at")

# A duplicate seq is kept in the read model (and reported as a finding); lookups answer the
# earliest copy in log order, the one the chain was built on.
_FIRST = "order by log_partition, log_offset limit 1"
# Records sharing an event id (in any streams): the original is the first by the contract's
# order (evidence_contract.chain.Sighting.order: occurred_at, then the log position), the one
# the projector and the auditor leave unflagged; the log position alone would answer a later
# copy that a writer sealed on a lower partition. The window counts every record the WHERE
# kept (before the LIMIT): the copies are the others.
_FIRST_EVENT = "order by occurred_at_us, log_partition, log_offset limit 1"


def erased_sql(v: str, table: str = "records") -> str:
    """``ERASED_COLUMNS`` of the ``records`` row named ``table`` in the query."""
    first = (f'from {v}.erasures e where e.key_id = {table}.key_id '
             f"order by e.erased_at_us, e.request_id limit 1")
    return (f"{table}.key_id, (select e.erased_at_us {first}), "
            f"(select e.request_id {first})")


def event_sql(v: str) -> str:
    """``EVENT_COLUMNS`` of the ``records`` row in a lookup by event id."""
    return (f"count(*) over () - 1, exists (select 1 from {v}.findings f "
            f"where f.stream = records.stream and f.seq = records.seq "
            f"and f.kind = 'duplicate_event_id' and f.log_partition = records.log_partition "
            f"and f.log_offset = records.log_offset)")


def queries(views: str) -> dict[str, str]:
    """Every named query over the views of schema ``views`` (a plain identifier, validated by
    ``api.config.Settings``)."""
    v = f'"{views}"'
    return {**_record_queries(v), **_stream_queries(v), **_tree_queries(v),
            **_log_queries(v), **_health_queries(v)}


def _record_queries(v: str) -> dict[str, str]:
    """One record by (stream, seq) or by event id, a page of a stream, a record as served."""
    cols = meta_select() + ", " + erased_sql(v)
    page = (f"from {v}.records where stream = %s and seq > %s "
            f"order by seq, log_partition, log_offset limit %s")
    verify_cols = ("stream, seq, output_digest, response_digest, deterministic, seed, "
                   "coalesce(response_model, model_id), outcome, provider_endpoint, "
                   f"{_META_EXPRESSIONS['telemetry_record']}, " + erased_sql(v))
    return {
        "verify_seq": f"select {verify_cols} from {v}.records "
                      f"where stream = %s and seq = %s {_FIRST}",
        # by event id: "{scope}" is the caller's stream condition (Scope.sql)
        "verify_event": f"select {verify_cols}, {event_sql(v)} from {v}.records "
                        f"where event_id = %s and {{scope}} {_FIRST_EVENT}",
        "meta_seq": f"select {cols} from {v}.records where stream = %s and seq = %s {_FIRST}",
        "full_seq": f"select {cols}, {', '.join(BYTES_COLUMNS)} from {v}.records "
                    f"where stream = %s and seq = %s {_FIRST}",
        "meta_event": f"select {cols}, {event_sql(v)} from {v}.records "
                      f"where event_id = %s and {{scope}} {_FIRST_EVENT}",
        "full_event": f"select {cols}, {', '.join(BYTES_COLUMNS)}, {event_sql(v)} "
                      f"from {v}.records where event_id = %s and {{scope}} {_FIRST_EVENT}",
        "meta_page": f"select {cols} {page}",
        "full_page": f"select {cols}, {', '.join(BYTES_COLUMNS)} {page}",
        # api.evidence.SERVE_COLUMNS, followed by the caller's WHERE (replay, served_record)
        "served": f"select r.stream, r.seq, r.record_digest, r.event_id, "
                  f"r.response_content_type, r.response_bytes, {erased_sql(v, 'r')}, "
                  f"r.record_bytes, r.log_partition, r.log_offset, "
                  f"(select n.hash from {v}.tree_nodes n where n.stream = r.stream "
                  f"and n.level = 0 and n.idx = r.seq - 1) "
                  f"from {v}.records r ",
        # the records of a trace (contract 2.2): "{scope}" is the caller's stream condition
        "meta_trace": f"select {cols} from {v}.records where trace_id = %s and {{scope}} "
                      f"order by occurred_at_us, log_partition, log_offset limit %s",
        "add_finding": f"insert into {v}.findings (stream, seq, kind, detail, log_partition, "
                       f"log_offset) select %s, %s, %s, %s, %s, %s where not exists (select 1 "
                       f"from {v}.findings where stream = %s and seq = %s and kind = %s)",
    }


def _stream_queries(v: str) -> dict[str, str]:
    """A stream's head and findings, what of it is erased, and the redaction policy."""
    return {
        # followed by the caller's scope condition and paging (Database.streams)
        "streams": f"select {', '.join(HEAD_COLUMNS)} from {v}.heads where ",
        "head": f"select {', '.join(HEAD_COLUMNS)} from {v}.heads where stream = %s",
        "head_seq": f"select seq from {v}.heads where stream = %s",
        "findings": f"select {', '.join(FINDING_COLUMNS)} from {v}.findings "
                    f"where stream = %s order by id limit %s",
        "findings_count": f"select count(*) from {v}.findings where stream = %s",
        "erased_keys": f"select distinct e.key_id from {v}.erasures e where e.key_id in "
                       f"(select r.key_id from {v}.records r where r.stream = %s "
                       f"and r.key_id is not null)",
        # a generation older than the redaction table has none
        "redaction_exists": "select to_regclass(%s) is not null",
        "redaction": f"select policy from {v}.redaction",
        # every record of a stream, as the projector wrote it, in log order (Database.audit)
        "audit": f"select {', '.join(RECORD_COLUMNS)} from {v}.records "
                 f"where stream = %s order by log_partition, log_offset",
    }


def _tree_queries(v: str) -> dict[str, str]:
    """The verifiable log of a stream: checkpoints folded from evidence.checkpoints, the
    projected tree (size, root) and its perfect subtree hashes (api.routers.tlog)."""
    return {
        "checkpoint_latest": f"select tree_size, root, note from {v}.checkpoints "
                             f"where stream = %s order by tree_size desc limit 1",
        "checkpoint_at": f"select tree_size, root, note from {v}.checkpoints "
                         f"where stream = %s and tree_size = %s",
        "cosignatures": f"select line from {v}.cosignatures "
                        f"where stream = %s and tree_size = %s "
                        f"order by witness, key_id limit %s",
        # A bundle's latest checkpoint, its cosignatures and the projected tree's size.
        "bundle_head": f"select c.tree_size, c.root, c.note, t.size, array(select s.line from "
                       f"{v}.cosignatures s where s.stream = c.stream and s.tree_size = "
                       f"c.tree_size order by s.witness, s.key_id limit %s) from "
                       f"{v}.checkpoints c left join {v}.trees t on t.stream = c.stream "
                       f"where c.stream = %s order by c.tree_size desc limit 1",
        "tree": f"select size, root from {v}.trees where stream = %s",
        # The public tlog-tiles read of each stream's tree (api.routers.publiclog): a run of
        # one level's stored hashes.
        "stream_hashes": f"select idx, hash from {v}.tree_nodes where stream = %s "
                         f"and level = %s and idx >= %s and idx < %s order by idx",
        "nodes": f"select n.level, n.idx, n.hash from {v}.tree_nodes n "
                 f"join unnest(%s::int[], %s::bigint[]) w(level, idx) "
                 f"on n.level = w.level and n.idx = w.idx where n.stream = %s",
    }


def _log_queries(v: str) -> dict[str, str]:
    """The deployment log (docs/witnessing.md): its checkpoints, tiles and entries, and a
    bundle's path to it."""
    cosignatures = (f"array(select s.line from {v}.log_cosignatures s "
                    f"where s.tree_size = c.tree_size order by s.witness, s.key_id limit %s)")
    return {
        # The deployment checkpoint served is the latest whose root the projected tree has
        # not contradicted (root_matches: null until the tree reaches it).
        "log_checkpoint": f"select c.tree_size, c.root, c.note, {cosignatures} "
                          f"from {v}.log_checkpoints c where c.root_matches is not false "
                          f"order by c.tree_size desc limit 1",
        "log_size": f"select tree_size from {v}.log_checkpoints "
                    f"where root_matches is not false order by tree_size desc limit 1",
        "log_hashes": f"select idx, hash from {v}.log_nodes "
                      f"where level = %s and idx >= %s and idx < %s order by idx",
        "log_entries": f"select idx, entry from {v}.log_entries "
                       f"where idx >= %s and idx < %s order by idx",
        # A bundle's path to the deployment log (api.routers.bundles): the latest deployment
        # checkpoint a witness cosigned, the entries of a stream that cover a seq within a
        # size (first by size: log_entries_stream), the proof's nodes.
        "log_checkpoint_cosigned": f"select c.tree_size, c.root, c.note, {cosignatures} "
                                   f"from {v}.log_checkpoints c "
                                   f"where c.root_matches is not false and c.tree_size = "
                                   f"(select max(tree_size) from {v}.log_cosignatures)",
        "log_covering": f"select idx, tree_size, entry from {v}.log_entries "
                        f"where stream = %s and tree_size >= %s and idx < %s "
                        f"order by tree_size, idx limit %s",
        "log_nodes": f"select n.level, n.idx, n.hash from {v}.log_nodes n "
                     f"join unnest(%s::int[], %s::bigint[]) w(level, idx) "
                     f"on n.level = w.level and n.idx = w.idx",
    }


def _health_queries(v: str) -> dict[str, str]:
    """Lag against the log ends the projector's heartbeat last saw in Kafka (its own stored
    high watermarks where it has not beaten yet), and the heartbeat's age: of the oldest
    partition's beat, as several projectors each beat their own partitions and one that is
    gone leaves its partitions unprojected."""
    return {
        "lag": f"select coalesce(sum(greatest(coalesce(h.end_offset, p.high_watermark) "
               f"- p.next_offset, 0)), 0)::bigint, count(*), "
               f"(select extract(epoch from now() - min(beat_at))::float8 "
               f"from {v}.heartbeat) "
               f"from {v}.positions p left join {v}.heartbeat h "
               f"on h.topic = p.topic and h.partition = p.partition",
    }


# -- record listings with filters (GET /streams/{s}/records, GET /records) ----------------------

@dataclass(frozen=True)
class RecordFilter:
    """What a listing keeps; a None field keeps every record. ``model`` is the model asked
    for or the one that answered (``model_id`` or ``response_model``); ``since_us`` and
    ``until_us`` bound the sealed time (``occurred_at_us``: from, inclusive; to, exclusive);
    ``encrypted``: sealed under a subject's key (erased since or not); ``erased``: that key
    was destroyed."""

    model: str | None = None
    outcome: str | None = None
    fingerprint: str | None = None
    since_us: int | None = None
    until_us: int | None = None
    erased: bool | None = None
    encrypted: bool | None = None

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))


def filter_sql(v: str, f: RecordFilter) -> tuple[list[str], list[Any]]:
    """The ``where`` conditions over ``records`` of ``f`` and their parameters."""
    conds: list[str] = []
    params: list[Any] = []
    if f.model is not None:
        conds.append("(records.model_id = %s or records.response_model = %s)")
        params += [f.model, f.model]
    for column in ("outcome", "fingerprint"):
        if getattr(f, column) is not None:
            conds.append(f"records.{column} = %s")
            params.append(getattr(f, column))
    if f.since_us is not None:
        conds.append("records.occurred_at_us >= %s")
        params.append(f.since_us)
    if f.until_us is not None:
        conds.append("records.occurred_at_us < %s")
        params.append(f.until_us)
    if f.encrypted is not None:
        conds.append(f"records.key_id is {'not ' if f.encrypted else ''}null")
    if f.erased is not None:
        conds.append(f"{'' if f.erased else 'not '}exists (select 1 from {v}.erasures e "
                     f"where e.key_id = records.key_id)")
    return conds, params


def records_sql(v: str, window: str, f: RecordFilter, with_bytes: bool) -> tuple[str, list[Any]]:
    """A filtered listing: the records of ``window`` (a condition with its own parameters,
    which come first) that ``f`` keeps, in (stream, seq, log position) order; the caller
    appends the ``limit`` parameter. Its parameters: ``f``'s, after the window's."""
    cols = meta_select() + ", " + erased_sql(v)
    if with_bytes:
        cols += ", " + ", ".join(BYTES_COLUMNS)
    conds, params = filter_sql(v, f)
    where = " and ".join([window, *conds])
    return (f"select {cols} from {v}.records where {where} "
            f"order by stream, seq, log_partition, log_offset limit %s", params)


def bound_sql(v: str, window: str) -> str:
    """The (stream, seq) of the ``%s``-th record (offset, 0-based) of ``window`` in
    (stream, seq) order: where a filtered page stops reading, so that a filter that keeps
    few records reads a bounded part of the index per request."""
    return (f"select stream, seq from {v}.records where {window} "
            f"order by stream, seq offset %s limit 1")
