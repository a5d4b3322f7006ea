"""One capture, pure: validate intake bytes, seal a capture after its stream head, encode the
head the writer keeps; and the self-check that holds the compiled seal path to these.

The single-capture rules of the writer's core (:mod:`writer.core`, which re-exports every
name here and keeps the per-partition state in :class:`writer.core.Sealer`). They live apart
from the Sealer so that :mod:`writer.native`, which the Sealer asks for its compiled kernel,
can check a kernel against them (:func:`self_check`) without importing the Sealer's module.

- :func:`validate` — intake bytes + key → :class:`Capture` or :class:`Rejection`.
- :func:`seal_capture` — capture + :class:`Head` → (sealed EvidenceRecord bytes, new head).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any

from evidence_contract import (
    HEADER_SIZE,
    SUPPORTED_SCHEMA_VERSIONS,
    TRUNCATED_ERROR_BYTES,
    DecodeError,
    TruncatedError,
    canonical_body_bytes,
    chunk_digest,
    content_key,
    decode,
    encode,
    encode_sealed,
    fingerprint,
    input_digest,
    prompt_digest,
    read_body,
    read_canonical_body,
    record_digest,
    record_fingerprint_for,
    response_digest,
    schema_name_for,
    valid_event_id,
    valid_seed,
    valid_stream_id,
    wrong_size_digest,
)
from evidence_contract.codec import MARKER
from evidence_contract.envelope import encrypted_body_problem
from evidence_contract.telemetry import is_mapped, telemetry_problem, trace_problem
from evidence_contract.chain import Head, Link, advance
from evidence_contract.merkle import CompactRange
from evidence_contract.vectors import committed_event, traced_event
from writer.checkpoints import TreeState, record_leaf
from writer.reasons import Reason

__all__ = [
    "HEADROOM_BYTES",
    "Capture",
    "Head",
    "Rejection",
    "decode_head",
    "decode_head_state",
    "encode_head",
    "reject",
    "seal_capture",
    "self_check",
    "validate",
]

HEADROOM_BYTES = 64 * 1024
"""An intake value may use at most max_message_bytes minus this, so the seal always fits."""

_CAPTURE_FP = fingerprint("CaptureEvent")


@dataclass(frozen=True, slots=True)
class Capture:
    """A valid capture: its identity and the canonical Avro binary of its body."""

    stream: str
    event_id: str
    body: bytes
    reencoded: bool = False
    """True when the intake bytes were not canonical Avro and ``body`` is a re-encoding."""
    record_fp: bytes | None = None
    """The EvidenceRecord fingerprint to seal under when the capture is of an earlier
    contract (2.0: sealed as a 2.0 record, never upgraded); None for the current one."""


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why an intake message cannot be sealed; it goes to ``<prefix>.rejected`` verbatim."""

    reason: Reason
    text: str


def reject(reason: Reason, text: str) -> Rejection:
    """The :class:`Rejection` of a capture for ``reason``, described by ``text``."""
    return Rejection(reason, text)


def validate(value: bytes | None, key: bytes | None, max_message_bytes: int) -> Capture | Rejection:
    """Check one intake message; return the Capture to seal or the Rejection to park.

    The checks run cheapest first; each failure has its own reason. The header is
    classified by hand (marker, then fingerprint) because ``schemas.decode`` raises one
    error type for all of them.
    """
    if not value:
        return reject(Reason.NOT_AVRO, "message has no value")
    limit = max_message_bytes - HEADROOM_BYTES
    if len(value) > limit:
        return reject(Reason.OVERSIZED, f"value is {len(value)} bytes, limit is {limit}")
    if value[0] != MARKER[0]:
        return reject(Reason.NOT_AVRO, f"first byte {value[:1].hex()} is not an Avro single-object marker")
    if len(value) < 2 or value[1] != MARKER[1]:
        if len(value) < 2:
            return reject(Reason.TRUNCATED, "message ends inside the single-object marker")
        return reject(Reason.BAD_MARKER, f"marker {value[:2].hex()} != c301")
    if len(value) < HEADER_SIZE:
        return reject(Reason.TRUNCATED, f"message ends inside the header ({len(value)} bytes)")
    fp = value[2:HEADER_SIZE]
    name = schema_name_for(fp)
    if name is None:
        return reject(Reason.UNKNOWN_FINGERPRINT, f"unknown schema fingerprint {fp.hex()}")
    if name != "CaptureEvent":
        return reject(Reason.WRONG_SCHEMA, f"a {name}, not a CaptureEvent")
    # Fast path (nearly every capture): one strict pass that decodes the body and proves its
    # bytes canonical, so they are sealed as they came, with no re-encoding to compare.
    fast = read_canonical_body(value)
    if fast is not None and fast[1] == len(value):
        return _check_semantics(fast[0], value, key, canonical=True, fp=fp)
    # Slow path: anything the strict reader would not vouch for. fastavro says whether it is
    # malformed, truncated or merely not canonical (then it is re-encoded and repaired).
    try:
        body, end = read_body(value)
    except TruncatedError as e:
        return reject(Reason.TRUNCATED, str(e))
    except DecodeError as e:
        return reject(Reason.MALFORMED, str(e))
    if end != len(value):
        return reject(Reason.MALFORMED, f"{len(value) - end} trailing bytes after the body")
    return _check_semantics(body, value, key, canonical=False, fp=fp)


def _check_semantics(body: dict[str, Any], value: bytes, key: bytes | None,
                     canonical: bool, fp: bytes) -> Capture | Rejection:
    """The rules of record contract 2.1 that Avro cannot express, in the order of ``Reason``.

    Each is also written in the doc of the ``CaptureEvent.avsc`` field it concerns, so a
    producer in another language can follow them from the schema alone. A 2.0 capture
    (``fp`` of ``avro/history/``) has no ``encryption`` and the same rules otherwise.
    """
    version = body["schema_version"]
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        return reject(Reason.UNSUPPORTED_VERSION, f"schema_version {version!r} is not supported")
    stream = body["stream"]
    if not valid_stream_id(stream):
        return reject(Reason.BAD_STREAM_ID, f"stream {stream!r} is not a valid stream id")
    if key is None or key != stream.encode("utf-8"):
        return reject(Reason.KEY_MISMATCH, f"message key {key!r} is not the stream {stream!r}")
    event_id = body["event_id"]
    if not valid_event_id(event_id):
        return reject(Reason.BAD_EVENT_ID, f"event_id {event_id!r} is not a canonical UUIDv7")
    misfit = wrong_size_digest("CaptureEvent", body)
    if misfit:
        return reject(Reason.BAD_DIGEST, misfit)
    bad_seed = _bad_seed(body["replay"])
    if bad_seed:
        return reject(Reason.BAD_SEED, bad_seed)
    if body["capture"]["truncated"]:
        kept = _kept_despite_truncation(body)
        if kept:
            return reject(Reason.BAD_TRUNCATION, kept)
    rejection = _check_trace(body, version) or _check_telemetry(body, version)
    if rejection is not None:
        return rejection
    missing = _missing_fields(body)
    if missing:
        return reject(Reason.MISSING_FIELD, missing)
    rejection = _content_problem(body, version)
    if rejection is not None:
        return rejection
    return _sealable(body, value, canonical, fp)


def _bad_seed(replay: dict[str, Any]) -> str:
    """Why ``replay`` does not hold together (a seed that is no integer as decimal text, or
    ``deterministic`` saying otherwise than whether there is a seed); "" when it does."""
    seed = replay["seed"]
    if seed is not None and not valid_seed(seed):
        return f"replay.seed {seed[:40]!r} is not an integer as decimal text"
    if replay["deterministic"] != (seed is not None):
        return (f"replay.deterministic is {replay['deterministic']} "
                f"but replay.seed is {'null' if seed is None else 'set'}")
    return ""


def _content_problem(body: dict[str, Any], version: str) -> Rejection | None:
    """Whether the content fields hold what the capture commits to: the shape of sealed
    content, else the lengths and digests of the plain bytes."""
    if body.get("encryption") is not None:
        # Sealed content: the keyed commitments cannot be recomputed without the subject's
        # data key, which the writer never holds. What it can check is the shape: scheme,
        # key id, every content field an envelope of that key, the plaintext lengths.
        problem = encrypted_body_problem(body)
        if not problem and version not in ("2.1", "2.2"):
            problem = (f"schema_version {version!r} has no encryption; an encrypted capture "
                       f"is 2.1 or later")
        return reject(Reason.BAD_ENCRYPTION, problem) if problem else None
    wrong = _wrong_length(body)
    if wrong:
        return reject(Reason.LENGTH_MISMATCH, wrong)
    mismatch = _digest_mismatch(body)
    return reject(Reason.DIGEST_MISMATCH, mismatch) if mismatch else None


def _sealable(body: dict[str, Any], value: bytes, canonical: bool, fp: bytes) -> Capture:
    """The valid capture with the body bytes to seal.

    The sealed body must be the canonical Avro binary (record_digest covers it and any other
    implementation must recompute the same bytes). The fast path has proved that already
    (``canonical``); otherwise fastavro (which writes canonical Avro) re-encodes, which both
    checks and, if needed, repairs the intake bytes."""
    stream, event_id = body["stream"], body["event_id"]
    intake_body = value[HEADER_SIZE:]
    record_fp = None if fp == _CAPTURE_FP else record_fingerprint_for(fp)
    if canonical:
        return Capture(stream, event_id, intake_body, record_fp=record_fp)
    reencoded = canonical_body_bytes(body, fp)
    if reencoded == intake_body:
        return Capture(stream, event_id, intake_body, record_fp=record_fp)
    return Capture(stream, event_id, reencoded, reencoded=True, record_fp=record_fp)


def _kept_despite_truncation(body: dict[str, Any]) -> str:
    for name in ("request_bytes", "response_bytes", "input_bytes", "prompt_bytes"):
        if body[name] is not None:
            return f"capture.truncated is true but {name} is kept"
    for i, chunk in enumerate(body["retrieval"]):
        if chunk["chunk_bytes"] is not None:
            return f"capture.truncated is true but retrieval[{i}].chunk_bytes is kept"
    error = body["error_bytes"]
    if error is not None and len(error) > TRUNCATED_ERROR_BYTES:
        return (f"capture.truncated is true but error_bytes holds {len(error)} bytes, more "
                f"than its first {TRUNCATED_ERROR_BYTES}")
    return ""


def _missing_fields(body: dict[str, Any]) -> str:
    truncated = body["capture"]["truncated"]
    # A capture mapped from telemetry has no response body, also when COMMITTED.
    if body["outcome"] == "COMMITTED" and not is_mapped(body):
        needed = ("response_digest", "response_length") if truncated else (
            "response_bytes", "response_digest", "response_length")
        for name in needed:
            if body[name] is None:
                return (f"missing field {name}: outcome COMMITTED needs response_digest, "
                        f"response_length and, unless capture.truncated, response_bytes")
    if body["response_bytes"] is not None and body["response_digest"] is None:
        return "missing field response_digest: response_bytes are present"
    if (body["response_length"] is None) != (body["response_digest"] is None):
        absent = "response_length" if body["response_length"] is None else "response_digest"
        return (f"missing field {absent}: response_length and response_digest are both set "
                f"(there is a response body) or both null")
    if (body["capture"]["request_policy"] == "VALUE" and body["request_bytes"] is None
            and not truncated):
        return "missing field request_bytes: request_policy VALUE keeps the request bytes"
    for kept, digest in (("input_bytes", "input_digest"), ("prompt_bytes", "prompt_digest")):
        if body[kept] is not None and body[digest] is None:
            return f"missing field {digest}: {kept} are present"
    return ""


def _check_trace(body: dict[str, Any], version: str) -> Rejection | None:
    """BAD_TRACE: a trace context (record contract 2.2) must be one a span can have, the W3C
    ids of a 2.2 capture (:func:`evidence_contract.telemetry.trace_problem`)."""
    problem = trace_problem(body)
    return reject(Reason.BAD_TRACE, problem) if problem else None


def _check_telemetry(body: dict[str, Any], version: str) -> Rejection | None:
    """BAD_TELEMETRY: a capture mapped from telemetry (record contract 2.2) is labelled as
    such and never passes for wire bytes: a trace, no request or response bytes, content_key
    the span's digest, no encryption (:func:`evidence_contract.telemetry.telemetry_problem`).
    Its digest sizes were checked with every other digest (BAD_DIGEST)."""
    problem = telemetry_problem(body)
    return reject(Reason.BAD_TELEMETRY, problem) if problem else None


def _wrong_length(body: dict[str, Any]) -> str:
    for name, data in (("request_length", body["request_bytes"]),
                       ("response_length", body["response_bytes"])):
        n = body[name]
        if n is not None and n < 0:
            return f"{name} is {n}, a length cannot be negative"
        if data is not None and n != len(data):
            covered = name.replace("_length", "_bytes")
            return f"{name} is {n} but {covered} are {len(data)} bytes"
    return ""


def _digest_mismatch(body: dict[str, Any]) -> str:
    # compare_digest: the digests are public, but constant time costs nothing here.
    request = body["request_bytes"]
    if request is not None and not hmac.compare_digest(content_key(request), body["content_key"]):
        return "content_key does not match request_bytes"
    response = body["response_bytes"]
    if response is not None and not hmac.compare_digest(response_digest(response),
                                                        body["response_digest"]):
        return "response_digest does not match response_bytes"
    for kept, digest, fn in (("input_bytes", "input_digest", input_digest),
                             ("prompt_bytes", "prompt_digest", prompt_digest)):
        if body[kept] is not None and not hmac.compare_digest(fn(body[kept]), body[digest]):
            return f"{digest} does not match {kept}"
    for i, chunk in enumerate(body["retrieval"]):
        data = chunk["chunk_bytes"]
        if data is not None and not hmac.compare_digest(chunk_digest(data), chunk["chunk_digest"]):
            return f"retrieval[{i}].chunk_digest does not match its chunk_bytes"
    return ""


def encode_head(head: Head, log_partition: int, tree: TreeState | None = None) -> bytes:
    """Return the WriterHead message for ``head`` and the stream's persisted ``tree`` (the
    empty one by default); the log offset is unknown inside a transaction."""
    tree = tree or TreeState()
    return encode("WriterHead", {
        "stream": head.stream, "seq": head.seq, "record_digest": head.digest,
        "occurred_at": head.occurred_at, "event_id": head.event_id,
        "log_partition": log_partition, "log_offset": None,
        "tree_size": tree.tree_size, "tree_nodes": list(tree.nodes),
        "checkpoint_size": tree.checkpoint_size,
    })


def decode_head_state(data: bytes) -> tuple[Head, TreeState]:
    """Return the Head and TreeState in a WriterHead message; ``DecodeError`` for anything
    else, including a tree that cannot be the compact range it claims to be."""
    name, rec = decode(data)
    if name != "WriterHead":
        raise DecodeError(f"expected a WriterHead, got a {name}")
    head = Head(rec["stream"], rec["seq"], rec["record_digest"], rec["occurred_at"],
                rec["event_id"])
    tree = TreeState(rec["tree_size"], tuple(bytes(n) for n in rec["tree_nodes"]),
                     rec["checkpoint_size"])
    problem = tree.problem(head.seq)
    if problem:
        raise DecodeError(f"WriterHead of {head.stream!r}: {problem}")
    return head, tree


def decode_head(data: bytes) -> Head:
    """Return the Head in a WriterHead message; raises ``DecodeError`` for anything else."""
    return decode_head_state(data)[0]


def seal_capture(capture: Capture, head: Head, now_micros: int, writer: dict[str, str],
                 intake_partition: int, intake_offset: int) -> tuple[bytes, Head]:
    """Seal ``capture`` after ``head``: return (EvidenceRecord bytes, the stream's new head).

    ``occurred_at`` is the writer clock, but never earlier than the previous record's, so
    a stream's records are time-ordered even if the clock steps back.
    """
    if capture.stream != head.stream:
        raise ValueError(f"head is for stream {head.stream!r}, capture for {capture.stream!r}")
    seq = head.seq + 1
    occurred_at = max(now_micros, head.occurred_at)
    digest = record_digest(head.digest, seq, occurred_at, capture.body)
    record = encode_sealed(capture.body, {
        "seq": seq, "occurred_at": occurred_at, "prev_digest": head.digest,
        "record_digest": digest, "writer": writer,
        "intake_partition": intake_partition, "intake_offset": intake_offset,
    }, capture.record_fp)
    # The same chain step the projector and the auditor take over this record.
    new_head, finding = advance(head, Link(capture.stream, seq, head.digest, digest, occurred_at,
                                           capture.event_id))
    if finding is not None:  # cannot happen: seq = head + 1 and prev = head's digest
        raise AssertionError(f"the writer's own record does not chain: {finding.detail}")
    return record, new_head


def self_check(mod: Any) -> str:
    """Why the compiled seal path ``mod`` (``evidence_seal_native``) disagrees with this one on
    the contract's committed vectors (with and without a trace), or "" when it seals them
    byte for byte the same."""
    writer = {"writer_id": "self-check", "transactional_id": "self-check", "version": "0"}
    kernel = mod.Kernel(writer["writer_id"], writer["transactional_id"], writer["version"])
    for name, event in (("committed", committed_event()), ("traced", traced_event())):
        value, key = encode("CaptureEvent", event), event["stream"].encode("utf-8")
        capture = validate(value, key, 1 << 24)
        if not isinstance(capture, Capture):  # pragma: no cover - the vectors are valid
            return f"the {name} vector does not validate: {capture}"
        head = Head.genesis(capture.stream)
        record, new_head = seal_capture(capture, head, 1, writer, 0, 7)
        got = kernel.check(value, key, 1 << 24, 0, 0)
        if got is None or tuple(got[:2]) != (capture.stream, capture.event_id):
            return f"it does not accept the contract's {name} vector"
        native = kernel.seal(value, got[2], head.digest, 1, 1, 0, 7)
        if (native[0], native[1], native[2]) != (record, new_head.digest,
                                                 record_leaf(record, new_head.digest)):
            return f"it seals the contract's {name} vector differently"
    merge = getattr(kernel, "append_leaf", None)
    if merge is None:
        return "it has no Merkle append (a build older than this writer)"
    pure, compiled = CompactRange(), CompactRange()
    for i in range(40):  # every merge depth up to five, and back
        leaf = hashlib.sha256(i.to_bytes(4, "big")).digest()
        pure.append(leaf)
        compiled.append_with(merge, leaf)
        if compiled.nodes != pure.nodes:
            return f"its Merkle append differs at tree size {i + 1}"
    return ""
