"""``evidence audit [--stream S] [--json] [--no-projection] [--log-key FILE]
[--witness URL ...] [--checkpoint FILE ...] [--witness-key KEY ...]``, and over a range of one
stream ``evidence audit --stream S (--seq A..B | --last N | --since T [--until T])``.

Reads the log itself from offset 0 and recomputes every digest and link, compares the chain
tails with the writer's heads, then checks the live projection against the log.

With the log's verifier key (``--log-key``, else ``$EVIDENCE_LOG_VERIFIER_KEY_FILE`` or the
signer key of ``$EVIDENCE_LOG_SIGNING_KEY_FILE`` in the environment, else ``.stack/env``'s)
it also rebuilds each stream's Merkle tree and checks every checkpoint on
``evidence.checkpoints`` against it, and each witnessed checkpoint: those the witnesses at
``--witness URL`` cosigned (and the checkpoints they refused) and the notes in
``--checkpoint FILE``, their cosignatures verified with ``--witness-key`` (a verifier key or a
file of them). See :mod:`audit.tlog` for the finding kinds.

The deployment tree (``<prefix>.tree``, the one log witnesses follow) is read first: every
signed deployment checkpoint must be its entries' tree, every entry (a stream checkpoint) the
log's records at its size. Each ``--witness URL``, ours or any C2SP tlog-witness, is shown the
newest deployment checkpoint with the consistency proof from the size it holds
(:mod:`audit.witnesses`): its cosignature makes every entry a witnessed checkpoint, its
refusal is a ``witness_refused`` finding.

A range (:mod:`audit.range_audit`) starts from the stream's signed checkpoint instead of
offset 0 (the newest in the projection that the log key signed, cosigned by a
``--witness-key`` witness when given, or the one ``--checkpoint FILE`` holds), reads only the
range's records, the one before it and, for a time window, the one after it, and checks their
digests, their links and their inclusion in the checkpoint's tree; the summary says what that
proves and what it leaves to the full audit.

Exit codes: 0 clean, 1 could not run, 2 usage error, 3 found something.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .report import LazyProgress, write_json
from .settings import PolicyFiles, SettingsError, add_options, resolve
from .tlog import CliError, fail

HELP = "verify the log's chains and digests, and the projection against the log"


def _stack_env() -> dict[str, str]:
    try:
        from devstack import StackConfig, read_env
    except ImportError:  # an installed wheel, not a checkout: there is no local stack
        stack = {}
    else:
        stack = read_env(StackConfig.from_env())
    return {**stack, **{k: v for k, v in os.environ.items() if k.startswith("EVIDENCE_")}}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stream", help="audit one stream only")
    p.add_argument("--json", metavar="FILE", nargs="?", const="-",
                   help="write the JSON report to FILE (default: standard output)")
    p.add_argument("--no-projection", action="store_true",
                   help="check the log only, not the PostgreSQL projection")
    add_options(p, "bootstrap", "database_url", "views_schema")
    p.add_argument("--log-key", metavar="FILE",
                   help="the log's verifier key (default $EVIDENCE_LOG_VERIFIER_KEY_FILE)")
    p.add_argument("--witness", metavar="URL", action="append", default=[],
                   help="a witness (any C2SP tlog-witness: its submission prefix) to show "
                        "the log's deployment checkpoint, and ours to ask what it cosigned "
                        "and refused (repeatable)")
    p.add_argument("--checkpoint", metavar="FILE", action="append", default=[],
                   help="a witnessed checkpoint note you kept (repeatable)")
    p.add_argument("--witness-key", metavar="KEY", action="append", default=[],
                   help="a witness's verifier key, or a file of them (repeatable)")
    p.add_argument("--no-trees", action="store_true",
                   help="skip the Merkle tree and checkpoint checks")
    add_range_options(p, "audit seqs A..B of --stream only (from a verified checkpoint)")


def add_range_options(p: argparse.ArgumentParser, seq_help: str) -> None:
    """``--seq``, ``--last``, ``--since``, ``--until``: a range of ``--stream``
    (:mod:`audit.range_spec`); ``evidence export`` takes them too."""
    g = p.add_argument_group("a range of one stream (with --stream)")
    g.add_argument("--seq", metavar="A..B", help=seq_help)
    g.add_argument("--last", type=int, metavar="N",
                   help="the last N records the stream's latest checkpoint covers")
    g.add_argument("--since", metavar="TIME",
                   help="records sealed at or after TIME (ISO 8601; UTC without an offset)")
    g.add_argument("--until", metavar="TIME", help="records sealed before TIME (ISO 8601)")


def range_spec(args: argparse.Namespace, seq: str | None):
    """The range the options give (None: none); CliError(2) when they give no range."""
    from audit.range_spec import RangeError, RangeSpec

    try:
        spec = RangeSpec.from_options(seq, args.last, args.since, args.until,
                                      getattr(args, "all", False))
    except RangeError as e:
        raise CliError(2, str(e)) from e
    if spec is not None and args.stream is None:
        raise CliError(2, "a range (--seq, --last, --since, --until) is of one stream: "
                          "give --stream")
    return spec


def run_range(args: argparse.Namespace, env: dict[str, str], spec, checkpoint: str | None):
    """The range audit of ``spec`` (:func:`audit.range_run.run_range_audit`) with the shared
    options' services and the keys of ``--log-key``/``--witness-key``; CliError when it
    cannot run (1) or the range selects nothing (2)."""
    from pathlib import Path

    from audit.errors import AuditError
    from audit.range_run import run_range_audit
    from audit.range_spec import RangeError

    try:
        shared = resolve(args, env)
        log_key, witness_keys = _keys(args, env)
    except (SettingsError, ValueError) as e:
        raise CliError(2, str(e)) from e
    if log_key is None:
        raise CliError(2, "a range audit starts from a signed checkpoint: it needs the log's "
                          "verifier key (--log-key FILE or EVIDENCE_LOG_VERIFIER_KEY_FILE)")
    missing = shared.need("bootstrap", "database_url")
    if missing:
        raise CliError(1, f"a range needs Kafka (the records) and PostgreSQL (where they are): "
                          f"{missing}")
    kept = None
    if checkpoint is not None:
        try:
            kept = (Path(checkpoint).read_bytes(), f"file {checkpoint}")
        except OSError as e:
            raise CliError(2, f"cannot read the checkpoint {checkpoint}: {e}") from e
    try:
        return run_range_audit(str(shared.bootstrap), shared.connection.names,
                               str(shared.database_url), args.stream, spec, log_key,
                               witness_keys, kept, shared.views_schema)
    except RangeError as e:
        raise CliError(2, str(e)) from e
    except AuditError as e:
        raise CliError(1, f"cannot run: {e}") from e


def _keys(args: argparse.Namespace, env: dict[str, str]):
    """(log key or None, witness keys); ValueError with a usage message."""
    from pathlib import Path

    from evidence_contract.note import NoteError, parse_skey, parse_vkey

    def read(path: str) -> str:
        try:
            return Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot read {path}: {e}") from e

    log_key = None
    # The process's own variables first, then .stack/env's: a test or an operator that names
    # a key is not overruled by the local stack's.
    candidates = [(args.log_key, parse_vkey)] if args.log_key else []
    for source in (os.environ, env):
        candidates += [(source.get("EVIDENCE_LOG_VERIFIER_KEY_FILE"), parse_vkey),
                       (source.get("EVIDENCE_LOG_SIGNING_KEY_FILE"),
                        lambda t: parse_skey(t).verifier)]
    for path, parse in candidates:
        if path:
            try:
                log_key = parse(read(path))
            except NoteError as e:
                raise ValueError(f"{path} is not a note key: {e}") from e
            break
    witness_keys = []
    for item in args.witness_key:
        texts = [item] if "+" in item and not os.path.exists(item) else read(item).splitlines()
        for t in (t.strip() for t in texts):
            if t and not t.startswith("#"):  # a key a line; a witnesses file's URLs ignored
                t = t.split()[0]
                try:
                    witness_keys.append(parse_vkey(t))
                except NoteError as e:
                    raise ValueError(f"--witness-key {t[:60]!r} is not a verifier key: {e}") \
                        from e
    return log_key, witness_keys


def run(args: argparse.Namespace) -> int:
    from audit.errors import AuditError
    from audit.run import run_audit
    from evidence_contract import valid_stream_id
    from topics import TopicSettings

    if args.stream is not None and not valid_stream_id(args.stream):
        return fail("audit", CliError(2, f"{args.stream!r} is not a stream id "
                                         f"([A-Za-z0-9._:-]{{1,128}})"))
    env = _stack_env()
    try:
        spec = range_spec(args, args.seq)
        if spec is not None:
            return _audit_range(args, env, spec)
    except CliError as e:
        return fail("audit", e)
    try:
        bootstrap, db, views = _connection(args, env)
        settings = TopicSettings.from_env(env)
        trees = None if args.no_trees else _trees(args, env, bootstrap, settings.names)
        redaction = _redaction(env, db, views)
        # Offsets read of the log's end offsets (commit markers take offsets too); on a
        # terminal one rewritten line, in a log file a line every few seconds.
        progress = LazyProgress(f"auditing {settings.names.log}")
        report = run_audit(bootstrap, settings.names, db,
                           views=views,
                           stream=args.stream, progress=progress, trees=trees,
                           redaction=redaction)
    except AuditError as e:
        return fail("audit", CliError(1, f"cannot run: {e}"))
    except CliError as e:
        return fail("audit", e)
    progress.close(report.messages)
    if args.json is not None:
        write_json(report.to_dict(), args.json)
    if args.json != "-":
        _print_summary(report)
    return 0 if report.clean else 3


def _audit_range(args: argparse.Namespace, env: dict[str, str], spec) -> int:
    not_here = [flag for flag, given in (("--witness", args.witness),
                                         ("--no-projection", args.no_projection),
                                         ("--no-trees", args.no_trees)) if given]
    if not_here:
        raise CliError(2, f"{', '.join(not_here)}: not with a range (a range starts from a "
                          "checkpoint, finds its records through the projection and checks "
                          "them against the tree); run the full audit for that")
    if len(args.checkpoint) > 1:
        raise CliError(2, "a range starts from one checkpoint: give --checkpoint once")
    run = run_range(args, env, spec, args.checkpoint[0] if args.checkpoint else None)
    report = run.report
    if args.json is not None:
        write_json(report.to_dict(), args.json)
    if args.json != "-":
        _print_range_summary(report)
    return 0 if report.clean else 3


def _print_range_summary(report) -> None:
    d = report.to_dict()
    cp, read = d["checkpoint"], d["read"]
    print(f"range: {report.stream} seqs {report.span} ({report.spec.describe()})")
    print(f"checkpoint: size {cp['tree_size']}, root {cp['root'][:16]}…, from "
          f"{cp['source']}, signed by the log key"
          + (f", cosigned by {', '.join(cp['cosigners'])}" if cp["cosigners"] else ""))
    print(f"read: {read['records']:,} records of the range"
          + (f", seq {read['before']} before it" if read["before"] else "")
          + (f", seq {read['after']} after it" if read["after"] else "")
          + f"; {len(read['positions']):,} log messages, nothing else of the log")
    if cp["passed_over"]:
        print(f"passed over: the projection's tree does not reproduce the larger signed "
              f"checkpoint(s) of size {', '.join(map(str, cp['passed_over']))}; the range is "
              f"checked against size {cp['tree_size']}, the largest it does (the full "
              f"`evidence audit` says why)")
    after = d["range"]["records_after_checkpoint"]
    if after:
        print(f"not covered: {after:,} records after the checkpoint's size (the projection's "
              f"head), not audited")
    if report.encrypted:
        print(f"encrypted: {report.encrypted:,} records, {report.erased:,} of them erased "
              f"(content unrecoverable; chain and proofs checked; not findings)")
    print("what this proves:")
    for line in d["proves"]:
        print(f"  + {line}")
    print("what it does not:")
    for line in d["does_not_prove"]:
        print(f"  - {line}")
    if report.clean:
        print(f"CLEAN: seqs {report.span} of {report.stream}: every digest recomputes, every "
              f"link holds, every record is in the signed tree of size {cp['tree_size']}")
        return
    print("FINDINGS:")
    for kind, n in report.by_kind().items():
        print(f"  {kind:<26} {n:>6,}")
    for f in report.findings[:50]:
        pos = f" @{f.partition}:{f.offset}" if f.partition is not None else ""
        print(f"  - {f.kind} {f.stream}#{f.seq}{pos}: {f.detail}")
    if len(report.findings) > 50:
        print(f"  ... and {len(report.findings) - 50} more (use --json for all)")


def _connection(args: argparse.Namespace, env: dict[str, str]):
    """(Kafka bootstrap, database URL or None with --no-projection, views schema)."""
    try:
        shared = resolve(args, env)
    except SettingsError as e:
        raise CliError(2, str(e)) from e
    if not shared.bootstrap:
        raise CliError(1, "no Kafka to read: pass --bootstrap, set EVIDENCE_KAFKA_BOOTSTRAP "
                          "or run `make up`")
    db = None if args.no_projection else shared.database_url
    return shared.bootstrap, db, shared.views_schema


def _trees(args: argparse.Namespace, env: dict[str, str], bootstrap: str, names):
    """The tree audit, with the witnessed checkpoints of --checkpoint and --witness and the
    deployment tree read; None without the log's verifier key."""
    from audit.run import read_deployment_tree
    from audit.tlog import TreeAudit
    from audit.witnesses import load_checkpoint_file, load_witness

    try:
        log_key, witness_keys = _keys(args, env)
    except ValueError as e:
        raise CliError(2, str(e)) from e
    if log_key is None and (args.witness or args.checkpoint):
        raise CliError(2, "--witness and --checkpoint need the log's verifier key: "
                          "pass --log-key FILE or set EVIDENCE_LOG_VERIFIER_KEY_FILE")
    if log_key is None:
        return None
    trees = TreeAudit(log_key, stream_filter=args.stream)
    for path in args.checkpoint:
        load_checkpoint_file(trees, path, witness_keys)
    catch_up = read_deployment_tree(bootstrap, names, trees)
    for url in args.witness:
        load_witness(trees, url, witness_keys, args.stream, catch_up=catch_up)
    return trees


def _redaction(env: dict[str, str], db: str | None, views: str):
    """The redaction policy the projection's rows are recomputed with: the one the live
    generation records it was built with (else, for an older generation,
    EVIDENCE_REDACTION_FILE, the projector's file), so a masked body is what it says."""
    from projections.redact import RedactionError, load

    try:
        recorded, redaction = False, None
        if db:
            from audit.projection_db import recorded_redaction

            recorded, redaction = recorded_redaction(db, views)
        if not recorded:
            path = PolicyFiles.from_env(env).redaction
            redaction = load(path) if path else None
    except (OSError, RedactionError) as e:
        raise CliError(2, f"redaction policy: {e}") from e
    return redaction


def _print_summary(report) -> None:
    print(f"{'stream':<40} {'records':>9} {'findings':>9}")
    for s, n in sorted(report.streams.items()):
        k = sum(1 for f in report.findings if f.stream == s)
        print(f"{s:<40} {n:>9,} {k:>9,}")
    lag = (f" ({report.projection_lag:,} log records not projected yet, not compared)"
           if report.projection_lag else "")
    print(f"{len(report.streams)} streams, {report.messages:,} log messages, "
          f"projection {'checked' if report.projection_checked else 'not checked'}{lag}")
    erased = sum(report.erased.values())
    if erased or sum(report.encrypted.values()):
        print(f"encrypted: {sum(report.encrypted.values()):,} records, {erased:,} of them "
              f"erased (their keys destroyed: content unrecoverable, chain and proofs "
              f"checked; not findings)"
              + ("" if report.erasures is None or report.erasures["verified"]
                 else "; erasure receipts read without the log key, unverified"))
    if report.trees is not None:
        ts = report.trees["streams"]
        print(f"trees: {sum(s['checkpoints_checked'] for s in ts):,} signed checkpoints and "
              f"{sum(len(s['witnessed']) for s in ts):,} witnessed ones checked, "
              f"{report.trees['witness_refusals']:,} witness refusals of log-signed ones")
        d = report.trees.get("deployment")
        if d is not None:
            seen = "; ".join(f"{w['source']} cosigned size {w['size']}"
                             + (f" ({', '.join(w['cosigners'])})" if w["cosigners"] else "")
                             for w in d["witnessed"]) or "no witness asked (--witness URL)"
            print(f"deployment tree: {d['entries']:,} entries (stream checkpoints), newest "
                  f"signed checkpoint of size {d['latest_signed_size']}; {seen}")
    else:
        print("trees: not checked (no log verifier key: pass --log-key)")
    if report.clean:
        print("CLEAN: every chain links, every digest recomputes"
              + (", the projection matches the log" if report.projection_checked else ""))
        return
    print("FINDINGS:")
    for kind, n in report.by_kind().items():
        print(f"  {kind:<26} {n:>6,}")
    for f in report.findings[:50]:
        loc = f"{f.stream}#{f.seq}" if f.stream else "?"
        pos = f" @{f.partition}:{f.offset}" if f.partition is not None else ""
        print(f"  - {f.kind} {loc}{pos}: {f.detail}")
    if len(report.findings) > 50:
        print(f"  ... and {len(report.findings) - 50} more (use --json for all)")
