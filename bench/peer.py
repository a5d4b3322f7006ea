"""The sealing peer: the ``eventsourcing`` library appending the same payloads as events.

Its PostgreSQL application recorder (``eventsourcing[postgres]``) is given the exact capture
bytes as each event's ``state``, one aggregate per stream, versions assigned in order, and
``batch`` events per ``insert_events`` call: one transaction, one ``unnest`` insert, the most
generous batching the library offers. 1000 a call: as fast as 2000 here, and 5000 deadlocks
(eventsourcing 9.5.6 sends the batch in psycopg pipeline mode; client and server both ended
up waiting to read). Its own tables in a schema of its own, dropped as soon as it is timed:
left in place, 200k fresh rows are work for PostgreSQL's autovacuum (a vacuum and an analyse,
each of the table and its indexes) within the minute after, while the sections after it are
timed on the same two cores.

Fair to it, and steadier: the same 200k appends took 18.1 s in one ``make bench`` and
34.0 s in the next, right after the sealing section's preload had written ~260 MB that the
kernel was still writing back behind its commits' fsyncs. So the clock starts on a settled
disk (``bench.services.settle_disk``; the dirty MiB it found are reported), once the tables
exist and a warm-up batch of other aggregates has gone through the same call (the
connection's first statements and the tables' first pages are not what an append costs).
"""

from __future__ import annotations

import time
import uuid
from urllib.parse import urlsplit

import psycopg


def eventsourcing_rate(database_url: str, schema: str, messages: list[tuple[bytes, bytes]],
                       batch: int = 1000) -> dict[str, float]:
    """Append ``messages`` ((key, value) pairs) as events; return records/s and seconds."""
    from bench.services import settle_disk

    from eventsourcing.persistence import StoredEvent
    from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore

    u = urlsplit(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'create schema if not exists "{schema}"')
    datastore = PostgresDatastore(u.path.lstrip("/"), u.hostname or "127.0.0.1", u.port or 5432,
                                  u.username or "", u.password or "", schema=schema,
                                  originator_id_type="uuid")
    try:
        recorder = PostgresApplicationRecorder(datastore)
        recorder.create_table()
        ids: dict[bytes, uuid.UUID] = {}
        versions: dict[bytes, int] = {}
        events = []
        for key, value in messages:
            oid = ids.setdefault(key, uuid.uuid4())
            versions[key] = versions.get(key, 0) + 1
            events.append(StoredEvent(oid, versions[key], "bench:CaptureSealed", value))
        recorder.insert_events([StoredEvent(uuid.uuid4(), 1, "bench:WarmUp", value)
                                for _key, value in messages[:batch]])
        settled = settle_disk(database_url)
        t0 = time.perf_counter()
        for i in range(0, len(events), batch):
            recorder.insert_events(events[i:i + batch])
        seconds = time.perf_counter() - t0
    finally:
        datastore.close()
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f'drop schema if exists "{schema}" cascade')
    return {"records": len(events), "seconds": round(seconds, 3),
            "records_per_s": round(len(events) / seconds, 1), "batch": batch,
            "dirty_mib_settled": settled["dirty_mib_before"]}
