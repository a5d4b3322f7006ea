"""``evidence verify``: check an export without any service (pure: file bytes in, checks out).

What VERIFY.md's shell commands check, done with the contract's code:

- ``record.avro`` is one sealed EvidenceRecord; its ``record_digest`` recomputes from its body
  and seal, and every digest of its body from the bytes it keeps (the audit's own checks,
  :class:`audit.verify.LogAuditor`); the other files are the record's bytes;
- ``checkpoint.note`` is signed by the log key (the one the caller gives, else the export's
  ``log.vkey``, and then the result says so) for the record's stream, and each witness key
  (given, else ``witnesses.vkey``) that cosigned it verifies;
- ``inclusion.json`` proves the record's leaf (recomputed from ``record.avro``) is leaf
  ``seq - 1`` of the checkpoint's tree.

An export without a checkpoint is not verified: its digests say nothing about the log.

An encrypted record's content fields are envelopes and its content digests keyed
commitments: the audit's shape check stands in for them (``content`` in the result is
``encrypted``); with ``erasure.note`` the record is ``erased``, and the receipt must be
signed by the log key and name the record's key id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from evidence_contract import DecodeError, iso_micros, split_record
from evidence_contract.chain import Head
from evidence_contract.merkle import ProofError, record_leaf_hash, verify_inclusion
from evidence_contract.note import Checkpoint, NoteError, VerifierKey, format_vkey, parse_vkey
from evidence_contract.tlog import open_stream_checkpoint

from audit.verify import LogAuditor, StreamState

__all__ = ["Verification", "verify_export"]

_COPIES = {"request.bin": "request_bytes", "response.bin": "response_bytes",
           "error.bin": "error_bytes", "input.bin": "input_bytes", "prompt.bin": "prompt_bytes"}


@dataclass
class Verification:
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(ok for _, ok, _ in self.checks)

    def add(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append((name, ok, detail))
        return ok

    def to_dict(self) -> dict[str, Any]:
        return {"verified": self.ok, **self.summary,
                "checks": [{"check": n, "ok": ok, **({"detail": d} if d else {})}
                           for n, ok, d in self.checks]}


def _keys(text: bytes | None) -> list[VerifierKey]:
    if not text:
        return []
    return [parse_vkey(t.strip()) for t in text.decode("utf-8").splitlines() if t.strip()]


def verify_export(files: Mapping[str, bytes], log_key: VerifierKey | None = None,
                  witness_keys: Sequence[VerifierKey] | None = None) -> Verification:
    """Check an export's files (name -> bytes); see the module docstring."""
    v = Verification()
    message = files.get("record.avro")
    try:
        stored_body, record = split_record(message or b"")
    except DecodeError as e:
        v.add("record.avro is a sealed EvidenceRecord", False, str(e))
        return v
    body, seal = record["body"], record["seal"]
    stream, seq = body["stream"], seal["seq"]
    v.summary.update(stream=stream, seq=seq)
    v.add("record.avro is a sealed EvidenceRecord", True)
    encryption = body.get("encryption")
    v.summary["content"] = "plain" if encryption is None else (
        "erased" if "erasure.note" in files else "encrypted")
    _check_record(v, files, message, stored_body, body, seal)
    note = files.get("checkpoint.note")
    if note is None:
        v.add("a signed checkpoint proves the record is in the log", False,
              "the export has no checkpoint.note: export it again once a checkpoint covers it")
        return v
    try:
        log_key, witness_keys = _verifier_keys(v, files, log_key, witness_keys)
    except (NoteError, ValueError, UnicodeDecodeError) as e:
        v.add("the export's verifier keys parse", False, str(e))
        return v
    v.summary["log_key"] = format_vkey(log_key)
    try:
        cp, opened, _ = open_stream_checkpoint(note, log_key, stream, witness_keys)
    except NoteError as e:
        v.add("the log key signed checkpoint.note for this stream", False, str(e))
        return v
    v.add("the log key signed checkpoint.note for this stream", True)
    log_id = (log_key.name, log_key.key_id)
    cosigners = [s.name for s in opened.verified if (s.name, s.key_id) != log_id]
    v.summary.update(tree_size=cp.size, root=cp.root_hash.hex(), cosigners=cosigners)
    missing = [k.name for k in witness_keys if k.name not in cosigners]
    v.add("every witness key cosigned the checkpoint", not missing,
          f"no valid cosignature of {', '.join(missing)}" if missing else
          f"{len(cosigners)} cosignature(s) verified")
    if not _check_inclusion(v, files, message, seq, cp):
        return v
    if "erasure.note" in files:
        _check_receipt(v, files["erasure.note"], log_key,
                       None if encryption is None else encryption["key_id"])
    return v


def _check_record(v: Verification, files: Mapping[str, bytes], message: bytes,
                  stored_body: bytes, body: dict[str, Any], seal: dict[str, Any]) -> None:
    """The record's own checks: its digests recompute and the other files are its bytes."""
    stream, seq = body["stream"], seal["seq"]
    # The audit's checks, from a head just before this record (the chain below it is the
    # previous records' exports' business): record_digest and every body digest recompute.
    auditor = LogAuditor()
    auditor.streams[stream] = StreamState(Head(stream, seq - 1, bytes(seal["prev_digest"])))
    auditor.add(0, 0, message)
    v.add("record_digest and every digest of the body recompute", not auditor.findings,
          "; ".join(f"{f.kind}: {f.detail}" for f in auditor.findings))
    if "body.avro" in files:
        v.add("body.avro is the record's body", files["body.avro"] == stored_body)
    for name, fieldname in _COPIES.items():
        if name in files:
            v.add(f"{name} is the record's {fieldname}",
                  body[fieldname] is not None and files[name] == bytes(body[fieldname]))


def _verifier_keys(v: Verification, files: Mapping[str, bytes], log_key: VerifierKey | None,
                   witness_keys: Sequence[VerifierKey] | None
                   ) -> tuple[VerifierKey, Sequence[VerifierKey]]:
    """The keys given, else the export's own copies (the summary says which)."""
    if log_key is None:
        (log_key,) = _keys(files.get("log.vkey"))
        v.summary["log_key_source"] = "export"
    else:
        v.summary["log_key_source"] = "given"
    if witness_keys is None:
        witness_keys = _keys(files.get("witnesses.vkey"))
        v.summary["witness_keys_source"] = "export"
    return log_key, witness_keys


def _check_inclusion(v: Verification, files: Mapping[str, bytes], message: bytes, seq: int,
                     cp: Checkpoint) -> bool:
    """Check that inclusion.json proves the record is leaf ``seq - 1`` of ``cp``'s tree;
    False when it is no inclusion proof at all."""
    try:
        proof = json.loads(files["inclusion.json"])
        hashes = [bytes.fromhex(h) for h in proof["hashes"]]
        size, index = int(proof["tree_size"]), int(proof["leaf_index"])
    except (KeyError, ValueError, TypeError) as e:
        v.add("inclusion.json is an inclusion proof", False, f"{type(e).__name__}: {e}")
        return False
    leaf = record_leaf_hash(message)
    ok = v.add("inclusion.json is of this record, in this checkpoint's tree",
               (index, size) == (seq - 1, cp.size),
               f"leaf {index} of a tree of {size}, the record is leaf {seq - 1} and the "
               f"checkpoint's tree has {cp.size}")
    if ok:
        try:
            verify_inclusion(index, size, leaf, hashes, cp.root_hash)
            v.add("the record's leaf folds with the proof to the checkpoint's root", True)
        except ProofError as e:
            v.add("the record's leaf folds with the proof to the checkpoint's root", False,
                  str(e))
    v.summary["leaf_hash"] = leaf.hex()
    return True


def _check_receipt(v: Verification, note: bytes, log_key: VerifierKey,
                   key_id: str | None) -> None:
    from evidence_contract.erasure import open_receipt
    from evidence_contract.errors import EvidenceError

    name = "the log key signed erasure.note, a receipt naming the record's key"
    try:
        req = open_receipt(note, log_key)
    except (EvidenceError, UnicodeDecodeError, ValueError) as e:
        v.add(name, False, str(e))
        return
    v.summary.update(erased_at=req.erased_at, erasure_request_id=req.request_id)
    v.add(name, key_id is not None and key_id in req.key_ids,
          f"request {req.request_id}, erased at {iso_micros(req.erased_at)}"
          + ("" if key_id is not None and key_id in req.key_ids else
             f": it does not name the record's key {key_id}"))
