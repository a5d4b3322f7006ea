"""An export of a range of one stream as one bundle, and its offline check (pure).

The bundle is a directory::

    range.json          the stream, the seqs, the checkpoint's size and root, and per record
                        its directory, record_digest, prev_digest and leaf hash
    checkpoint.note     the ONE signed checkpoint every record is proved in, with the
                        cosignatures it came with; log.vkey, witnesses.vkey: the keys
    records/<seq>/      each record as the single-record export writes it
                        (:func:`audit.export.build_export`: record.avro, body.avro, the content
                        files, record.json, inclusion.json into that checkpoint, a copy of
                        checkpoint.note, erasure.note where the record's content was erased,
                        and its own VERIFY.md); each is a single-record export on its own
    VERIFY.md           the range's own checks: the directories are exactly the seqs, every
                        record's checkpoint.note is this one, and each record's
                        record_digest, recomputed from its files, is the next one's prev_digest
    verify.sh           every check of VERIFY.md and of each record's VERIFY.md in one POSIX
                        ``sh`` script: it prints each failure and a count, and exits 1 on any

:func:`verify_range_export` is ``evidence verify`` of such a directory: the same checks with
the contract's code (:func:`audit.offline.verify_export` for each record).

Only records of a clean range audit are exported (the caller's rule): every one in the tree
of the checkpoint, with the proof that verified.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Sequence

from evidence_contract import GENESIS, DecodeError, split_record
from evidence_contract.merkle import record_leaf_hash
from evidence_contract.note import NoteError, VerifierKey, format_vkey
from evidence_contract.tlog import open_stream_checkpoint

from audit.export import Erased, TreeProof, _Checks, _record_digest_check, build_export
from audit.offline import Verification, _verifier_keys, verify_export

__all__ = ["RANGE_FORMAT", "RangeRecord", "build_range_export", "record_dir",
           "verify_range_export"]

RANGE_FORMAT = "evidence-store range export v1"


def record_dir(seq: int) -> str:
    """A record's directory, zero-padded so that ``ls`` lists them in seq order."""
    return f"records/{seq:010d}"


class RangeRecord:
    """One record of the range: its log position, message, inclusion proof hashes (into the
    bundle's checkpoint) and erasure (None when its content is not erased)."""

    def __init__(self, partition: int, offset: int, message: bytes, proof: Sequence[bytes],
                 erased: Erased | None = None) -> None:
        self.partition, self.offset, self.message = partition, offset, bytes(message)
        self.proof, self.erased = list(proof), erased


def build_range_export(stream: str, records: Sequence[RangeRecord], checkpoint: bytes,
                       log_key: VerifierKey, witness_keys: Sequence[VerifierKey] = ()
                       ) -> dict[str, bytes]:
    """The bundle's files (relative path -> bytes) for ``records``, consecutive seqs of
    ``stream`` in order, each proved in ``checkpoint``. ValueError (or ProofError, NoteError)
    when a record, proof or receipt does not verify: nothing unverified is exported."""
    cp, _note, _ = open_stream_checkpoint(checkpoint, log_key, stream, witness_keys)
    files: dict[str, bytes] = {"checkpoint.note": bytes(checkpoint)}
    manifest, checks, sections = [], _Checks(), []
    previous: tuple[str, str] | None = None  # (dir, record_digest command) of the last record
    for r in records:
        _body, record = split_record(r.message)
        seal = record["seal"]
        seq = seal["seq"]
        if record["body"]["stream"] != stream or (manifest and seq != manifest[-1]["seq"] + 1):
            raise ValueError(f"the records are not consecutive seqs of {stream} (at seq {seq})")
        d = record_dir(seq)
        one, its_checks = build_export(r.message, r.partition, r.offset,
                                       TreeProof(checkpoint, cp.size, r.proof, log_key,
                                                 tuple(witness_keys)), r.erased)
        files.update({f"{d}/{name}": data for name, data in one.items()})
        sections.append((d, its_checks))
        prev = bytes(seal["prev_digest"]).hex()
        if previous is not None:
            checks(f"record {seq} links to record {seq - 1}: the record_digest of {previous[0]}, "
                   f"recomputed from its files, is {d}'s prev_digest",
                   f"cd {previous[0]} && {previous[1]}", prev)
        previous = (d, _record_digest_check(_Checks(), seal))
        manifest.append({"seq": seq, "dir": d, "partition": r.partition, "offset": r.offset,
                         "record_digest": bytes(seal["record_digest"]).hex(),
                         "prev_digest": prev, "leaf_hash": record_leaf_hash(r.message).hex(),
                         "erased": r.erased is not None})
    if not manifest:
        raise ValueError("a range export holds at least one record")
    files["log.vkey"] = files[f"{manifest[0]['dir']}/log.vkey"]
    if f"{manifest[0]['dir']}/witnesses.vkey" in files:
        files["witnesses.vkey"] = files[f"{manifest[0]['dir']}/witnesses.vkey"]
    listing = "".join(m["dir"].split("/")[1] + "\n" for m in manifest).encode()
    top = _Checks()
    top(f"records/ holds one directory per seq, {manifest[0]['seq']} to {manifest[-1]['seq']}, "
        "and nothing else", "ls records | sha256sum | cut -d' ' -f1",
        hashlib.sha256(listing).digest())
    top("every record was proved in this checkpoint.note (each record's copy is this one)",
        "for d in records/*/; do cmp -s checkpoint.note \"${d}checkpoint.note\" || "
        "echo \"$d differs\"; done; sha256sum checkpoint.note | cut -d' ' -f1",
        hashlib.sha256(checkpoint).digest())
    top_checks = top.items + checks.items
    files["range.json"] = (json.dumps({
        "format": RANGE_FORMAT, "stream": stream, "first_seq": manifest[0]["seq"],
        "last_seq": manifest[-1]["seq"], "tree_size": cp.size, "root": cp.root_hash.hex(),
        "log_key": format_vkey(log_key), "records": manifest}, indent=2) + "\n").encode()
    files["VERIFY.md"] = _verify_md(stream, manifest, cp.size, top_checks).encode()
    files["verify.sh"] = _verify_sh([(".", top_checks)] + sections).encode()
    return files


def _verify_md(stream: str, manifest: list[dict[str, Any]], size: int,
               checks: list[dict[str, str]]) -> str:
    first, last = manifest[0], manifest[-1]
    erased = [m["seq"] for m in manifest if m["erased"]]
    lines = [
        f"# Verifying records {first['seq']} to {last['seq']} of {stream}", "",
        f"This bundle holds {len(manifest)} consecutive records of `{stream}`, each in its own",
        "directory under `records/` as a single-record export with its own `VERIFY.md`, and",
        f"all proved in one signed checkpoint, `checkpoint.note` (a tree of {size} records).",
        "", "Run `sh verify.sh` here to run every check below and every check of every",
        "record's `VERIFY.md`; it prints each failure and exits 1 on any. Or run them one by",
        "one: each command below, in this directory, must print the value on its",
        "`expected:` line; then the checks of each `records/<seq>/VERIFY.md`, in that",
        "directory. `evidence verify .` runs the same checks without a shell.", "",
    ]
    for i, c in enumerate(checks, 1):
        lines += [f"## {i}. {c['name']}", "", "```sh", c["command"], "```", "",
                  f"expected: `{c['expected']}`", ""]
    lines += [
        "## What this bundle proves", "",
        "Each record's own checks recompute its digests from its bytes and fold its leaf to",
        "the checkpoint's root; the checks above tie the records into one chain, so the",
        "bundle is the stream's records "
        f"{first['seq']} to {last['seq']} with no gap, exactly as the log signed them.",
        (f"Record {first['seq']}'s `prev_digest` is the chain's start (32 zero bytes)."
         if first["seq"] == 1 else
         f"Record {first['seq']}'s `prev_digest` (`{first['prev_digest']}`) is the "
         f"`record_digest` of seq {first['seq'] - 1}, outside this bundle: export it to "
         "check that link."),
        "Records outside the range are not in the bundle: the checkpoint's root covers them,",
        "nothing here re-hashes them.", "",
    ]
    if erased:
        lines += [f"The content of {len(erased)} record(s) was erased (seqs "
                  f"{', '.join(map(str, erased[:20]))}{' …' if len(erased) > 20 else ''}): "
                  "their directories hold the log's signed receipt, `erasure.note`, and say",
                  "what still verifies.", ""]
    return "\n".join(lines)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _verify_sh(sections: list[tuple[str, list[dict[str, str]]]]) -> str:
    out = ["#!/bin/sh", "# Every check of VERIFY.md and of each records/<seq>/VERIFY.md: run "
           "`sh verify.sh` in this directory.", "cd \"$(dirname \"$0\")\" || exit 2",
           "ok=0", "bad=0"]
    for d, checks in sections:
        for c in checks:
            out += [f"got=$(cd {_quote(d)} && {{", c["command"], "})",
                    f"if [ \"$got\" = {_quote(c['expected'])} ]; then ok=$((ok + 1)); "
                    f"else bad=$((bad + 1)); echo {_quote('FAIL ' + d + ': ' + c['name'])}; fi"]
    out += ["echo \"$ok checks passed, $bad failed\"", "[ \"$bad\" -eq 0 ]", ""]
    return "\n".join(out)


def verify_range_export(files: Mapping[str, bytes],
                        records: Mapping[str, Mapping[str, bytes]],
                        log_key: VerifierKey | None = None,
                        witness_keys: Sequence[VerifierKey] | None = None) -> Verification:
    """Check a range bundle: ``files`` its top-level files, ``records`` each directory under
    ``records/`` (its name -> its files). Every record is checked as a single-record export
    (:func:`audit.offline.verify_export`) with the same keys; the bundle's own checks are the
    ones of its VERIFY.md."""
    v = Verification()
    try:
        manifest = json.loads(files["range.json"])
        stream, first, last = manifest["stream"], int(manifest["first_seq"]), \
            int(manifest["last_seq"])
    except (KeyError, ValueError, TypeError) as e:
        v.add("range.json names the stream and the seqs", False, f"{type(e).__name__}: {e}")
        return v
    v.summary.update(stream=stream, first_seq=first, last_seq=last)
    v.add("range.json names the stream and the seqs", True)
    try:
        log_key, witness_keys = _verifier_keys(v, files, log_key, witness_keys)
        cp, opened, _ = open_stream_checkpoint(files.get("checkpoint.note", b""), log_key, stream,
                                               witness_keys)
    except (NoteError, ValueError, UnicodeDecodeError) as e:
        v.add("the log key signed checkpoint.note for this stream", False, str(e))
        return v
    v.add("the log key signed checkpoint.note for this stream", True)
    log_id = (log_key.name, log_key.key_id)
    cosigners = [s.name for s in opened.verified if (s.name, s.key_id) != log_id]
    missing = [k.name for k in witness_keys if k.name not in cosigners]
    v.add("every witness key cosigned the checkpoint", not missing,
          f"no valid cosignature of {', '.join(missing)}" if missing else
          f"{len(cosigners)} cosignature(s) verified")
    v.summary.update(tree_size=cp.size, root=cp.root_hash.hex(), cosigners=cosigners)
    want = {record_dir(s).split("/")[1]: s for s in range(first, last + 1)}
    extra, absent = sorted(set(records) - set(want)), sorted(set(want) - set(records))
    v.add(f"records/ holds exactly seqs {first} to {last}", not extra and not absent,
          "; ".join(x for x in (f"missing {', '.join(absent[:5])}" if absent else "",
                                f"not in the range {', '.join(extra[:5])}" if extra else "")
                    if x))
    _check_records(v, files["checkpoint.note"], records, want, log_key, witness_keys, first)
    return v


def _check_records(v: Verification, note: bytes, records: Mapping[str, Mapping[str, bytes]],
                   want: dict[str, int], log_key: VerifierKey,
                   witness_keys: Sequence[VerifierKey], first: int) -> None:
    """Each record as a single export, in this checkpoint, and the chain between them."""
    failed, links, previous = [], [], None
    for name in sorted(want):
        if name not in records:
            previous = None
            continue
        seq, rec = want[name], records[name]
        one = verify_export(rec, log_key, witness_keys)
        bad = [f"{n}" + (f" ({d})" if d else "") for n, ok, d in one.checks if not ok]
        if one.summary.get("seq") != seq:
            bad.append(f"its record is seq {one.summary.get('seq')}")
        if rec.get("checkpoint.note") != note:
            bad.append("its checkpoint.note is not the bundle's")
        if bad:
            failed.append(f"records/{name}: {'; '.join(bad)}")
        try:
            seal = split_record(rec.get("record.avro", b""))[1]["seal"]
        except DecodeError:
            previous = None
            continue
        expect = GENESIS if seq == 1 else previous
        if expect is not None and bytes(seal["prev_digest"]) != expect:
            links.append(f"seq {seq}'s prev_digest is not seq {seq - 1}'s record_digest")
        previous = bytes(seal["record_digest"])
        if seq == first and seq > 1:
            v.summary["prev_digest_of_first"] = bytes(seal["prev_digest"]).hex()
    v.add(f"each of the {len(want)} records verifies as a single export (digests, files, "
          "inclusion in checkpoint.note, erasure receipts)", not failed,
          " | ".join(failed[:10]) + (f" | … {len(failed) - 10} more" if len(failed) > 10 else ""))
    v.add("the records link one to the next (each prev_digest is the record_digest before it)",
          not links, "; ".join(links[:10]))
