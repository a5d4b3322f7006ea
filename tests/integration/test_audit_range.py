"""``evidence audit --stream S --seq A..B`` (``--last N``, ``--since/--until``) against a real
pipeline: the real writer seals and signs checkpoints, the real projector folds the records,
their tree and the checkpoints; the range audit starts from the signed checkpoint and reads
only the range's records (and the one before it) from Kafka."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest

from evidence_contract import now_micros, split_record
from tests.fixtures.audit import chat_capture
from tests.fixtures.log import make_body, seal_record, wait_until
from tests.fixtures.writer import produce_captures, read_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
FAST = {"EVIDENCE_CHECKPOINT_INTERVAL_S": "0.3"}


def env_of(p) -> dict[str, str]:
    return {**p.env(), "EVIDENCE_PG_VIEWS_SCHEMA": p.projection.views_schema}


def evidence(p, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], env=env_of(p),
                          capture_output=True, text=True, timeout=180, cwd=ROOT)


def audit(p, *args: str) -> tuple[int, dict, str]:
    r = evidence(p, "audit", *args, "--json", "-")
    try:
        report = json.loads(r.stdout)
    except ValueError:
        report = {}
    return r.returncode, report, r.stderr


def wait_covered(p, stream: str, size: int) -> None:
    """Until the projection holds a checkpoint of ``stream`` of at least ``size`` and its tree
    has as many records."""
    v = p.projection.views_schema

    def ready() -> bool:
        p.writer.assert_alive()
        with psycopg.connect(p.projection.database_url, autocommit=True) as conn:
            cp = conn.execute(f'select max(tree_size) from "{v}".checkpoints where stream = %s',
                              (stream,)).fetchone()[0]
            tree = conn.execute(f'select size from "{v}".trees where stream = %s',
                                (stream,)).fetchone()
        return cp is not None and cp >= size and tree is not None and tree[0] >= cp

    wait_until(f"a checkpoint of {stream} covering {size} records, projected", ready, 90, 0.2)


def positions(p, stream: str) -> dict[int, list[tuple[int, int, int]]]:
    """seq -> [(partition, offset, occurred_at)] of every record of ``stream`` in the log."""
    out: dict[int, list[tuple[int, int, int]]] = {}
    for m in read_all(p.projection.bootstrap, p.topics.names.log):
        _b, rec = split_record(m.value())
        if rec["body"]["stream"] == stream:
            out.setdefault(rec["seal"]["seq"], []).append(
                (m.partition(), m.offset(), rec["seal"]["occurred_at"]))
    return out


def seal(p, kafka_bootstrap, stream: str, start: int, n: int) -> None:
    produce_captures(kafka_bootstrap, p.topics,
                     [chat_capture(stream, start + i) for i in range(n)])


def sealed_stream(make_pipeline, kafka_bootstrap, n: int, prefix: str = "range"):
    """A pipeline and a stream of its own with ``n`` records sealed, all covered by a
    checkpoint the projection holds."""
    p = make_pipeline(partitions=1, env=FAST)
    stream = f"{prefix}-{uuid.uuid4().hex[:8]}:a"
    seal(p, kafka_bootstrap, stream, 0, n)
    p.wait_records(stream, n, timeout=90)
    wait_covered(p, stream, n)
    return p, stream


def iso(micros: int) -> str:
    when = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=micros)
    return when.isoformat().replace("+00:00", "Z")


def test_a_range_audit_is_clean_reads_only_its_records_and_says_what_it_proves(
        make_pipeline, kafka_bootstrap):
    p = make_pipeline(partitions=1, env=FAST)
    stream, other = f"range-{uuid.uuid4().hex[:8]}:a", f"range-{uuid.uuid4().hex[:8]}:b"
    seal(p, kafka_bootstrap, stream, 0, 12)
    seal(p, kafka_bootstrap, other, 0, 3)
    p.wait_records(stream, 12, timeout=90)
    wait_covered(p, stream, 12)
    where = positions(p, stream)

    code, rep, err = audit(p, "--stream", stream, "--seq", "4..8")
    assert code == 0, err
    assert rep["clean"] and rep["findings"] == []
    assert (rep["range"]["first_seq"], rep["range"]["last_seq"]) == (4, 8)
    assert rep["read"]["records"] == 5 and rep["read"]["before"] == 3
    # Only seqs 3..8 were read: their log positions, none of the other records'.
    assert [tuple(x) for x in rep["read"]["positions"]] == [
        where[s][0][:2] for s in range(3, 9)]
    assert rep["checkpoint"]["tree_size"] >= 12 and rep["proves"] and rep["does_not_prove"]
    text = evidence(p, "audit", "--stream", stream, "--seq", "4..8")
    assert text.returncode == 0 and "CLEAN: seqs 4..8" in text.stdout
    assert "what it does not:" in text.stdout and "records outside the range" in text.stdout

    size = rep["checkpoint"]["tree_size"]
    code, rep, err = audit(p, "--stream", stream, "--last", "3")
    assert code == 0, err
    assert (rep["range"]["first_seq"], rep["range"]["last_seq"]) == (size - 2, size)

    # A window by the sealed times (records sealed in one batch may share one): the span is
    # the seqs sealed in it, the record before and the one after it are read.
    times = {s: where[s][0][2] for s in where}
    uniq = sorted(set(times.values()))
    since = uniq[len(uniq) // 3]
    until = uniq[2 * len(uniq) // 3] if len(uniq) > 2 else uniq[-1] + 1
    inside = [s for s, t in times.items() if since <= t < until]
    first, last = min(inside), max(inside)
    code, rep, err = audit(p, "--stream", stream, "--since", iso(since), "--until", iso(until))
    assert code == 0, err
    assert (rep["range"]["first_seq"], rep["range"]["last_seq"]) == (first, last)
    assert rep["read"]["before"] == (first - 1 if first > 1 else None)
    assert rep["read"]["after"] == (last + 1 if last < size else None)


def test_usage_errors_of_a_range(make_pipeline, kafka_bootstrap):
    p, stream = sealed_stream(make_pipeline, kafka_bootstrap, 3)
    code, _rep, err = audit(p, "--stream", stream, "--seq", "2..99")
    assert code == 2 and "runs past" in err and "head is seq 3" in err, err
    code, _rep, err = audit(p, "--stream", "range-none:x", "--seq", "1..2")
    assert code == 1 and "no checkpoint of range-none:x" in err, err
    for args, words in ((("--seq", "4..2"), "first seq is after the last"),
                        (("--seq", "1..3", "--last", "2"), "give one range"),
                        (("--since", "yesterday"), "not an ISO 8601"),
                        (("--seq", "1..2", "--no-projection"), "not with a range")):
        code, _rep, err = audit(p, "--stream", stream, *args)
        assert code == 2 and words in err, (args, err)
    code, _rep, err = audit(p, "--seq", "1..2")
    assert code == 2 and "give --stream" in err


def test_a_rogue_record_in_the_range_is_found_and_a_range_before_it_is_clean(
        make_pipeline, kafka_bootstrap, produce_log):
    p, stream = sealed_stream(make_pipeline, kafka_bootstrap, 8)
    # A valid-looking seq 9, produced straight into the log, bypassing the writer.
    tail = positions(p, stream)
    _b, last = split_record(next(m.value() for m in read_all(kafka_bootstrap, p.topics.names.log)
                                 if m.offset() == tail[8][0][1]))
    body = make_body(stream, 10_009, b'{"forged":true}')
    body["output_digest"] = None
    [rogue] = produce_log(p.topics, [seal_record(body, 9, last["seal"]["record_digest"],
                                                 now_micros())])
    seal(p, kafka_bootstrap, stream, 8, 4)  # the writer's own 9..12
    wait_until("the writer's seq 12 in the log",
               lambda: 12 in positions(p, stream), 90, 0.2)
    wait_covered(p, stream, 12)

    code, rep, err = audit(p, "--stream", stream, "--seq", "8..10")
    assert code == 3, err
    at9 = {f["kind"] for f in rep["findings"] if f["seq"] == 9}
    assert at9 & {"not_in_checkpoint", "not_sealed_by_writer", "projection_altered"}, \
        rep["findings"]
    assert any(f["offset"] == rogue.offset for f in rep["findings"]), rep["findings"]

    # Seqs 2..6 do not reach it: clean, and the rogue record is not read. The projection's tree
    # took the rogue for seq 9, so its later trees are not the signed ones: the range is
    # proved in the largest checkpoint signed before it, and the report names those passed.
    code, rep, err = audit(p, "--stream", stream, "--seq", "2..6")
    assert code == 0, (err, rep.get("findings"))
    assert [rogue.partition, rogue.offset] not in rep["read"]["positions"]
    assert 6 <= rep["checkpoint"]["tree_size"] <= 8 and rep["checkpoint"]["passed_over"]
