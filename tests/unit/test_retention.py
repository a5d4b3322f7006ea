"""Retention classes, the shredder's plan and run (with a fake clock and a fake erase), the
CLI's hold and release, against the file key store."""

from __future__ import annotations

import json
import re

import pytest

from cli.main import main
from evidence_client.keystore import FileKeyStore
from evidence_contract.keys import ERASED, LIVE, KeyErased, SubjectState, epoch_end
from evidence_contract.sealing import LocalKek
from server.retention import (
    DAY_US,
    RetentionConfigError,
    load_policy,
    parse_policy,
    plan,
    request_id_for,
    run_once,
    status,
)
from tests.fixtures.keystore import FakeClock, at

KEK = LocalKek(bytes(range(32)))
POLICY = {"classes": {"short": {"keep_days": 30}, "long": {"keep_days": 365}},
          "streams": {"acme:*": "short", "acme:audit": "long", "acme:au*": "long",
                      "keep:*": None},
          "subjects": {"vip": "long"}, "default": None}


def _key(subject="u", streams=("acme:chat",), epoch="2024-05-01", state=LIVE, key_id="a" * 32):
    return SubjectState(subject, key_id, state, 0, epoch=epoch, streams=tuple(streams))


# -- the file ------------------------------------------------------------------------------
def test_classes_by_stream_pattern_subject_override_and_the_longest_keep():
    p = parse_policy(POLICY)
    assert p.class_of_stream("acme:chat").name == "short"
    assert p.class_of_stream("acme:audit").name == "long"    # exact before patterns
    assert p.class_of_stream("acme:auth").name == "long"     # the longest pattern wins
    assert p.class_of_stream("keep:x") is None and p.class_of_stream("other") is None
    assert p.class_of(_key()).name == "short"
    assert p.class_of(_key(streams=("acme:chat", "acme:audit"))).name == "long"
    assert p.class_of(_key(streams=("acme:chat", "keep:x"))) is None  # a kept stream keeps it
    assert p.class_of(_key(subject="vip")).name == "long"
    assert p.class_of(_key(streams=())) is None  # no stream recorded: the default
    assert parse_policy({**POLICY, "default": "short"}).class_of(_key(streams=())).name == "short"


@pytest.mark.parametrize("doc, says", [
    ([], "must be an object"),
    ({}, '"classes" must be a non-empty object'),
    ({"classes": {"a": {"keep_days": 1}}, "stream": {}}, "unknown keys ['stream']"),
    ({"classes": {"a b": {"keep_days": 1}}}, "class name 'a b'"),
    ({"classes": {"a": {"keep_days": -1}}}, "keep_days must be an integer"),
    ({"classes": {"a": {"keep_days": "30"}}}, "keep_days must be an integer"),
    ({"classes": {"a": {"keep_days": True}}}, "keep_days must be an integer"),
    ({"classes": {"a": {"keep_days": 1, "x": 2}}}, "must be exactly"),
    ({"classes": {"a": {"keep_days": 1}}, "streams": {"s": "b"}}, "names class 'b'"),
    ({"classes": {"a": {"keep_days": 1}}, "streams": {"bad stream": "a"}}, "not a stream id"),
    ({"classes": {"a": {"keep_days": 1}}, "subjects": []}, '"subjects" must be an object'),
    ({"classes": {"a": {"keep_days": 1}}, "default": "z"}, '"default" names class'),
])
def test_a_bad_policy_says_what_and_where(doc, says):
    with pytest.raises(RetentionConfigError, match="retention file f.json") as e:
        parse_policy(doc, "f.json")
    assert says in str(e.value)


def test_load_policy_reads_json_and_names_the_file(tmp_path):
    f = tmp_path / "retention.json"
    f.write_text(json.dumps(POLICY))
    p = load_policy(f)
    assert p.source == str(f) and len(p.digest) == 64 and set(p.classes) == {"short", "long"}
    f.write_text("{not json")
    with pytest.raises(RetentionConfigError, match="not valid"):
        load_policy(f)
    with pytest.raises(RetentionConfigError, match="No such file"):
        load_policy(tmp_path / "none.json")


# -- the plan ------------------------------------------------------------------------------
def test_a_key_is_due_keep_days_after_its_epoch_ended():
    p = parse_policy(POLICY)
    k = _key(epoch="2024-05-01")
    due_at = epoch_end("2024-05-01") + 30 * DAY_US
    assert due_at == at("2024-06-01T00:00:00")
    before, after = plan(p, [k], set(), due_at - 1), plan(p, [k], set(), due_at)
    assert before.due == [] and before.next_due == due_at
    assert [d.key for d in after.due] == [k] and after.next_due is None
    assert request_id_for(after.due[0]) == f"retention:short:2024-05-01:{'a' * 32}"
    held = plan(p, [k], {"u"}, due_at)
    assert held.due == [] and [d.key for d in held.held] == [k]
    legacy = plan(p, [_key(epoch="all")], set(), 2**62)
    assert legacy.due == [] and len(legacy.kept) == 1  # epoch "all" never ends
    erased = plan(p, [_key(state=ERASED)], set(), 2**62)
    assert erased.due == erased.kept == []
    month = _key(epoch="2024-02")
    assert plan(p, [month], set(), at("2024-03-31T00:00:00")).due
    assert not plan(p, [month], set(), at("2024-03-30T23:59:59")).due


# -- a run ---------------------------------------------------------------------------------
class FakeErase:
    """erase_subject's shape: destroy through the (bounded) store, remember the request."""

    def __init__(self):
        self.calls = []

    def __call__(self, store, producer_cfg, subject, request_id, reason, *, topics=None):
        destroyed = store.destroy(subject, request_id)
        self.calls.append((subject, request_id, [s.key_id for s in destroyed], reason))
        return request_id


def _two_epochs(tmp_path):
    clock = FakeClock("2024-05-01T12:00:00")
    store = FileKeyStore(tmp_path / "keys", KEK, clock=clock)
    old = store.data_key("user-ada", stream="acme:chat")
    other = store.data_key("user-bob", stream="acme:chat")
    kept = store.data_key("user-cy", stream="keep:forever")
    clock.set("2024-06-15T12:00:00")
    new = store.data_key("user-ada", stream="acme:chat")
    return store, clock, old, other, kept, new


def test_a_run_shreds_the_old_epoch_only_and_skips_held_subjects(tmp_path, caplog):
    store, clock, old, other, kept, new = _two_epochs(tmp_path)
    policy = parse_policy(POLICY)
    store.hold("user-bob", "case 17")
    erase = FakeErase()
    dry = run_once(store, policy, {}, now=clock(), dry_run=True, erase=erase)
    assert len(dry.shredded) == 1 and erase.calls == [] and len(dry.held) == 1
    result = run_once(store, policy, {}, now=clock(), erase=erase)
    assert [(s, r, k) for s, r, k, _ in erase.calls] == [
        ("user-ada", f"retention:short:2024-05-01:{old.key_id}", [old.key_id])]
    assert "retention class short: keep 30 days" in erase.calls[0][3]
    assert [d.key.key_id for d in result.held] == [other.key_id]
    held = [r for r in caplog.records if r.getMessage() == "retention_held"]
    assert held and "legal hold" in held[0].evidence_fields["why"]
    assert not any("user-bob" in repr(r.evidence_fields) for r in caplog.records)
    with pytest.raises(KeyErased):
        store.key(old.key_id)
    for k in (new, other, kept):
        assert store.key(k.key_id) == k
    assert result.next_due == epoch_end("2024-06-15") + 30 * DAY_US
    # Released, bob's key goes on the next run; ada's new key waits for its own time.
    store.release("user-bob")
    run_once(store, policy, {}, now=clock(), erase=erase)
    assert [c[2] for c in erase.calls] == [[old.key_id], [other.key_id]]
    doc = status(store, policy, now=clock())
    short = next(c for c in doc["classes"] if c["name"] == "short")
    assert (short["erased_keys"], short["live_keys"], short["subjects"]) == (2, 1, 1)
    assert short["streams"] == ["acme:chat"] and short["next_shred"] == "2024-07-16T00:00:00Z"
    assert doc["keys"]["erased_by_retention"] == 2 and doc["kept_forever"] == 1


def test_a_failed_receipt_is_retried_under_the_same_request_id(tmp_path):
    from server.erasure import ErasureFailed

    store, clock, old, *_ = _two_epochs(tmp_path)
    calls = []

    def flaky(store_, cfg, subject, request_id, reason, *, topics=None):
        store_.destroy(subject, request_id)
        calls.append(request_id)
        if len(calls) == 1:
            raise ErasureFailed("kafka down")
        return request_id

    policy = parse_policy({"classes": {"c": {"keep_days": 1}}, "default": "c"})
    first = run_once(store, policy, {}, now=clock(), erase=flaky)
    assert len(first.failed) == 1 and len(first.shredded) == 2
    again = run_once(store, policy, {}, now=clock(), erase=flaky,
                     retry=[d for d, _ in first.failed])
    assert calls[0] in calls[1:] and not again.failed


# -- the CLI -------------------------------------------------------------------------------
def test_cli_hold_release_status_and_a_bad_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EVIDENCE_KEY_STORE", f"file:{tmp_path / 'keys'}")
    monkeypatch.setenv("EVIDENCE_KEK", bytes(range(32)).hex())
    monkeypatch.delenv("EVIDENCE_RETENTION_FILE", raising=False)
    monkeypatch.setattr("cli.tlog.stack_env", lambda: {
        k: v for k, v in __import__("os").environ.items() if k.startswith("EVIDENCE_")})
    assert main(["retention", "hold", "--subject", "user-ada", "--reason", "case 17"]) == 0
    assert main(["retention", "status", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert [h["subject"] for h in doc["holds"]] == ["user-ada"] and doc["classes"] == []
    assert main(["retention", "run", "--once"]) == 3  # no retention file: nothing to do
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps({"classes": {"a": {"keep_days": -3}}}))
    monkeypatch.setenv("EVIDENCE_RETENTION_FILE", str(bad))
    assert main(["retention", "status"]) == 2
    assert "keep_days must be an integer" in capsys.readouterr().err
    assert main(["retention", "release", "--subject", "user-ada"]) == 0
    assert "released user-ada" in capsys.readouterr().out
    assert FileKeyStore(tmp_path / "keys", KEK).holds() == []


def test_the_devstack_supervises_the_shredder_only_with_a_retention_file():
    from devstack.services import SERVICES

    (svc,) = [s for s in SERVICES if s.name == "retention"]
    assert svc.exists() and svc.args == ("run",) and svc.needs == "EVIDENCE_RETENTION_FILE"


def test_a_key_erased_since_the_plan_is_skipped_with_the_reason(tmp_path):
    from server.erasure import NothingToErase

    store, clock, old, other, *_ = _two_epochs(tmp_path)

    def gone(store_, cfg, subject, request_id, reason, *, topics=None):
        raise NothingToErase(subject, request_id, ("dsr-1",))

    result = run_once(store, parse_policy(POLICY), {}, now=clock(), erase=gone)
    assert result.shredded == [] and result.failed == []
    assert [why for _, why in result.skipped] == ["erased already under request dsr-1"] * 2
    assert {k["outcome"] for k in result.summary(keys=True)["keys"]} == {"skipped"}


def _cli_env(tmp_path, monkeypatch, policy):
    monkeypatch.setenv("EVIDENCE_KEY_STORE", f"file:{tmp_path / 'keys'}")
    monkeypatch.setenv("EVIDENCE_KEK", bytes(range(32)).hex())
    (tmp_path / "retention.json").write_text(json.dumps(policy))
    monkeypatch.setenv("EVIDENCE_RETENTION_FILE", str(tmp_path / "retention.json"))
    monkeypatch.setattr("cli.tlog.stack_env", lambda: {
        k: v for k, v in __import__("os").environ.items() if k.startswith("EVIDENCE_")})


def test_cli_dry_run_at_a_given_time_names_the_keys_it_would_shred(tmp_path, monkeypatch,
                                                                     capsys):
    store, clock, old, other, kept, new = _two_epochs(tmp_path)
    _cli_env(tmp_path, monkeypatch, POLICY)

    def dry_run(when):
        assert main(["retention", "run", "--dry-run", "--now", when]) == 0
        return json.loads(capsys.readouterr().out)

    before = dry_run("2024-05-31T23:59:59Z")
    assert before["keys"] == [] and before["next_due"] == "2024-06-01T00:00:00Z"
    due = dry_run("2024-06-01")  # a date: its midnight UTC
    assert due["shredded"] == 2 and due["dry_run"] is True
    assert due["keys"] == [
        {"key_id": k.key_id, "outcome": "would_shred", "class": "short", "epoch": "2024-05-01",
         "due_at": "2024-06-01T00:00:00Z", "request_id": f"retention:short:2024-05-01:{k.key_id}"}
        for k in (old, other)]
    assert dry_run("2024-06-01T01:59:59+02:00")["keys"] == []  # an offset: 23:59:59Z
    for k in (old, other, kept, new):
        assert store.key(k.key_id) == k  # a dry run destroys nothing
    assert main(["retention", "status", "--json", "--now", "2024-06-01T00:00:00Z"]) == 0
    short = next(c for c in json.loads(capsys.readouterr().out)["classes"]
                 if c["name"] == "short")
    assert short["due_now"] == 2 and short["next_shred"] == "2024-07-16T00:00:00Z"


def test_cli_now_is_a_utc_time_and_a_real_run_never_runs_ahead(tmp_path, monkeypatch, capsys):
    _cli_env(tmp_path, monkeypatch, POLICY)
    assert main(["retention", "run", "--now", "2999-01-01T00:00:00Z"]) == 2
    assert "--now is in the future" in capsys.readouterr().err
    for bad in ("2024-06-01T00:00:00", "yesterday"):
        with pytest.raises(SystemExit) as e:
            main(["retention", "run", "--dry-run", "--now", bad])
        assert e.value.code == 2
    assert "no UTC offset" in capsys.readouterr().err
    assert main(["retention", "hold", "--subject", "user-ada", "--reason", "case 17"]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"held user-ada since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(case 17\)\n", out)
