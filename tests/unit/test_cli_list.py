"""The pure parts of `evidence list` and of the API's record filters: times, cursors, stream
patterns, filter SQL, keyset pages."""

from __future__ import annotations

import argparse

import pytest

from api.routers.records import _keyset_page, _like, parse_instant
from api.sql import RecordFilter, filter_sql, records_sql
from cli.main import main
from cli.records import Cursor, add_arguments, filter_params, parse_cursor, parse_time, table
from cli.tlog import CliError
from api.errors import InvalidRequest


def args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(argv))


@pytest.mark.parametrize("text, want", [
    ("2026-12-01", "2026-12-01T00:00:00+00:00"),
    ("2026-12-01T08:30:00Z", "2026-12-01T08:30:00+00:00"),
    ("2026-12-01T08:30:00+02:00", "2026-12-01T08:30:00+02:00"),
    ("2026-12-01T08:30:00.123456Z", "2026-12-01T08:30:00.123456+00:00"),
])
def test_parse_time_gives_an_offset(text, want):
    assert parse_time(text, "--since") == want


@pytest.mark.parametrize("text, words", [
    ("2026-12-01T08:30:00", "no UTC offset"), ("yesterday", "not an ISO 8601"),
    ("2026-13-01", "not an ISO 8601"), ("", "not an ISO 8601"),
])
def test_parse_time_refuses_what_is_ambiguous_or_no_time(text, words):
    with pytest.raises(CliError) as e:
        parse_time(text, "--since")
    assert e.value.code == 2 and words in str(e.value)


def test_cursors():
    assert parse_cursor("acme:chat@12", None) == Cursor("acme:chat", 12)
    assert str(Cursor("acme:chat", 12)) == "acme:chat@12"
    assert parse_cursor("12", "acme:chat") == Cursor("acme:chat", 12)
    assert parse_cursor("acme:chat@3", "acme:chat") == Cursor("acme:chat", 3)
    for bad, exact in (("12", None), ("acme:chat@", None), ("acme:chat@-1", None),
                       ("a*b@1", None), ("other@1", "acme:chat"), ("acme:chat@١", None)):
        with pytest.raises(CliError) as e:
            parse_cursor(bad, exact)
        assert e.value.code == 2, bad


def test_filter_params_map_the_flags_to_the_api():
    listing = filter_params(args("--stream", "acme:*", "--model", "gpt-4o", "--outcome",
                                 "FAILED", "--fingerprint", "fp_1", "--since", "2026-12-01",
                                 "--until", "2026-12-02T00:00:00Z", "--no-erased",
                                 "--encrypted"))
    assert listing.pattern == "acme:*" and listing.exact is None
    assert listing.params == {"model": "gpt-4o", "outcome": "FAILED", "fingerprint": "fp_1",
                              "since": "2026-12-01T00:00:00+00:00",
                              "until": "2026-12-02T00:00:00+00:00", "erased": "false",
                              "encrypted": "true"}
    exact = filter_params(args("--stream", "acme:chat"))
    assert exact.exact == "acme:chat" and exact.params == {}
    assert filter_params(args()).pattern == "*"


@pytest.mark.parametrize("argv, words", [
    (["--stream", "acme:[ab]"], "neither a stream id"),
    (["--stream", "x" * 129], "neither a stream id"),
    (["--model", "a\nb"], "one line"),
    (["--since", "2026-12-02", "--until", "2026-12-01"], "after --until"),
])
def test_filter_params_refuse_bad_values(argv, words):
    with pytest.raises(CliError) as e:
        filter_params(args(*argv))
    assert e.value.code == 2 and words in str(e.value)


@pytest.mark.parametrize("argv, words", [
    (["list", "--outcome", "committed"], "invalid choice"),
    (["list", "--limit", "0"], "--limit must be 1 or more"),
    (["list", "--since", "noon"], "not an ISO 8601"),
    (["list", "--after", "nope"], "no cursor"),
    (["list", "--format", "csv"], "invalid choice"),
    (["inspect", "--stream", "a:b"], "name the record"),
    (["inspect", "--event-id", "not-a-uuid"], "not a UUIDv7"),
    (["inspect", "--stream", "a:b", "--seq", "0"], "--seq must be 1 or more"),
    (["inspect", "--stream", "a:b", "--seq", "1", "--event-id",
      "0190b6d2-7c3e-7a51-9f00-1234567890ab"], "not both"),
    (["stats", "--stream", "a b"], "neither a stream id"),
])
def test_usage_errors_exit_2_before_any_request(argv, words, capsys):
    try:
        code = main([*argv, "--api", "http://127.0.0.1:9", "--api-key", "k" * 40])
    except SystemExit as e:  # argparse's own usage errors
        code = e.code
    assert code == 2, capsys.readouterr()
    assert words in capsys.readouterr().err


def test_an_unreachable_api_exits_1(capsys):
    assert main(["list", "--api", "http://127.0.0.1:9", "--api-key", "k" * 40]) == 1
    assert "cannot reach the API" in capsys.readouterr().err


def test_table_widens_to_the_widest_cell():
    out = table([{"a": "x", "b": "longer cell"}], (("a", 1), ("b", 2))).splitlines()
    assert out == ["a  b", "x  longer cell"]


def test_api_parse_instant_and_like():
    assert parse_instant("1970-01-01T00:00:01Z", "since") == 1_000_000
    assert parse_instant("1970-01-01T01:00:00.5+01:00", "since") == 500_000
    with pytest.raises(InvalidRequest, match="no UTC offset"):
        parse_instant("2026-12-01T00:00:00", "until")
    with pytest.raises(InvalidRequest, match="not an ISO 8601"):
        parse_instant("2026-12-01T25:00:00Z", "until")
    assert _like("acme:*") == "acme:%" and _like("a_b?") == r"a\_b_"


def test_filter_sql_conditions():
    assert filter_sql('"v"', RecordFilter()) == ([], [])
    assert not RecordFilter() and RecordFilter(erased=False)
    conds, params = filter_sql('"v"', RecordFilter(model="m", outcome="FAILED", since_us=1,
                                                   until_us=2, encrypted=False, erased=True))
    assert params == ["m", "m", "FAILED", 1, 2]
    assert "records.key_id is null" in conds
    assert any(c.startswith("exists (select 1 from \"v\".erasures") for c in conds)
    sql, _ = records_sql('"v"', "stream = %s", RecordFilter(fingerprint="f"), True)
    assert "records.fingerprint = %s" in sql and "record_bytes" in sql and sql.endswith("limit %s")


def test_keyset_page_never_splits_copies_of_a_seq():
    rows = [("s", 1, "a"), ("s", 2, "b"), ("s", 2, "c"), ("s", 3, "d")]
    assert _keyset_page(rows[:2], 2) == (rows[:2], None)
    assert _keyset_page(rows[:3], 2) == ([rows[0]], ("s", 1))
    assert _keyset_page([("s", 2, "b"), ("s", 2, "c"), ("s", 2, "d")], 2) == (
        [("s", 2, "b"), ("s", 2, "c")], ("s", 2))
    assert _keyset_page([("a", 1, 0), ("b", 1, 0), ("b", 2, 0)], 2) == (
        [("a", 1, 0), ("b", 1, 0)], ("b", 1))
