"""A record's verification, step by step, as the verifying client runs it (pure).

The pages are served by the API, and the API's read model is untrusted infrastructure; so a
record page does not just say "verified": it shows each check a verifying reader
(``evidence_client``'s verified reads, ``evidence_contract.bundle.verify_bundle``) runs on
the record's evidence bundle, each one green only when it holds, red with the reason when it
does not, grey when it cannot apply (a record no checkpoint covers yet, no witness key
pinned, an encrypted record's keyed digests):

1. *The page's fields are the sealed record's*: what the read model's row says (and the
   page shows) agrees with the record the log sealed (``api.evidence.check_row``, and each
   field shown compared with the sealed body): a row altered in SQL fails here, even when
   the API could serve the log's copy instead;
2. *Record bytes → leaf hash*: the log message decodes to a sealed record of this stream and
   seq, its ``record_digest`` recomputes over its body, and it hashes to the leaf;
3. *Checkpoint signed by the pinned log key* (``EVIDENCE_LOG_VERIFIER_KEY_FILE``): the
   stream's checkpoint verifies and names this stream;
4. *Inclusion proof*: the leaf is in the checkpoint's tree (RFC 9162);
5. *Witness cosignatures*: at least one witness key the API pins cosigned that checkpoint
   (grey, not red, until one has: witnesses cosign a checkpoint seconds after it is signed);
6. *Content digests*: ``content_key`` recomputes from the request bytes and
   ``response_digest`` from the response bytes (a plain record);
7. *Deployment log*: the checkpoint is an entry of the deployment tree, in a deployment
   checkpoint signed by the log key.

Every check is a function of ``evidence_contract`` (codec, digests, merkle, note, tlog); the
overall verdict is ``verify_bundle``'s itself, run on the same bundle: when it refuses what
the steps passed, the verdict says so and is red.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from typing import Any, Iterable

from evidence_contract import DecodeError, split_record
from evidence_contract.bundle import (
    Trust, Uncovered, Unverified, parse_bundle, verify_bundle,
)
from evidence_contract.digests import content_key as _content_key
from evidence_contract.digests import record_digest as _record_digest
from evidence_contract.digests import response_digest as _response_digest
from evidence_contract.merkle import ProofError, compose_leaf_input, leaf_hash, verify_inclusion
from evidence_contract.note import Checkpoint, NoteError, VerifierKey, parse_note
from evidence_contract.tlog import open_stream_checkpoint

__all__ = ["CheckpointView", "PASS", "FAIL", "SKIP", "Step", "Verification", "checkpoint_view",
           "row_disagreements", "unavailable", "verify_steps"]

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass(frozen=True)
class Step:
    """One check: its title, ``PASS``, ``FAIL`` or ``SKIP``, and what was found."""

    title: str
    status: str
    detail: str


@dataclass(frozen=True)
class Verification:
    steps: tuple[Step, ...]
    verdict: Step

    @property
    def ok(self) -> bool:
        return self.verdict.status == PASS


@dataclass(frozen=True)
class CheckpointView:
    """A stream checkpoint as the pages show it: ``signed`` when the pinned log key's
    signature verifies (``problem`` says why not), ``witnesses`` the cosignatures it carries:
    (name, key id hex, verified by a pinned witness key)."""

    size: int
    root: str
    signed: bool
    problem: str | None
    witnesses: tuple[tuple[str, str, bool], ...]

    @property
    def witnessed(self) -> tuple[str, ...]:
        return tuple(name for name, _, ok in self.witnesses if ok)


def checkpoint_view(stream: str, note: bytes, log_key: VerifierKey | None,
                    witnesses: Iterable[VerifierKey], size: int, root: bytes) -> CheckpointView:
    """What the checkpoint ``note`` (with its cosignature lines) proves to this API."""
    witnesses = tuple(witnesses)
    try:
        sigs = parse_note(note).signatures
    except NoteError as e:
        return CheckpointView(size, root.hex(), False, f"not a signed note: {e}", ())
    log_id = None if log_key is None else (log_key.name, log_key.key_id)
    verified: set[tuple[str, int]] = set()
    problem = None
    if log_key is None:
        problem = "no log key is pinned (EVIDENCE_LOG_VERIFIER_KEY_FILE)"
    else:
        try:
            _, opened, _ = open_stream_checkpoint(note, log_key, stream, witnesses)
            verified = {(s.name, s.key_id) for s in opened.verified}
        except NoteError as e:
            problem = str(e)
    shown = tuple((s.name, f"{s.key_id:08x}", (s.name, s.key_id) in verified)
                  for s in sigs if (s.name, s.key_id) != log_id)
    return CheckpointView(size, root.hex(), problem is None, problem, shown)


def _hex(value: Any) -> str | None:
    return None if value is None else bytes(value).hex()


def _b64(value: Any) -> str | None:
    return None if value is None else base64.b64encode(bytes(value)).decode("ascii")


def row_disagreements(shown: dict[str, Any], decoded: dict[str, Any], *,
                      bodies: bool) -> list[str]:
    """The fields of ``shown`` (the API's ``record_dict`` of the projected row) that are not
    the sealed record's (``decoded``: ``split_record``'s); the bodies too when ``bodies``
    (a plain record of a stream that is not redacted)."""
    body, seal = decoded["body"], decoded["seal"]
    sealed: dict[str, Any] = {
        "stream": body["stream"], "seq": seal["seq"], "event_id": body["event_id"],
        "occurred_at_us": seal["occurred_at"], "outcome": body["outcome"],
        "content_key": _hex(body["content_key"]), "prev_digest": _hex(seal["prev_digest"]),
        "record_digest": _hex(seal["record_digest"]),
        "response_digest": _hex(body["response_digest"]),
        "output_digest": _hex(body["output_digest"]), "model_id": body["model_id"],
        "response_model": body["response_model"], "fingerprint": body["fingerprint"],
        "http_status": body["http_status"],
        "response_content_type": body["response_content_type"],
    }
    wrong = [name for name, value in sealed.items() if shown.get(name) != value]
    provider = body["provider"]
    if (shown.get("provider") or {}).get("name") != provider["name"]:
        wrong.append("provider")
    if bodies and "request_b64" in shown:
        for name in ("request", "response", "error"):
            if shown.get(f"{name}_b64") != _b64(body[f"{name}_bytes"]):
                wrong.append(f"{name} body")
    return wrong


def _record_step(record: bytes | None, leaf: bytes, stream: str, seq: int
                 ) -> tuple[Step, dict[str, Any] | None]:
    title = "Record bytes → leaf hash"
    if record is None:
        return Step(title, SKIP, "the record's bytes are withheld (a redacted stream): only "
                                 "its leaf hash is proved"), None
    try:
        body_avro, decoded = split_record(record)
    except DecodeError as e:
        return Step(title, FAIL, f"the record bytes are no sealed record: {e}"), None
    body, seal = decoded["body"], decoded["seal"]
    if body["stream"] != stream or seal["seq"] != seq:
        return Step(title, FAIL, f"the record bytes are {body['stream']} #{seal['seq']}, not "
                                 f"{stream} #{seq}"), None
    sealed = bytes(seal["record_digest"])
    if _record_digest(seal["prev_digest"], seal["seq"], seal["occurred_at"], body_avro) \
            != sealed:
        return Step(title, FAIL, "record_digest does not recompute over the record's body"), \
            decoded
    got = leaf_hash(compose_leaf_input(sealed, hashlib.sha256(record).digest()))
    if got != leaf:
        return Step(title, FAIL, f"the record bytes hash to leaf {got.hex()}, not the "
                                 f"{leaf.hex()} the bundle names"), decoded
    return Step(title, PASS, f"{len(record)} bytes; record_digest {sealed.hex()} recomputes; "
                             f"leaf hash {got.hex()}"), decoded


def _digest_step(decoded: dict[str, Any] | None, erased: bool) -> Step:
    title = "Content digests"
    if erased:
        return Step(title, SKIP, "the content was erased: only the ciphertext's proofs hold")
    if decoded is None:
        return Step(title, SKIP, "no record bytes to recompute them from")
    body = decoded["body"]
    if body.get("encryption") is not None:
        return Step(title, SKIP, "an encrypted record's digests are keyed commitments: the "
                                 "holder of its key checks them")
    done = []
    if body["request_bytes"] is not None:
        if _content_key(body["request_bytes"]) != bytes(body["content_key"]):
            return Step(title, FAIL, "content_key does not recompute from the request bytes")
        done.append("content_key from the request bytes")
    if body["response_bytes"] is not None and body["response_digest"] is not None:
        if _response_digest(body["response_bytes"]) != bytes(body["response_digest"]):
            return Step(title, FAIL, "response_digest does not recompute from the response "
                                     "bytes")
        done.append("response_digest from the response bytes")
    if not done:
        return Step(title, SKIP, "the record keeps neither its request nor its response bytes")
    return Step(title, PASS, "recomputed: " + "; ".join(done))


def _checkpoint_step(doc: dict[str, Any], trust: Trust | None, stream: str, seq: int
                     ) -> tuple[Step, Checkpoint | None, tuple[str, ...]]:
    title = "Checkpoint signed by the pinned log key"
    if doc.get("checkpoint") is None:
        return Step(title, SKIP, f"stream {stream} has no signed checkpoint yet (the writer "
                                 f"signs one every few seconds)"), None, ()
    if trust is None:
        return Step(title, FAIL, "no log key is pinned (EVIDENCE_LOG_VERIFIER_KEY_FILE), so no "
                                 "signature can be checked"), None, ()
    try:
        cp, note, _ = open_stream_checkpoint(doc["checkpoint"], trust.log_key, stream,
                                             trust.witnesses)
    except NoteError as e:
        return Step(title, FAIL, f"the checkpoint does not verify with the log key "
                                 f"{trust.log_key.name}: {e}"), None, ()
    ident = {(k.name, k.key_id) for k in trust.witnesses}
    cosigned = tuple(s.name for s in note.verified if (s.name, s.key_id) in ident)
    return Step(title, PASS, f"{cp.origin} at size {cp.size}, root {cp.root_hash.hex()}, "
                             f"signed by {trust.log_key.name}"), cp, cosigned


def _inclusion_step(doc: dict[str, Any], cp: Checkpoint | None, leaf: bytes, seq: int
                    ) -> Step:
    title = "Inclusion proof"
    if cp is None:
        return Step(title, SKIP, "no verified checkpoint to prove it in")
    inclusion = doc.get("inclusion")
    if seq > cp.size or inclusion is None:
        return Step(title, SKIP, f"#{seq} is not in a signed checkpoint yet (the latest is of "
                                 f"size {cp.size}); reload in a few seconds")
    try:
        if inclusion.get("tree_size") != cp.size:
            raise ProofError(f"the proof is for size {inclusion.get('tree_size')}, the "
                             f"checkpoint is of size {cp.size}")
        hashes = [bytes.fromhex(h) for h in inclusion.get("hashes", [])]
        verify_inclusion(seq - 1, cp.size, leaf, hashes, cp.root_hash)
    except (ProofError, ValueError, TypeError) as e:
        return Step(title, FAIL, f"leaf {seq - 1} is not in the signed tree of size "
                                 f"{cp.size}: {e}")
    return Step(title, PASS, f"leaf {seq - 1} is in the tree of size {cp.size} "
                             f"({len(hashes)} hashes)")


def _witness_step(trust: Trust | None, cp: Checkpoint | None, cosigned: tuple[str, ...]
                  ) -> Step:
    title = "Witness cosignatures"
    if trust is None or cp is None:
        return Step(title, SKIP, "no verified checkpoint")
    if not trust.witnesses:
        return Step(title, SKIP, "no witness key is pinned (EVIDENCE_WITNESS_KEYS): the "
                                 "checkpoint's cosignatures are not checked")
    if not cosigned:  # not a wrong answer: witnesses cosign a checkpoint seconds after it
        return Step(title, SKIP, f"none of the {len(trust.witnesses)} pinned witness key(s) "
                                 f"has cosigned the checkpoint of size {cp.size} yet")
    return Step(title, PASS, "cosigned by " + ", ".join(cosigned))


def _log_step(doc: dict[str, Any], trust: Trust | None, verdict_ok: bool) -> Step:
    title = "Deployment log"
    if trust is None or not verdict_ok:
        return Step(title, SKIP, "the record's own proofs did not verify")
    if doc.get("log") is None:
        return Step(title, SKIP, doc.get("log_reason") or "no deployment checkpoint covers "
                                                          "the record yet")
    try:
        covered = verify_bundle(parse_bundle(doc), Trust(
            trust.log_key, trust.witnesses, 0, trust.witnesses, 0)).log
    except Unverified as e:
        return Step(title, FAIL, str(e))
    assert covered is not None
    who = f", cosigned by {', '.join(covered.witnesses)}" if covered.witnesses else ""
    return Step(title, PASS, f"entry {covered.entry_index} of the deployment tree of size "
                             f"{covered.checkpoint.size}{who}")


def verify_steps(doc: dict[str, Any], trust: Trust | None, shown: dict[str, Any],
                 row_problem: str | None, *, bodies: bool, erased: bool) -> Verification:
    """The steps of the module docstring over a bundle ``doc`` (the JSON the bundle route
    answers), the record's fields as the page shows them (``shown``) and the API's check of
    its projected row (``row_problem``: ``check_row``'s)."""
    stream, seq = doc["stream"], doc["seq"]
    try:
        record = None if doc.get("record_b64") is None else \
            base64.b64decode(doc["record_b64"], validate=True)
        leaf = bytes.fromhex(doc["leaf_hash"])
    except (binascii.Error, ValueError):
        record, leaf = b"", b""
    record_step, decoded = _record_step(record, leaf, stream, seq)
    title = "The page's fields are the sealed record's"
    if row_problem is not None:
        row_step = Step(title, FAIL, f"the read model's row was altered: {row_problem}")
    elif decoded is None:
        row_step = Step(title, SKIP if record is None else FAIL,
                        "no sealed record to compare the row with")
    else:
        wrong = row_disagreements(shown, decoded, bodies=bodies)
        row_step = (Step(title, FAIL, "the read model's row differs from the sealed record "
                                      "in: " + ", ".join(wrong)) if wrong
                    else Step(title, PASS, "every field shown is the sealed record's"))
    cp_step, cp, cosigned = _checkpoint_step(doc, trust, stream, seq)
    steps = [row_step, record_step, cp_step, _inclusion_step(doc, cp, leaf, seq),
             _witness_step(trust, cp, cosigned), _digest_step(decoded, erased)]
    verdict = _verdict(doc, trust, steps)
    steps.append(_log_step(doc, trust, verdict.status == PASS))
    return Verification(tuple(steps), verdict)


def _verdict(doc: dict[str, Any], trust: Trust | None, steps: list[Step]) -> Step:
    title = "Verdict"
    failed = [s for s in steps if s.status == FAIL]
    if failed:
        return Step(title, FAIL, f"NOT VERIFIED: {failed[0].title.lower()}: "
                                 f"{failed[0].detail}")
    if trust is None:
        return Step(title, FAIL, "NOT VERIFIED: no log key is pinned")
    try:
        done = verify_bundle(parse_bundle(doc), Trust(trust.log_key, trust.witnesses, 0))
    except Unverified as e:
        status = SKIP if isinstance(e, Uncovered) else FAIL
        return Step(title, status, ("NOT YET VERIFIABLE: " if status == SKIP
                                    else "NOT VERIFIED: ") + str(e))
    who = (f", cosigned by {', '.join(done.witnesses)}" if done.witnesses
           else ", not yet cosigned by a pinned witness" if trust.witnesses else "")
    return Step(title, PASS, f"VERIFIED: {done.stream} #{done.seq} is in the checkpoint of "
                             f"size {done.checkpoint.size} signed by {trust.log_key.name}{who}")


def unavailable(reason: str, *, tampered: bool) -> Verification:
    """No bundle to verify: the row failed its check and the log could not be read
    (``tampered``: red), or the projection is catching up (grey)."""
    status = FAIL if tampered else SKIP
    step = Step("Evidence bundle", status, reason)
    return Verification((step,), Step("Verdict", status, ("NOT VERIFIED: " if tampered else
                                                          "NOT YET VERIFIABLE: ") + reason))
