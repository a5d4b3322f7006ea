"""``evidence list``: the records the API key may read, filtered, as a table or JSON.

    evidence list [--stream PATTERN] [--model M] [--outcome O] [--fingerprint F]
                  [--since T] [--until T] [--erased | --no-erased] [--encrypted | --no-encrypted]
                  [--format table|json] [--limit N] [--after CURSOR]

``--stream`` is a stream id (read through ``GET /streams/{s}/records``: a stream the key may
not read is "not found", exit 1) or a pattern of ids, ``*`` any characters and ``?`` one
(``GET /records``: the streams of the key's scope it names, in (stream, seq) order). Without
it, every stream the key may read. The filters are the API's (docs/api.md): ``--model`` the
model asked for or the one that answered, ``--since``/``--until`` the sealed time (from,
inclusive; to, exclusive; ISO 8601 with an offset, or a date, which is midnight UTC).

At most ``--limit`` records are printed (the API's pages are followed until there are that
many); when there are more, the cursor to pass as ``--after`` is printed (on stderr under a
table, as ``next_after`` in JSON). What is listed is the projection's word: ``evidence
inspect`` verifies one record.

Exit codes: 0 listed (none is no error), 1 the API unreachable or the key refused, or the
stream not found, 2 usage error.

:func:`add_filter_options`, :func:`filter_params` and :func:`records` are what ``evidence
stats`` reads with too.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterator

from .tlog import ApiClient, CliError, add_common, api_client, fail, stack_env

__all__ = ["HELP", "OUTCOMES", "Cursor", "Listing", "add_arguments", "add_filter_options", "filter_params",
           "parse_cursor", "parse_time", "records", "run", "table"]

HELP = "list records, filtered by stream pattern, model, outcome, fingerprint, time, erasure"

EXIT_OK, EXIT_CANNOT_RUN, EXIT_USAGE = 0, 1, 2
OUTCOMES = ("COMMITTED", "FAILED", "UNKNOWN")
_GLOB = re.compile(r"[A-Za-z0-9._:*?-]{1,128}")
_PAGE = 100  # records per API request (the API's most with bodies)


def add_filter_options(p: argparse.ArgumentParser) -> None:
    """The filters ``evidence list`` and ``evidence stats`` share."""
    g = p.add_argument_group("filters")
    g.add_argument("--stream", metavar="PATTERN",
                   help="a stream id, or a pattern: * any characters, ? one (acme:*); "
                        "default every stream the key may read")
    g.add_argument("--model", metavar="M", help="the model asked for, or the one that answered")
    g.add_argument("--outcome", choices=OUTCOMES, help="the call's outcome")
    g.add_argument("--fingerprint", metavar="F", help="the provider's backend fingerprint")
    g.add_argument("--since", metavar="TIME",
                   help="sealed at or after TIME (ISO 8601 with an offset, e.g. "
                        "2026-12-01T08:00:00Z, or a date: midnight UTC)")
    g.add_argument("--until", metavar="TIME", help="sealed before TIME (as --since)")
    g.add_argument("--erased", action=argparse.BooleanOptionalAction, default=None,
                   help="only records whose subject key was erased (--no-erased: none of them)")
    g.add_argument("--encrypted", action=argparse.BooleanOptionalAction, default=None,
                   help="only records sealed under a subject's key, erased since or not "
                        "(--no-encrypted: only plain ones)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_filter_options(p)
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="a table (default) or JSON: the API's records and next_after")
    p.add_argument("--limit", type=int, default=50, metavar="N",
                   help="print at most N records (default 50)")
    p.add_argument("--after", metavar="CURSOR",
                   help="start after this cursor (STREAM@SEQ, as printed; SEQ with an exact "
                        "--stream)")
    add_common(p)


def parse_time(text: str, flag: str) -> str:
    """``text`` as the API's ISO 8601 time with an offset: a date alone is its midnight UTC.
    ``CliError(2)`` for anything else, or a time without an offset."""
    try:
        if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
            at = datetime.fromisoformat(text).replace(tzinfo=timezone.utc)
        else:
            at = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(EXIT_USAGE, f"{flag} {text!r} is not an ISO 8601 time or date (e.g. "
                                   f"2026-12-01T08:00:00Z or 2026-12-01)") from None
    if at.tzinfo is None:
        raise CliError(EXIT_USAGE, f"{flag} {text!r} has no UTC offset: add Z or +hh:mm")
    return at.isoformat()


@dataclass(frozen=True)
class Cursor:
    """Where a listing goes on: after record ``seq`` of ``stream``."""

    stream: str
    seq: int

    def __str__(self) -> str:
        return f"{self.stream}@{self.seq}"


def parse_cursor(text: str, exact: str | None) -> Cursor:
    """``STREAM@SEQ``, or ``SEQ`` when the listing is of the one stream ``exact``."""
    from evidence_contract import valid_stream_id

    stream, at, seq = text.rpartition("@")
    if not at and exact is not None:
        stream = exact
    if not seq.isdigit() or not seq.isascii() or not valid_stream_id(stream):
        raise CliError(EXIT_USAGE, f"--after {text!r} is no cursor: STREAM@SEQ as printed"
                                   + (", or SEQ" if exact else ""))
    if exact is not None and stream != exact:
        raise CliError(EXIT_USAGE, f"--after {text!r} is a cursor of another stream than "
                                   f"--stream {exact}")
    return Cursor(stream, int(seq))


@dataclass(frozen=True)
class Listing:
    """What the filter options ask the API for: the stream (``exact``) or pattern, and the
    filters as query parameters."""

    pattern: str
    exact: str | None
    params: dict[str, str]


def filter_params(args: argparse.Namespace) -> Listing:
    """The listing of ``args``' filter options, checked (``CliError(2)``)."""
    from evidence_contract import valid_stream_id

    pattern = args.stream or "*"
    if not _GLOB.fullmatch(pattern):
        raise CliError(EXIT_USAGE, f"--stream {pattern!r} is neither a stream id nor a pattern "
                                   f"of one (letters, digits, . _ : -, with * and ?)")
    exact = pattern if valid_stream_id(pattern) else None
    params: dict[str, str] = {}
    for name in ("model", "outcome", "fingerprint"):
        value = getattr(args, name)
        if value is not None:
            if not value or len(value) > 256 or any(ord(c) < 32 or ord(c) == 127 for c in value):
                raise CliError(EXIT_USAGE, f"--{name} must be one line of 1 to 256 characters")
            params[name] = value
    for name in ("since", "until"):
        if getattr(args, name) is not None:
            params[name] = parse_time(getattr(args, name), f"--{name}")
    if "since" in params and "until" in params and (
            datetime.fromisoformat(params["since"]) > datetime.fromisoformat(params["until"])):
        raise CliError(EXIT_USAGE, f"--since {args.since} is after --until {args.until}")
    for name in ("erased", "encrypted"):
        if getattr(args, name) is not None:
            params[name] = "true" if getattr(args, name) else "false"
    return Listing(pattern, exact, params)


def records(api: ApiClient, listing: Listing, after: Cursor | None, limit: int | None,
            with_bytes: bool = False) -> Iterator[dict[str, Any] | Cursor | None]:
    """The records of ``listing`` after ``after``, page by page, at most ``limit`` (None: all);
    last, the cursor to go on from (None: there are no more). Each is a record as the API
    serves it (with ``include=bytes``: its bodies and log message too)."""
    cursor = after
    count = 0
    while True:
        want = _PAGE if limit is None else min(_PAGE, limit - count)
        params: dict[str, Any] = {**listing.params, "limit": want}
        if with_bytes:
            params["include"] = "bytes"
        if listing.exact is not None:
            params["after_seq"] = 0 if cursor is None else cursor.seq
            page = _get(api, f"/streams/{listing.exact}/records", params, listing)
            nxt = page.get("next_after_seq")
            cursor = None if nxt is None else Cursor(listing.exact, int(nxt))
        else:
            params["stream"] = listing.pattern
            if cursor is not None:
                params.update(after_stream=cursor.stream, after_seq=cursor.seq)
            page = _get(api, "/records", params, listing)
            nxt = page.get("next_after")
            cursor = None if nxt is None else Cursor(nxt["stream"], int(nxt["seq"]))
        for record in page.get("records") or []:
            yield record
            count += 1
        if cursor is None or (limit is not None and count >= limit):
            yield cursor
            return


def _get(api: ApiClient, path: str, params: dict[str, Any], listing: Listing) -> dict[str, Any]:
    r = api.get(path, params)
    if r.status_code == 404 and listing.exact is not None:
        raise CliError(EXIT_CANNOT_RUN, f"no stream {listing.exact} visible to this API key")
    if r.status_code != 200:
        api.ok(path, params)  # raises with the API's reason (422: a usage error)
    return r.json()


_COLUMNS = (("stream", 20), ("seq", 6), ("sealed", 27), ("outcome", 9), ("model", 24),
            ("fingerprint", 14), ("content", 9), ("event_id", 36))


def row_of(record: dict[str, Any]) -> dict[str, str]:
    """The table's cells of a record: the model is the one that answered, else the one asked
    for."""
    return {"stream": record["stream"], "seq": str(record["seq"]),
            "sealed": record["occurred_at"], "outcome": record["outcome"],
            "model": record.get("response_model") or record.get("model_id") or "-",
            "fingerprint": record.get("fingerprint") or "-", "content": record["content"],
            "event_id": record["event_id"]}


def table(rows: list[dict[str, str]], columns: tuple[tuple[str, int], ...] = _COLUMNS) -> str:
    """``rows`` under a header, each column as wide as its widest cell (at least its
    minimum)."""
    widths = {name: max([len(name), width, *(len(r.get(name, "")) for r in rows)])
              for name, width in columns}
    lines = ["  ".join(name.ljust(widths[name]) for name, _ in columns).rstrip()]
    lines += ["  ".join(r.get(name, "").ljust(widths[name]) for name, _ in columns).rstrip()
              for r in rows]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        if args.limit < 1:
            raise CliError(EXIT_USAGE, f"--limit must be 1 or more, got {args.limit}")
        listing = filter_params(args)
        after = None if args.after is None else parse_cursor(args.after, listing.exact)
        api = api_client(args, stack_env())
        found = list(records(api, listing, after, args.limit))
    except CliError as e:
        return fail("list", e)
    cursor = found.pop()
    if args.format == "json":
        print(json.dumps({"records": found, "next_after": None if cursor is None else str(cursor)},
                         indent=2))
        return EXIT_OK
    if found:
        print(table([row_of(r) for r in found]))
    print(f"({len(found)} record{'' if len(found) == 1 else 's'})", file=sys.stderr)
    if cursor is not None:
        print(f"more: evidence list ... --after {cursor}", file=sys.stderr)
    return EXIT_OK
