"""``evidence audit`` as a subprocess over a log sealed by the real writer and a projection
made by the real projector: a clean pipeline exits 0; each tamper exits 3 and is named."""

import json

import pytest

from tests.fixtures.audit import evidence

pytestmark = pytest.mark.integration


def audit(sealed, *args, **env):
    p = evidence("audit", *args, env=sealed.env(**env))
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def report(sealed, *args):
    code, out, err = audit(sealed, "--json", *args)
    return code, json.loads(out), err


def named(rep):
    return [(f["kind"], f["stream"], f["seq"]) for f in rep["findings"]]


def test_a_clean_pipeline_exits_0_with_a_summary(make_sealed):
    s = make_sealed({"acme:a": 4, "acme:b": 3, "globex:c": 2}, partitions=2)
    code, out, err = audit(s)
    assert code == 0, (out, err)
    assert "CLEAN" in out and "the projection matches the log" in out
    assert "acme:a" in out and "3 streams" in out
    assert "100.0%" in err  # the progress line's last state

    code, rep, _ = report(s)
    assert code == 0 and rep["clean"] is True and rep["projection_checked"] is True
    assert {x["stream"]: x["records"] for x in rep["streams"]} == {
        "acme:a": 4, "acme:b": 3, "globex:c": 2}
    assert rep["findings"] == [] and rep["findings_by_kind"] == {}


def test_edited_response_bytes_in_the_projection(make_sealed):
    s = make_sealed({"acme:a": 3})
    s.sql("update {v}.records set response_bytes = %s where stream = 'acme:a' and seq = 2",
          (b'{"choices":[{"message":{"content":"forged"}}]}',))
    code, rep, _ = report(s)
    assert code == 3
    assert named(rep) == [("projection_altered", "acme:a", 2)]
    assert "response_bytes" in rep["findings"][0]["detail"]
    assert rep["findings_by_kind"] == {"projection_altered": 1}
    code, out, _ = audit(s)
    assert code == 3 and "projection_altered acme:a#2" in out


def test_a_deleted_projection_row(make_sealed):
    s = make_sealed({"acme:a": 3})
    s.sql("delete from {v}.records where stream = 'acme:a' and seq = 2")
    code, rep, _ = report(s)
    assert code == 3 and named(rep) == [("projection_missing", "acme:a", 2)]


def test_reordered_projection_rows(make_sealed):
    s = make_sealed({"acme:a": 3})
    s.sql("update {v}.records set seq = 3 - seq where stream = 'acme:a' and seq in (1, 2)")
    code, rep, _ = report(s)
    assert code == 3
    assert sorted(named(rep)) == [("projection_altered", "acme:a", 1),
                                  ("projection_altered", "acme:a", 2)]
    assert all("seq" in f["detail"] for f in rep["findings"])


def test_a_rogue_producer_bypassing_the_writer(make_sealed, produce_log):
    s = make_sealed({"acme:a": 3, "acme:b": 2})
    # A valid-looking continuation of acme:a, produced straight into the log.
    [rogue] = produce_log(s.topics, [s.forge("acme:a")])
    s.wait_sealed(extra=1)
    code, rep, _ = report(s)
    assert code == 3
    assert [(f["kind"], f["seq"], f["offset"]) for f in rep["findings"]] == [
        ("not_sealed_by_writer", 4, rogue.offset)]

    # The writer, which never saw it, seals its own seq 4 (and 5): a duplicate, and the
    # chain continues from the writer's copy, which names the rogue's.
    s.seal("acme:a", 2, wait=False)
    s.wait_sealed(extra=1)
    code, rep, _ = report(s)
    assert code == 3
    found = {(f["kind"], f["seq"], f["offset"]) for f in rep["findings"]}
    assert ("not_sealed_by_writer", 4, rogue.offset) in found
    assert any(k == "duplicate" and seq == 4 and off != rogue.offset for k, seq, off in found)
    # The tree the audit rebuilds takes the first record of each seq in log order, the
    # rogue's at seq 4: a checkpoint the writer signed over its own seq 4 (once one is
    # issued) does not match it.
    kinds = {f["kind"] for f in rep["findings"]}
    assert {"duplicate", "not_sealed_by_writer"} <= kinds <= {
        "duplicate", "not_sealed_by_writer", "checkpoint_mismatch"}, kinds
    # The other stream is untouched.
    code, rep, _ = report(s, "--stream", "acme:b")
    assert code == 0 and [x["stream"] for x in rep["streams"]] == ["acme:b"]


def test_a_record_altered_before_produce(make_sealed, produce_log):
    s = make_sealed({"acme:a": 2})
    forged = s.forge("acme:a", response=b'{"answer":"original"}')
    # Alter the response after sealing, before producing: same length, valid Avro.
    forged.value = forged.value.replace(b'{"answer":"original"}', b'{"answer":"0riginal"}')
    [rec] = produce_log(s.topics, [forged])
    s.wait_sealed(extra=1)
    code, rep, _ = report(s, "--no-projection")
    assert code == 3 and rep["projection_checked"] is False
    at3 = [(f["kind"], f["offset"]) for f in rep["findings"] if f["seq"] == 3]
    assert ("record_digest_mismatch", rec.offset) in at3
    assert ("response_digest_mismatch", rec.offset) in at3


def test_stream_filter_and_json_file(make_sealed, tmp_path):
    s = make_sealed({"acme:a": 2, "globex:c": 2})
    s.sql("delete from {v}.records where stream = 'globex:c' and seq = 1")
    out_file = tmp_path / "audit.json"
    code, out, _ = audit(s, "--stream", "acme:a", "--json", str(out_file))
    assert code == 0, out
    assert "CLEAN" in out  # a file report still prints the summary
    rep = json.loads(out_file.read_text())
    assert [x["stream"] for x in rep["streams"]] == ["acme:a"] and rep["clean"]
    code, rep, _ = report(s, "--stream", "globex:c")
    assert code == 3 and named(rep) == [("projection_missing", "globex:c", 1)]
    code, rep, _ = report(s, "--stream", "nobody")
    assert code == 0 and rep["streams"] == []


def test_kafka_unreachable_exits_1(make_sealed, tmp_path):
    env = {"EVIDENCE_KAFKA_BOOTSTRAP": "127.0.0.1:1", "EVIDENCE_TOPIC_PREFIX": "nothing",
           "EVIDENCE_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
           "PATH": "/usr/bin:/bin", "EVIDENCE_STACK_DIR": str(tmp_path)}
    p = evidence("audit", env=env)
    assert p.returncode == 1, p.stdout
    assert b"cannot run" in p.stderr


@pytest.mark.parametrize("args, words", [
    (["--stream", "not a stream!"], b"not a stream id"),
    (["--bogus"], b"unrecognized arguments"),
])
def test_usage_errors_exit_2(args, words):
    p = evidence("audit", *args, env={"PATH": "/usr/bin:/bin"})
    assert p.returncode == 2 and words in p.stderr, p.stderr


def test_a_longer_log_with_transactions_and_a_progress_line(make_sealed):
    # Thousands of records in many writer transactions (commit markers take offsets) over two
    # partitions: every chain verifies, the heads agree, and progress reaches the end.
    n = {"acme:a": 700, "acme:b": 600, "globex:c": 500, "globex:d": 200}
    s = make_sealed(n, partitions=2)
    code, out, err = audit(s, "--json", "-")
    assert code == 0, (out[-2000:], err[-2000:])
    rep = json.loads(out)
    assert {x["stream"]: x["records"] for x in rep["streams"]} == n
    assert rep["messages"] == sum(n.values()) and rep["projection_lag"] == 0
    last = [line for line in err.splitlines() if line.startswith("auditing")][-1]
    assert "100.0%" in last and f"{sum(n.values())} records" in last, err
