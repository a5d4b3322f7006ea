"""What the writer knows about a partition when it takes it over, read back from Kafka.

On start-up and on every assignment, for each partition: the stream heads from
``<prefix>.writer-state``, checked against the last committed record of each stream in
``<prefix>.log``; the dedup window rebuilt from the log's recent event ids; and each stream's
Merkle tree. A head that disagrees with the log stops the writer
(:class:`~writer.errors.StateMismatchError`): sealing from a wrong head would fork the chain.

A stream's tree comes from its WriterHead (the compact range persisted there), checked against
the last checkpoint of the stream on ``<prefix>.checkpoints`` (same partition) when the writer
signs, and brought up to the head by re-hashing the log's records sealed since
(:func:`writer.checkpoints.plan_restore` decides which). While the writer signs, the head
holds the range at the last checkpoint, so those records are at most a checkpoint interval's
worth: they are in the tail of the log partition that the dedup scan reads anyway. A tree that
disagrees with a signed checkpoint does not stop sealing, but that stream is never signed
again by this writer: it is logged loudly (``checkpoint_refused``) and counted in the metric
``evidence_writer_checkpoint_refused_streams``.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Callable

from evidence_contract import DecodeError, decode, peek_ids, split_record
from evidence_contract.erasure import REQUEST_HEADER
from evidence_contract.merkle import CompactRange
from evidence_contract.note import NoteError, parse_checkpoint, parse_note, stream_origin
from server.logs import event_logger
from topics import TopicNames
from writer.checkpoints import (
    KIND_HEADER,
    SIZE_HEADER,
    STREAM_HEADER,
    RestorePlan,
    StreamTree,
    TreeState,
    plan_restore,
    record_leaf,
)
from writer.config import WriterConfig
from writer.core import DedupWindow, Sealer, decode_head_state
from writer.errors import StateMismatchError
from writer.kafka_io import Consumer, offset_for_time, read_partition, watermarks

if TYPE_CHECKING:
    from writer.core import Head

__all__ = ["check_heads", "read_last_checkpoints", "read_receipted", "restore"]

log = event_logger("evidence.writer")
TAIL_PROBE = 256  # offsets scanned back from the log end to find each stream's last record


def restore(reader: Consumer, cfg: WriterConfig, sealer: Sealer, partition: int,
            clock: Callable[[], int]) -> tuple[dict[str, Head], DedupWindow, dict[str, StreamTree]]:
    """Heads from writer-state, checked against the log; dedup window from the log; trees
    from writer-state, checked against the last checkpoints and brought up to the heads."""
    names = cfg.topics.names
    states = read_heads(reader, names.writer_state, partition)
    heads = {s: h for s, (h, _t) in states.items()}
    signing = sealer.trees.signing
    last_cps: dict[str, tuple[int, bytes] | str] = {}
    if signing:
        wanted = {s for s, (_h, t) in states.items() if t.checkpoint_size > 0}
        last_cps = read_last_checkpoints(reader, names.checkpoints, partition, cfg.log_name,
                                         wanted)
    plans: dict[str, RestorePlan] = {}
    for stream, (head, stored) in states.items():
        cp = last_cps.get(stream)
        if isinstance(cp, str):
            plans[stream] = RestorePlan(stored.range(), None, refused=cp)
        else:
            plans[stream] = plan_restore(stream, head.seq, stored, cp, signing)
    # Records to re-hash per stream: the last (seq - base) of the stream in the log.
    need = {s: heads[s].seq - p.base.size for s, p in plans.items()
            if not p.refused and heads[s].seq > p.base.size}
    now = clock()
    window, last, tails = _scan_log(reader, cfg, sealer, partition, need, now)
    window.expire(now)
    check_heads(names, partition, heads, last)
    trees = {s: _tree(s, heads[s], states[s][1], plans[s], tails.get(s, deque()))
             for s in states}
    for stream, tree in trees.items():
        if tree.refused:
            log("error", "checkpoint_refused", partition=partition, stream=stream,
                reason=tree.refused,
                message="this stream's tree cannot be trusted; the writer keeps sealing it "
                        "but signs no checkpoint for it")
    return heads, window, trees


def _scan_log(reader: Consumer, cfg: WriterConfig, sealer: Sealer, partition: int,
              need: dict[str, int], now: int
              ) -> tuple[DedupWindow, dict[str, bytes], dict[str, deque[bytes]]]:
    """One read of the log partition's tail: the dedup window (the event ids of the last
    ``dedup_window_s`` and at most ``dedup_max_ids``), each stream's last record, and the
    last ``need[stream]`` records of each stream whose tree must be re-hashed. Reads further
    back until it holds all of them or reaches the partition's start."""
    log_topic = cfg.topics.names.log
    lo, hi = watermarks(reader, log_topic, partition)
    found = offset_for_time(reader, log_topic, partition,
                            (now - cfg.dedup_window_s * 1_000_000) // 1000)
    window_start = max(lo, hi - cfg.dedup_max_ids, found if found >= 0 else hi)
    probe = TAIL_PROBE
    while True:
        window = sealer.new_window()
        last: dict[str, bytes] = {}
        seen: dict[str, int] = {}
        tails: dict[str, deque[bytes]] = {s: deque(maxlen=n) for s, n in need.items()}
        scan_start = min(window_start, max(lo, hi - probe))
        for msg in read_partition(reader, log_topic, partition, scan_start):
            stream, event_id = peek_ids(msg.value())
            last[stream] = msg.value()
            tail = tails.get(stream)
            if tail is not None:
                tail.append(msg.value())
                seen[stream] = seen.get(stream, 0) + 1
            if msg.offset() >= window_start:
                window.add(event_id, msg.timestamp()[1] * 1000)
        short = any(seen.get(s, 0) < n for s, n in need.items())
        if (last and not short) or scan_start <= lo:
            return window, last, tails
        # The tail was only aborted data and markers, or holds too few of a stream's records
        # since its last checkpoint: look further back.
        probe *= 16


def _tree(stream: str, head: Head, stored: TreeState, plan: RestorePlan,
          tail: deque[bytes]) -> StreamTree:
    """The stream's tree at its head: ``plan``'s base, then the log's records after it."""
    def refused(reason: str) -> StreamTree:
        return StreamTree(stored.range(), stored.checkpoint_size, stored.nodes,
                          refused=reason, stored=stored)

    if plan.refused:
        return refused(plan.refused)
    if len(tail) < head.seq - plan.base.size:
        return refused(f"stream {stream!r}: the log holds {len(tail)} records after seq "
                       f"{plan.base.size}, the head is at {head.seq}")
    r = CompactRange(plan.base.size, plan.base.nodes)
    at_checkpoint = r.nodes if plan.check and plan.check[0] == r.size else None
    for raw in tail:
        try:
            _name, rec = decode(raw)
            seal = rec["seal"]
        except (DecodeError, KeyError, TypeError) as e:
            return refused(f"stream {stream!r}: a record after seq {r.size} does not decode: {e}")
        if seal["seq"] != r.size + 1:
            return refused(f"stream {stream!r}: expected seq {r.size + 1} in the log, found "
                           f"{seal['seq']}")
        r.append(record_leaf(raw, seal["record_digest"]))
        if plan.check and r.size == plan.check[0]:
            at_checkpoint = r.nodes
            if r.root() != plan.check[1]:
                return refused(f"stream {stream!r}: the log's records 1..{r.size} have another "
                               f"tree root than the checkpoint signed at {r.size}")
    if r.size != head.seq:
        return refused(f"stream {stream!r}: the tree reached {r.size}, the head is {head.seq}")
    if plan.check is None:
        # No signed checkpoint to start from (or no key): the next one is the first the
        # range is checked against; checkpoint_size is kept for the head.
        return StreamTree(r, stored.checkpoint_size, ())
    if at_checkpoint is None:  # cannot happen: the plan's check is at or after its base
        return refused(f"stream {stream!r}: checkpoint size {plan.check[0]} not reached")
    return StreamTree(r, plan.check[0], tuple(at_checkpoint))


def read_heads(reader: Consumer, topic: str, partition: int) -> dict[str, tuple[Head, TreeState]]:
    """The last head and tree per stream in one partition of writer-state (tombstones
    skipped)."""
    heads: dict[str, tuple[Head, TreeState]] = {}
    for msg in read_partition(reader, topic, partition):
        if msg.value() is None:
            continue
        try:
            head, tree = decode_head_state(msg.value())
        except DecodeError as e:
            raise StateMismatchError(
                f"{topic}[{partition}]@{msg.offset()} is not a WriterHead: {e}") from e
        heads[head.stream] = (head, tree)
    return heads


def read_last_checkpoints(reader: Consumer, topic: str, partition: int, log_name: str,
                          wanted: set[str]) -> dict[str, tuple[int, bytes] | str]:
    """The last signed checkpoint per stream in one partition of ``evidence.checkpoints``:
    (size, root), or why the last one cannot be read. Reads back from the end, further
    each time, until every stream in ``wanted`` is found or the partition's start is reached
    (cosignatures are skipped: they repeat a checkpoint the log signed)."""
    lo, hi = watermarks(reader, topic, partition)
    probe = TAIL_PROBE
    while True:
        start = max(lo, hi - probe)
        out: dict[str, tuple[int, bytes] | str] = {}
        for msg in read_partition(reader, topic, partition, start):
            headers = dict(msg.headers() or [])
            if headers.get(KIND_HEADER) != b"checkpoint":
                continue
            raw_stream = headers.get(STREAM_HEADER) or b""
            stream = raw_stream.decode("utf-8", "replace")
            out[stream] = _checkpoint_of(msg.value(), stream, log_name,
                                         headers.get(SIZE_HEADER), msg.offset(), topic)
        if wanted <= set(out) or start <= lo:
            return out
        probe *= 16


def read_receipted(reader: Consumer, topic: str, partition: int) -> set[str]:
    """The request ids receipted on one partition of ``evidence.erasures`` (the whole
    partition: receipts are few)."""
    out = set()
    for msg in read_partition(reader, topic, partition):
        rid = dict(msg.headers() or []).get(REQUEST_HEADER) or msg.key() or b""
        out.add(rid.decode("utf-8", "replace"))
    return out


def _checkpoint_of(value: bytes | None, stream: str, log_name: str, size_header: bytes | None,
                   offset: int, topic: str) -> tuple[int, bytes] | str:
    where = f"{topic}@{offset}"
    try:
        cp = parse_checkpoint(parse_note(value or b"").text)
        origin = stream_origin(log_name, stream)
    except NoteError as e:
        return f"stream {stream!r}: the last checkpoint ({where}) is malformed: {e}"
    if cp.origin != origin:
        return f"stream {stream!r}: the last checkpoint ({where}) has origin {cp.origin!r}"
    if size_header != str(cp.size).encode():
        return f"stream {stream!r}: the last checkpoint ({where}) says size {size_header!r} " \
               f"in its header and {cp.size} in its note"
    return cp.size, cp.root_hash


def check_heads(names: TopicNames, partition: int, heads: dict[str, Head],
                last: dict[str, bytes]) -> None:
    """Raise unless every stream's last log record is the head writer-state holds for it."""
    if heads and not last:
        raise StateMismatchError(
            f"{names.writer_state}[{partition}] has {len(heads)} heads but "
            f"{names.log}[{partition}] has no committed records")
    for stream, raw in last.items():
        _, rec = split_record(raw)
        seal, head = rec["seal"], heads.get(stream)
        if head is None or (head.seq, head.digest) != (seal["seq"], seal["record_digest"]):
            raise StateMismatchError(
                f"stream {stream!r}: last record in {names.log}[{partition}] is seq "
                f"{seal['seq']}, writer-state says {head.seq if head else 'nothing'}; refusing to seal")
