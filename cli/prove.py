"""``evidence prove``: fetch a Merkle proof and its checkpoint, and verify both here.

    evidence prove STREAM --seq N [--tree-size M]     record N is in the tree of M records
    evidence prove STREAM --consistency A B           the tree of B records extends A's

Nothing the API says is taken on trust: the checkpoint's signature is checked with the log
key (see :mod:`cli.tlog` for where it comes from), the proof with
``evidence_contract.merkle.verify_inclusion``/``verify_consistency`` against the signed roots,
and for an inclusion the leaf hash is recomputed from the record's own bytes. Prints JSON.

A record whose log message the API withholds (``record_b64`` null: a plain record of a stream
the projection's redaction policy covers, whose message holds the unmasked content) is proven
from the hashes served instead: the leaf is recomputed from its ``record_digest`` and
``record_sha256`` (``evidence_contract.merkle.compose_leaf_input``), must equal the served
``record_leaf_hash``, and must fold to the signed root; the output says so (``leaf_from``:
``served_hashes``, and a line on stderr). That proves the record with this seq and digest is
in the signed tree, not what its (masked) bodies say: check those against the log or an export.
An erased record's message (ciphertext only) is served, so its leaf comes from its bytes.

Exit codes: 0 verified; 1 not verified (or it could not be checked: API unreachable, no
checkpoint of that size); 2 usage error.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any

from .tlog import CliError, add_common, api_client, fail, log_key, stack_env

HELP = "verify a record's inclusion, or two checkpoints' consistency, with Merkle proofs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("stream", help="stream id")
    p.add_argument("--seq", type=int, metavar="N", help="the record to prove included")
    p.add_argument("--tree-size", type=int, metavar="M",
                   help="with --seq: the tree size (default: the latest checkpoint's)")
    p.add_argument("--consistency", type=int, nargs=2, metavar=("A", "B"),
                   help="prove the tree of B records extends the tree of A")
    p.add_argument("--log-key", metavar="FILE",
                   help="the log's verifier key (default $EVIDENCE_LOG_VERIFIER_KEY_FILE, else "
                        ".stack/env, else the API's /log/key)")
    add_common(p)


def _usage(args: argparse.Namespace) -> str | None:
    from evidence_contract import valid_stream_id

    if not valid_stream_id(args.stream):
        return f"{args.stream!r} is not a stream id"
    if (args.seq is None) == (args.consistency is None):
        return "give either --seq N [--tree-size M] or --consistency A B"
    if args.seq is not None and (args.seq < 1 or (args.tree_size is not None
                                                   and args.tree_size < args.seq)):
        return "--seq is >= 1 and --tree-size, when given, >= --seq"
    if args.consistency is not None:
        a, b = args.consistency
        if args.tree_size is not None:
            return "--tree-size goes with --seq; --consistency takes both sizes"
        if not 1 <= a <= b:
            return "--consistency A B needs 1 <= A <= B"
    return None


def _checkpoint(api, stream: str, size: int, key) -> tuple[Any, int]:
    from evidence_contract.note import NoteError
    from evidence_contract.tlog import open_stream_checkpoint

    note = api.ok(f"/streams/{stream}/checkpoint", {"tree_size": size}, usage_on_422=False)
    try:
        cp, opened, _ = open_stream_checkpoint(note.content, key, stream)
    except NoteError as e:
        raise CliError(1, f"the checkpoint of size {size} does not verify: {e}") from e
    if cp.size != size:
        raise CliError(1, f"asked for the checkpoint of size {size}, got size {cp.size}")
    return cp, len(opened.signatures) - 1


def _hashes(values: Any) -> list[bytes]:
    try:
        return [bytes.fromhex(v) for v in values]
    except (TypeError, ValueError) as e:
        raise CliError(1, f"the API's proof is malformed: {e}") from e


LEAF_FROM_BYTES, LEAF_FROM_HASHES = "record_bytes", "served_hashes"
"""``leaf_from`` in the output: the leaf hash recomputed from the log message itself, or (the
message withheld by redaction) from the record_digest and record_sha256 the API served."""


def _leaf(record: dict[str, Any], seq: int) -> tuple[bytes, str, str]:
    """The record's leaf hash, recomputed here, where it came from (``LEAF_FROM_*``) and the
    record_digest (hex) that leaf covers."""
    from evidence_contract import DecodeError
    from evidence_contract.merkle import LEAF_LABEL, compose_leaf_input, leaf_hash, leaf_input

    if record.get("record_b64"):
        try:
            li = leaf_input(base64.b64decode(record["record_b64"]))
        except (DecodeError, ValueError) as e:
            raise CliError(1, f"record {seq}'s bytes are no sealed record: {e}") from e
        digest = li[len(LEAF_LABEL):len(LEAF_LABEL) + 32]
        return leaf_hash(li), LEAF_FROM_BYTES, digest.hex()
    served = record.get("record_leaf_hash")
    if not served:
        raise CliError(1, f"the API served neither record {seq}'s log message (record_b64) "
                          f"nor its hashes (record_digest, record_sha256, record_leaf_hash)")
    try:
        leaf = leaf_hash(compose_leaf_input(bytes.fromhex(record.get("record_digest") or ""),
                                            bytes.fromhex(record.get("record_sha256") or "")))
    except (TypeError, ValueError) as e:
        raise CliError(1, f"record {seq}'s served hashes are malformed: {e}") from e
    if leaf.hex() != served:
        raise CliError(1, f"record {seq}'s served record_leaf_hash {served} is not the leaf of "
                          f"its record_digest and record_sha256 ({leaf.hex()})")
    return leaf, LEAF_FROM_HASHES, record["record_digest"]


def _inclusion(api, args, key) -> dict[str, Any]:
    from evidence_contract.merkle import verify_inclusion

    params = {"seq": args.seq, **({} if args.tree_size is None else {"tree_size": args.tree_size})}
    proof = api.ok(f"/streams/{args.stream}/proof/inclusion", params).json()
    size = proof.get("tree_size")
    if not isinstance(size, int) or proof.get("leaf_index") != args.seq - 1:
        raise CliError(1, f"the API's proof is for another leaf or size: {proof}")
    cp, cosigned = _checkpoint(api, args.stream, size, key)
    record = api.ok(f"/streams/{args.stream}/records/{args.seq}", {"include": "bytes"}).json()
    leaf, leaf_from, digest = _leaf(record, args.seq)
    if leaf.hex() != proof.get("leaf_hash"):
        raise CliError(1, f"the API's leaf hash is not the record's ({leaf.hex()})")
    verify_inclusion(args.seq - 1, size, leaf, _hashes(proof.get("hashes")), cp.root_hash)
    if leaf_from == LEAF_FROM_HASHES:
        print(f"evidence prove: record {args.seq} is redacted (its log message is withheld): "
              f"the leaf came from the served record_digest and record_sha256, so this proves "
              f"that digest is in the signed tree, not what the masked bodies say",
              file=sys.stderr)
    return {"stream": args.stream, "seq": args.seq, "tree_size": size,
            "leaf_hash": leaf.hex(), "leaf_from": leaf_from,
            "record_digest": digest, "content": record.get("content"),
            "root": cp.root_hash.hex(), "proof": proof["hashes"], "cosignatures": cosigned}


def _consistency(api, args, key) -> dict[str, Any]:
    from evidence_contract.merkle import verify_consistency

    a, b = args.consistency
    proof = api.ok(f"/streams/{args.stream}/proof/consistency", {"first": a, "second": b}).json()
    first, c1 = _checkpoint(api, args.stream, a, key)
    second, c2 = _checkpoint(api, args.stream, b, key)
    verify_consistency(a, b, _hashes(proof.get("hashes")), first.root_hash, second.root_hash)
    return {"stream": args.stream, "first": a, "second": b, "first_root": first.root_hash.hex(),
            "second_root": second.root_hash.hex(), "proof": proof["hashes"],
            "cosignatures": [c1, c2]}


def run(args: argparse.Namespace) -> int:
    from evidence_contract.merkle import ProofError

    problem = _usage(args)
    if problem:
        return fail("prove", CliError(2, problem + "; see `evidence prove --help`"))
    env = stack_env()
    try:
        api = api_client(args, env)
        key, source = log_key(args.log_key, env, api)
        out = _inclusion(api, args, key) if args.seq is not None else _consistency(api, args, key)
    except ProofError as e:
        print(json.dumps({"verified": False, "stream": args.stream, "reason": str(e)}, indent=2))
        return fail("prove", CliError(1, f"the proof does not verify: {e}"))
    except CliError as e:
        return fail("prove", e)
    from evidence_contract.note import format_vkey

    print(json.dumps({"verified": True, **out, "log_key": format_vkey(key),
                      "log_key_source": source}, indent=2))
    if source == "api":
        print("evidence prove: the log key came from the API itself; pass --log-key to check "
              "against a key you hold", file=sys.stderr)
    return 0
