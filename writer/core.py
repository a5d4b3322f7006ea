"""The writer's pure core: validate a capture, seal it after its stream head, absorb duplicates.

No Kafka, no clock reads (callers pass ``now``), no I/O: every function takes bytes and values
and returns values, so the rules are unit-tested without a broker (compute, then persist).
``writer.service`` feeds it intake messages and writes what it returns.

- :func:`validate` — intake bytes + key → :class:`Capture` or :class:`Rejection`.
- :func:`seal_capture` — capture + :class:`Head` → (sealed EvidenceRecord bytes, new head).
- :class:`DedupWindow` — recently sealed event_ids, bounded by age and by count.
- :class:`Sealer` — per-partition heads and windows, with a per-transaction overlay that
  becomes real on :meth:`Sealer.commit` and vanishes on :meth:`Sealer.abort`.
"""

from __future__ import annotations

import hmac
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from evidence_contract import (
    GENESIS,
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
from evidence_contract.chain import Head, Link, advance
from evidence_contract.topics import partition_for
from writer.checkpoints import StreamTree, Trees, TreeState, record_leaf
from writer.erasures import Receipts
from writer.native import kernel as native_kernel
from writer.reasons import Reason

__all__ = [
    "HEADROOM_BYTES",
    "Capture",
    "DedupWindow",
    "Duplicate",
    "Head",
    "Rejection",
    "Sealed",
    "Sealer",
    "decode_head",
    "decode_head_state",
    "encode_head",
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


def _reject(reason: Reason, text: str) -> Rejection:
    return Rejection(reason, text)


def validate(value: bytes | None, key: bytes | None, max_message_bytes: int) -> Capture | Rejection:
    """Check one intake message; return the Capture to seal or the Rejection to park.

    The checks run cheapest first; each failure has its own reason. The header is
    classified by hand (marker, then fingerprint) because ``schemas.decode`` raises one
    error type for all of them.
    """
    if not value:
        return _reject(Reason.NOT_AVRO, "message has no value")
    limit = max_message_bytes - HEADROOM_BYTES
    if len(value) > limit:
        return _reject(Reason.OVERSIZED, f"value is {len(value)} bytes, limit is {limit}")
    if value[0] != MARKER[0]:
        return _reject(Reason.NOT_AVRO, f"first byte {value[:1].hex()} is not an Avro single-object marker")
    if len(value) < 2 or value[1] != MARKER[1]:
        if len(value) < 2:
            return _reject(Reason.TRUNCATED, "message ends inside the single-object marker")
        return _reject(Reason.BAD_MARKER, f"marker {value[:2].hex()} != c301")
    if len(value) < HEADER_SIZE:
        return _reject(Reason.TRUNCATED, f"message ends inside the header ({len(value)} bytes)")
    fp = value[2:HEADER_SIZE]
    name = schema_name_for(fp)
    if name is None:
        return _reject(Reason.UNKNOWN_FINGERPRINT, f"unknown schema fingerprint {fp.hex()}")
    if name != "CaptureEvent":
        return _reject(Reason.WRONG_SCHEMA, f"a {name}, not a CaptureEvent")
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
        return _reject(Reason.TRUNCATED, str(e))
    except DecodeError as e:
        return _reject(Reason.MALFORMED, str(e))
    if end != len(value):
        return _reject(Reason.MALFORMED, f"{len(value) - end} trailing bytes after the body")
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
        return _reject(Reason.UNSUPPORTED_VERSION, f"schema_version {version!r} is not supported")
    stream = body["stream"]
    if not valid_stream_id(stream):
        return _reject(Reason.BAD_STREAM_ID, f"stream {stream!r} is not a valid stream id")
    if key is None or key != stream.encode("utf-8"):
        return _reject(Reason.KEY_MISMATCH, f"message key {key!r} is not the stream {stream!r}")
    event_id = body["event_id"]
    if not valid_event_id(event_id):
        return _reject(Reason.BAD_EVENT_ID, f"event_id {event_id!r} is not a canonical UUIDv7")
    misfit = wrong_size_digest("CaptureEvent", body)
    if misfit:
        return _reject(Reason.BAD_DIGEST, misfit)
    replay = body["replay"]
    seed = replay["seed"]
    if seed is not None and not valid_seed(seed):
        return _reject(Reason.BAD_SEED, f"replay.seed {seed[:40]!r} is not an integer as "
                                        f"decimal text")
    if replay["deterministic"] != (seed is not None):
        return _reject(Reason.BAD_SEED, f"replay.deterministic is {replay['deterministic']} "
                                        f"but replay.seed is {'null' if seed is None else 'set'}")
    if body["capture"]["truncated"]:
        kept = _kept_despite_truncation(body)
        if kept:
            return _reject(Reason.BAD_TRUNCATION, kept)
    missing = _missing_fields(body)
    if missing:
        return _reject(Reason.MISSING_FIELD, missing)
    encryption = body.get("encryption")
    if encryption is not None:
        # Sealed content: the keyed commitments cannot be recomputed without the subject's
        # data key, which the writer never holds. What it can check is the shape: scheme,
        # key id, every content field an envelope of that key, the plaintext lengths.
        problem = encrypted_body_problem(body)
        if not problem and version != "2.1":
            problem = f"schema_version {version!r} has no encryption; an encrypted capture is 2.1"
        if problem:
            return _reject(Reason.BAD_ENCRYPTION, problem)
    else:
        wrong = _wrong_length(body)
        if wrong:
            return _reject(Reason.LENGTH_MISMATCH, wrong)
        mismatch = _digest_mismatch(body)
        if mismatch:
            return _reject(Reason.DIGEST_MISMATCH, mismatch)
    # The sealed body must be the canonical Avro binary (record_digest covers it and any
    # other implementation must recompute the same bytes). The fast path has proved that
    # already; otherwise fastavro (which writes canonical Avro) re-encodes, which both
    # checks and, if needed, repairs the intake bytes.
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
    if body["outcome"] == "COMMITTED":
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
    the contract's committed vector, or "" when it seals it byte for byte the same."""
    import hashlib

    from evidence_contract.merkle import CompactRange
    from evidence_contract.vectors import committed_event

    event = committed_event()
    value, key = encode("CaptureEvent", event), event["stream"].encode("utf-8")
    writer = {"writer_id": "self-check", "transactional_id": "self-check", "version": "0"}
    capture = validate(value, key, 1 << 24)
    if not isinstance(capture, Capture):  # pragma: no cover - the vector is valid
        return f"the committed vector does not validate: {capture}"
    head = Head.genesis(capture.stream)
    record, new_head = seal_capture(capture, head, 1, writer, 0, 7)
    kernel = mod.Kernel(writer["writer_id"], writer["transactional_id"], writer["version"])
    got = kernel.check(value, key, 1 << 24, 0, 0)
    if got is None or tuple(got[:2]) != (capture.stream, capture.event_id):
        return "it does not accept the contract's committed vector"
    native = kernel.seal(value, got[2], head.digest, 1, 1, 0, 7)
    if (native[0], native[1], native[2]) != (record, new_head.digest,
                                             record_leaf(record, new_head.digest)):
        return "it seals the contract's committed vector differently"
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


class DedupWindow:
    """Event ids sealed recently, bounded by age (``max_age_us``) and by count (``max_ids``).

    Ids are kept in insertion order, which is seal order, so expiry pops from the front.
    A capture retried after the window has passed would be sealed again; the window is the
    documented limit of deduplication.
    """

    def __init__(self, max_age_us: int, max_ids: int) -> None:
        if max_age_us <= 0 or max_ids <= 0:
            raise ValueError("dedup window bounds must be positive")
        self.max_age_us = max_age_us
        self.max_ids = max_ids
        self._ids: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, event_id: str) -> bool:
        return event_id in self._ids

    def add(self, event_id: str, at_micros: int) -> None:
        """Remember ``event_id`` as sealed at ``at_micros``; evicts what falls out of bounds."""
        self._ids[event_id] = at_micros
        self._ids.move_to_end(event_id)
        self.expire(at_micros)

    def add_all(self, sealed: Mapping[str, int]) -> None:
        """:meth:`add` each ``event_id -> at_micros`` of ``sealed`` in order (a transaction's
        ids, in seal order), expiring once, at the last one's time. The same ids remain as
        after an ``add`` each when the times do not go down; when they do (a stream whose
        head is ahead of the clock), it keeps ids an ``add`` each would have expired by age,
        never fewer: deduplication errs towards absorbing a retry. The count bound is
        exact either way."""
        ids = self._ids
        last = None
        for event_id, at in sealed.items():
            if event_id in ids:
                ids.move_to_end(event_id)
            ids[event_id] = at
            last = at
        if last is not None:
            self.expire(last)

    def expire(self, now_micros: int) -> None:
        """Drop ids older than the window and the oldest ids beyond the count bound."""
        ids, horizon = self._ids, now_micros - self.max_age_us
        while ids and (len(ids) > self.max_ids or next(iter(ids.values())) < horizon):
            ids.popitem(last=False)


@dataclass(slots=True)
class Sealed:
    """A capture sealed in the open transaction. Treated as immutable, but not ``frozen``:
    one is made per record sealed, and a frozen dataclass costs ~3 us more to make."""

    record: bytes
    head: Head
    reencoded: bool


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A capture whose event_id was already sealed on this partition: absorbed, not sealed."""

    stream: str
    event_id: str


@dataclass
class _Partition:
    heads: dict[str, Head]
    window: DedupWindow


@dataclass
class _Pending:
    heads: dict[tuple[int, str], Head] = field(default_factory=dict)
    ids: dict[int, dict[str, int]] = field(default_factory=dict)


class Sealer:
    """Stream heads and dedup windows of the partitions this writer owns.

    Changes made while a transaction is open live in an overlay: :meth:`commit` applies it
    once Kafka has committed the transaction, :meth:`abort` forgets it, so after an abort
    the state is exactly what the last committed transaction left (no head re-reading).
    """

    def __init__(self, writer: dict[str, str], max_message_bytes: int,
                 dedup_max_age_us: int, dedup_max_ids: int,
                 partitions: int | None = None, trees: Trees | None = None,
                 native: bool | None = None) -> None:
        self.writer = dict(writer)
        self.kernel = native_kernel(self.writer, native)
        """The compiled seal path (``writer.native``; None: the pure path only). ``native``:
        None selects by ``EVIDENCE_NATIVE``, False never, True always (or raises)."""
        self._merge = None if self.kernel is None else self.kernel.append_leaf
        self._limit = max_message_bytes - HEADROOM_BYTES
        self._homes: dict[str, int] = {}  # stream -> its intake partition
        self.trees = trees if trees is not None else Trees()
        """Each stream's Merkle tree and checkpoints, staged with the same transactions."""
        self.receipts = Receipts()
        """The erasure requests receipted per partition, staged with the same transactions."""
        self.max_message_bytes = max_message_bytes
        self.partitions = partitions
        """The intake partition count; when given, a capture must be on its stream's
        partition (``evidence_contract.topics.partition_for``)."""
        self.dedup_max_age_us = dedup_max_age_us
        self.dedup_max_ids = dedup_max_ids
        self._parts: dict[int, _Partition] = {}
        self._pending = _Pending()

    # -- ownership -------------------------------------------------------------------------
    def new_window(self) -> DedupWindow:
        return DedupWindow(self.dedup_max_age_us, self.dedup_max_ids)

    def assign(self, partition: int, heads: dict[str, Head], window: DedupWindow,
               trees: dict[str, StreamTree] | None = None) -> None:
        """Take ownership of ``partition`` with its restored heads, dedup window and trees
        (each at its head; a stream without one is never signed)."""
        trees = dict(trees or {})
        for stream, head in heads.items():
            tree = trees.get(stream)
            if tree is None:
                trees[stream] = StreamTree(refused="no tree was restored", stored=TreeState())
            elif not tree.refused and tree.range.size != head.seq:
                raise ValueError(f"stream {stream!r}: tree of {tree.range.size} leaves, head "
                                 f"at {head.seq}")
        self._parts[partition] = _Partition(dict(heads), window)
        self.trees.assign(partition, trees)

    def revoke(self, partition: int) -> None:
        self._parts.pop(partition, None)
        self.trees.revoke(partition)
        self.receipts.revoke(partition)

    def owns(self, partition: int) -> bool:
        return partition in self._parts

    def owned(self) -> list[int]:
        """The partitions this writer owns, ascending."""
        return sorted(self._parts)

    def head(self, partition: int, stream: str) -> Head:
        h = self._pending.heads.get((partition, stream))
        if h is not None:
            return h
        return self._parts[partition].heads.get(stream) or Head.genesis(stream)

    # -- one message -----------------------------------------------------------------------
    def handle(self, value: bytes | None, key: bytes | None, partition: int, offset: int,
               now_micros: int) -> Sealed | Duplicate | Rejection:
        """Validate and, unless it is bad or a duplicate, seal one intake message."""
        if self.kernel is not None:
            # The compiled path takes what it can prove sealable as it came (nearly every
            # capture); it answers None for the rest, which the pure path below decides.
            got = self.kernel.check(value, key, self._limit, self.partitions or 0, partition)
            if got is not None:
                return self._seal_native(got, value, partition, offset, now_micros)
        checked = validate(value, key, self.max_message_bytes)
        if isinstance(checked, Rejection):
            return checked
        if self.partitions is not None:
            home = self._homes.get(checked.stream)
            if home is None:
                home = self._homes[checked.stream] = partition_for(checked.stream,
                                                                   self.partitions)
            if partition != home:
                return _reject(Reason.WRONG_PARTITION,
                               f"stream {checked.stream!r} belongs on intake partition {home} "
                               f"(Kafka's murmur2 keyed partitioner), not {partition}")
        part = self._parts[partition]
        pending_ids = self._pending.ids.setdefault(partition, {})
        if checked.event_id in pending_ids or checked.event_id in part.window:
            return Duplicate(checked.stream, checked.event_id)
        record, head = seal_capture(checked, self.head(partition, checked.stream), now_micros,
                                    self.writer, partition, offset)
        self._pending.heads[(partition, checked.stream)] = head
        pending_ids[checked.event_id] = head.occurred_at
        self.trees.append(partition, checked.stream, record_leaf(record, head.digest), head.seq)
        return Sealed(record, head, checked.reencoded)

    def _seal_native(self, got: tuple[str, str, bytes], value: bytes, partition: int,
                     offset: int, now_micros: int) -> Sealed | Duplicate:
        """The rest of :meth:`handle` for a capture the compiled path accepted: the same
        dedup, head, seal (``seal_capture``'s rule for seq and occurred_at) and tree append."""
        stream, event_id, record_fp = got
        part, pending = self._parts[partition], self._pending
        pending_ids = pending.ids.get(partition)
        if pending_ids is None:
            pending_ids = pending.ids[partition] = {}
        if event_id in pending_ids or event_id in part.window:
            return Duplicate(stream, event_id)
        key = (partition, stream)
        head = pending.heads.get(key) or part.heads.get(stream) or Head.genesis(stream)
        seq = head.seq + 1
        occurred_at = max(now_micros, head.occurred_at)
        record, digest, leaf = self.kernel.seal(value, record_fp, head.digest, seq, occurred_at,
                                                partition, offset)
        # What ``advance`` returns for the link this seal makes (seq = head + 1, prev = the
        # head's digest, so no finding); tests hold the two to the same heads.
        new_head = Head(stream, seq, digest, occurred_at, event_id, head.missing)
        pending.heads[key] = new_head
        pending_ids[event_id] = occurred_at
        self.trees.append(partition, stream, leaf, seq, self._merge)
        return Sealed(record, new_head, False)

    def pending_heads(self) -> dict[tuple[int, str], Head]:
        """The new head of every (partition, stream) sealed in the open transaction."""
        return dict(self._pending.heads)

    def pending_state(self) -> dict[tuple[int, str], tuple[Head, TreeState]]:
        """What writer-state gets for the open transaction: the head and persisted tree of
        every (partition, stream) sealed or checkpointed in it."""
        keys = set(self._pending.heads) | set(self.trees.pending())
        signing = self.trees.signing
        return {(p, s): (self.head(p, s), self.trees.tree(p, s).state(signing))
                for p, s in sorted(keys)}

    def commit(self) -> None:
        """The transaction committed: its heads and event ids become the state."""
        for (partition, stream), head in self._pending.heads.items():
            self._parts[partition].heads[stream] = head
        for partition, ids in self._pending.ids.items():
            self._parts[partition].window.add_all(ids)
        self._pending = _Pending()
        self.trees.commit()
        self.receipts.commit()

    def abort(self) -> None:
        """The transaction aborted: forget everything it sealed."""
        self._pending = _Pending()
        self.trees.abort()
        self.receipts.abort()
