-- One projection generation: every table of the read side, created in a schema of its own
-- ({gen} is replaced by the generation's schema name, e.g. evidence_g3). A rebuild creates a
-- fresh generation, fills it from offset 0 of the log, and swaps the stable views in schema
-- "evidence" over to it in one transaction. Readers (the API) only ever query the views.
--
-- Nothing here is evidence: it is all derived from the log and can be dropped.

create table {gen}.records (
    log_partition         integer     not null,
    log_offset            bigint      not null,
    stream                text        not null,
    seq                   bigint      not null,
    event_id              uuid        not null,
    schema_version        text        not null,
    occurred_at           timestamptz not null,
    occurred_at_us        bigint      not null,   -- exact micros, as sealed
    captured_at           timestamptz not null,
    content_key           bytea       not null,
    prev_digest           bytea       not null,
    record_digest         bytea       not null,
    response_digest       bytea,
    output_digest         bytea,
    input_digest          bytea,
    prompt_digest         bytea,
    outcome               text        not null,   -- COMMITTED | FAILED | UNKNOWN
    provider_name         text        not null,
    provider_endpoint     text        not null,
    provider_api_version  text,
    model_id              text,
    response_model        text,
    fingerprint           text,
    params                text,
    http_status           integer,
    response_content_type text,
    seed                  numeric,    -- an integer of any size (decimal text in the record)
    temperature           double precision,
    top_p                 double precision,
    deterministic         boolean     not null,
    request_policy        text        not null,   -- VALUE | HASH_ONLY
    streamed              boolean     not null,
    closed_early          boolean     not null,
    truncated             boolean     not null,   -- bodies dropped; digests, lengths kept
    writer_id             text        not null,
    request_length        bigint      not null,   -- of the full request body
    response_length       bigint,                 -- of the full response body, if any
    request_bytes         bytea,
    response_bytes        bytea,
    error_bytes           bytea,
    input_bytes           bytea,
    prompt_bytes          bytea,
    key_id                bytea,                  -- encryption.key_id (16 bytes); null: plain
                                                  -- (indexed by projections.ddl.ERASURES)
    trace_id              bytea,                  -- trace.trace_id (16 bytes, contract 2.2)
    span_id               bytea,                  -- trace.span_id (8 bytes); both indexed by
                                                  -- projections.ddl.TRACES_INDEX
    mapped                boolean     not null default false, -- mapped from telemetry
    corroborates          uuid,                   -- telemetry.corroborates: a gateway capture
    record_bytes          bytea       not null    -- the log message value, verbatim
)
-- A typical record row (message + response + request bytes) is 2-6 KiB: over the default
-- 2 KiB toast target, PostgreSQL would try to compress and move each row's bytes to the
-- TOAST table (an extra heap and index insert per row). Keeping rows up to a page inline
-- makes bulk loads ~1.5x faster; larger responses are still toasted.
with (toast_tuple_target = 8160);
-- The key, in two steps: a bulk load builds its index after the rows, beside the others,
-- then attaches it as the key (projections.ddl.index_statements).
create unique index records_pkey on {gen}.records (log_partition, log_offset);
alter table {gen}.records add constraint records_pkey primary key using index records_pkey;
-- Not unique: a duplicate seq in the log is stored and reported as a finding, never dropped.
create index on {gen}.records (stream, seq);
create index on {gen}.records (event_id);
create index on {gen}.records (content_key, occurred_at_us);

create table {gen}.heads (
    stream         text    primary key,
    seq            bigint  not null,
    record_digest  bytea   not null,
    record_count   bigint  not null,
    first_at       timestamptz not null,
    last_at        timestamptz not null,
    -- Seqs below seq that a gap skipped and that have not arrived since, as inclusive
    -- ranges "a-b,c-d": a late one is then out_of_order, not a duplicate, in a later batch.
    missing        text    not null default ''
);

create table {gen}.findings (
    id             bigserial primary key,
    stream         text,
    seq            bigint,
    kind           text    not null,   -- evidence_contract.chain.KINDS
    detail         text    not null,
    log_partition  integer,
    log_offset     bigint,
    found_at       timestamptz not null default now()
);
create index on {gen}.findings (stream, seq);

-- Consumer positions of this generation, written in the same transaction as its rows. The
-- projector's heartbeat table (log end offsets and when it last saw them) sits beside it; its
-- DDL is projections.ddl.HEARTBEAT, shared with generations made before it existed.
create table {gen}.positions (
    topic          text    not null,
    partition      integer not null,
    next_offset    bigint  not null,
    -- The partition's end as the projector last saw it, so the API can report lag without
    -- talking to Kafka: lag = high_watermark - next_offset.
    high_watermark bigint  not null default 0,
    updated_at     timestamptz not null default now(),
    primary key (topic, partition)
);
