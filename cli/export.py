"""``evidence export --stream S --seq N --out DIR``, and of a range or a whole stream as one
bundle: ``evidence export --stream S (--seq A..B | --last N | --since T [--until T] | --all)
--out DIR``.

Finds the record's log position in the projection, reads the message from the log itself (the
projection is only the index), and writes the files of :mod:`audit.export`. From the API
(``--api``/``--api-key``, as ``evidence prove``) it adds the stream's latest checkpoint with its
cosignatures and the record's inclusion proof, both verified here first with the log key
(``--log-key``, see :mod:`cli.tlog`) and the witness keys (``--witness-key``, else
``$EVIDENCE_WITNESS_KEYS``); without an API, or before a checkpoint covers the record, the
export says it has no proof. A record whose key was erased (the projection's ``erasures``)
exports without content, and with the log's signed receipt when there is a proof to check
it against: VERIFY.md says erased, and what still verifies.

A range is read and checked exactly as ``evidence audit`` checks one (:mod:`audit.range_run`:
from the stream's signed checkpoint, the log key needed) and written only when that audit is
clean, as :mod:`audit.range_export` lays it out: every record a single-record export in
``records/<seq>/``, all proved in ONE checkpoint, with the range's own VERIFY.md and a
``verify.sh`` that runs every check; ``evidence verify DIR`` checks it without a shell.

Exit codes: 0 written, 1 the record or a service is missing (or the range does not verify),
2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .settings import SettingsError, add_options, resolve, stack_env
from .tlog import CliError, fail

HELP = ("export one record, a range or a whole stream with the commands that re-verify it "
        "using standard tools")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from cli.audit import add_range_options

    p.add_argument("--stream", required=True, help="stream id")
    p.add_argument("--out", required=True, type=Path, help="directory to write (created)")
    add_range_options(p, "N: the record with that sequence number; A..B: those records, "
                         "as one bundle")
    p.add_argument("--all", action="store_true",
                   help="every record of the stream its latest checkpoint covers, as one bundle")
    add_options(p, "bootstrap", "database_url", "views_schema", "topic_prefix")
    p.add_argument("--log-key", metavar="FILE", help="the log's verifier key (see evidence prove)")
    p.add_argument("--witness-key", metavar="KEY", action="append", default=[],
                   help="a witness's verifier key or a file of them (default "
                        "$EVIDENCE_WITNESS_KEYS)")
    p.add_argument("--no-proof", action="store_true", help="do not ask the API for a proof")
    from cli.tlog import add_common

    add_common(p)


def _proof(args: argparse.Namespace, env: dict[str, str], stream: str, seq: int):
    """The TreeProof for the record from the API, or (None, why not)."""
    import os

    from audit.export import TreeProof
    from cli.tlog import api_client, log_key
    from evidence_contract.note import NoteError, parse_vkey

    try:
        api = api_client(args, env)
        key, _source = log_key(args.log_key, env, api)
        r = api.get(f"/streams/{stream}/checkpoint")
        if r.status_code != 200:
            return None, f"the log has no checkpoint of {stream} ({r.status_code})"
        note = r.content
        size = int(note.split(b"\n")[1])
        if size < seq:
            return None, f"the latest checkpoint covers {size} records, not yet #{seq}"
        proof = api.ok(f"/streams/{stream}/proof/inclusion",
                       {"seq": seq, "tree_size": size}).json()
        texts = list(args.witness_key) or [t for t in env.get("EVIDENCE_WITNESS_KEYS", "")
                                           .replace(",", "\n").splitlines()]
        keys = []
        for item in texts:
            item = item.strip()
            if not item:
                continue
            lines = [item] if "+" in item and not os.path.exists(item) else \
                open(item, encoding="utf-8").read().splitlines()
            keys += [parse_vkey(t.strip()) for t in lines if t.strip()]
        return TreeProof(note, size, [bytes.fromhex(h) for h in proof["hashes"]], key,
                         tuple(keys)), None
    except CliError as e:
        return None, str(e)
    except (OSError, ValueError, KeyError, NoteError) as e:
        return None, f"{type(e).__name__}: {e}"


def run(args: argparse.Namespace) -> int:
    from audit.errors import AuditError
    from audit.export import build_export
    from evidence_contract import valid_stream_id
    from evidence_contract.merkle import ProofError
    from evidence_contract.note import NoteError

    one = args.seq is not None and args.seq.strip().isdigit()
    if not valid_stream_id(args.stream) or (one and int(args.seq) < 1):
        return fail("export", CliError(2, "--stream must be a stream id and --seq a positive "
                                          "integer or A..B"))
    if args.out.exists() and any(args.out.iterdir()):
        return fail("export", CliError(2, f"{args.out} exists and is not empty; choose a new "
                                          "directory"))
    env = stack_env()
    if not one:
        return _export_range(args, env)
    if args.last is not None or args.since or args.until or args.all:
        return fail("export", CliError(2, "--seq N is one record: no --last, --since, "
                                          "--until or --all with it"))
    args.seq = int(args.seq)
    try:
        s = resolve(args, env)
    except SettingsError as e:
        return fail("export", CliError(2, str(e)))
    try:
        where, message, erased = _read_record(args, s)
    except AuditError as e:
        return fail("export", CliError(1, f"cannot run: {e}"))
    except CliError as e:
        return fail("export", e)
    proof, why = (None, "--no-proof") if args.no_proof else _proof(args, env, args.stream,
                                                                     args.seq)
    try:
        files, checks = build_export(message, *where, proof, erased)
    except (ProofError, NoteError, ValueError) as e:
        return fail("export", CliError(1, f"the log's checkpoint or proof for {args.stream} "
                                          f"#{args.seq} does not verify: {e}"))
    if proof is None:
        print(f"evidence export: no inclusion proof in this export: {why}", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (args.out / name).write_bytes(data)
    print(f"wrote {len(files)} files to {args.out}; {len(checks)} checks in "
          f"{args.out / 'VERIFY.md'}"
          + (f"; the record's content was erased (request {erased.request_id})"
             if erased is not None else ""))
    return 0


def _read_record(args: argparse.Namespace, s):
    """(the log position, the message, its erasure or None) of --stream/--seq: the position
    from the projection (only the index), the message from the log itself."""
    from audit.export import Erased
    from audit.kafka_log import fetch_message
    from audit.projection_db import erasure_of, locate
    from evidence_contract import split_record

    missing = s.need("bootstrap", "database_url")
    if missing:
        raise CliError(1, f"need Kafka and PostgreSQL: {missing}")
    db = str(s.database_url)
    where = locate(db, args.stream, args.seq, s.views_schema)
    if where is None:
        raise CliError(1, f"no record {args.stream} #{args.seq}")
    message = fetch_message(str(s.bootstrap), s.connection.names.log, *where)
    _body, record = split_record(message)
    erased = None
    if record["body"].get("encryption") is not None:
        found = erasure_of(db, args.stream, args.seq, s.views_schema)
        erased = None if found is None else Erased(*found)
    if (record["body"]["stream"], record["seal"]["seq"]) != (args.stream, args.seq):
        raise CliError(1, f"the log message at {where} is not {args.stream} #{args.seq}: "
                          "the projection is stale or altered; run `evidence audit`")
    return where, message, erased


def _export_range(args: argparse.Namespace, env: dict[str, str]) -> int:
    """A range, or the whole stream, as one bundle (module docstring)."""
    from audit.export import Erased
    from audit.range_export import RangeRecord, build_range_export
    from cli.audit import range_spec, run_range
    from evidence_contract.errors import EvidenceError

    try:
        spec = range_spec(args, args.seq)
        if spec is None:
            raise CliError(2, "give --seq N (one record), or a range: --seq A..B, --last N, "
                              "--since/--until or --all")
        if args.no_proof:
            raise CliError(2, "--no-proof: a range is always exported with its proofs")
        if not args.witness_key:
            args.witness_key = [t.strip() for t in env.get("EVIDENCE_WITNESS_KEYS", "")
                                .replace(",", "\n").splitlines() if t.strip()]
        run = run_range(args, env, spec, None)
    except CliError as e:
        return fail("export", e)
    report = run.report
    if not report.clean:
        kinds = ", ".join(f"{n} {k}" for k, n in report.by_kind().items())
        return fail("export", CliError(1, f"seqs {report.span} of {args.stream} do not verify "
                                          f"({kinds}); nothing written: run `evidence audit "
                                          f"--stream {args.stream} --seq {report.span}`"))
    proved = {}
    for c in report.read:
        if report.span.first <= c.seq <= report.span.last and c.proof is not None:
            proved.setdefault(c.seq, c)
    records = []
    for seq in range(report.span.first, report.span.last + 1):
        c = proved[seq]
        r = run.receipts.get(seq)
        records.append(RangeRecord(c.partition, c.offset, c.message, c.proof,
                                   None if r is None else Erased(r.erased_at, r.request_id,
                                                                 r.note)))
    from cli.audit import _keys

    log_key, witness_keys = _keys(args, env)
    try:
        files = build_range_export(args.stream, records, run.note, log_key, witness_keys)
    except (EvidenceError, ValueError) as e:
        return fail("export", CliError(1, f"the range of {args.stream} does not verify for "
                                          f"export: {e}"))
    for name, data in files.items():
        path = args.out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    cp = report.checkpoint.checkpoint
    erased = sum(1 for r in records if r.erased is not None)
    print(f"wrote seqs {report.span} of {args.stream} ({len(records)} records) to {args.out}, "
          f"proved in the checkpoint of size {cp.size}; check it with `evidence verify "
          f"{args.out}` or `sh {args.out / 'verify.sh'}`"
          + (f"; {erased} records' content erased" if erased else ""))
    return 0
