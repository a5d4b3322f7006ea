"""What the writer knows about a partition when it takes it over, read back from Kafka.

On start-up and on every assignment, for each partition: the stream heads from
``<prefix>.writer-state``, checked against the last committed record of each stream in
``<prefix>.log``, and the dedup window rebuilt from the log's recent event ids. A head that
disagrees with the log stops the writer (:class:`~writer.errors.StateMismatchError`): sealing
from a wrong head would fork the chain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from evidence_contract import DecodeError, peek_ids, split_record
from topics import TopicNames
from writer.config import WriterConfig
from writer.core import DedupWindow, Sealer, decode_head
from writer.errors import StateMismatchError
from writer.kafka_io import Consumer, offset_for_time, read_partition, watermarks

if TYPE_CHECKING:
    from writer.core import Head

__all__ = ["check_heads", "restore"]

TAIL_PROBE = 256  # offsets scanned back from the log end to find each stream's last record


def restore(reader: Consumer, cfg: WriterConfig, sealer: Sealer, partition: int,
            clock: Callable[[], int]) -> tuple[dict[str, Head], DedupWindow]:
    """Heads from writer-state, checked against the log; dedup window from the log."""
    names = cfg.topics.names
    heads = read_heads(reader, names.writer_state, partition)
    log_topic = names.log
    lo, hi = watermarks(reader, log_topic, partition)
    now = clock()
    found = offset_for_time(reader, log_topic, partition,
                            (now - cfg.dedup_window_s * 1_000_000) // 1000)
    window_start = max(lo, hi - cfg.dedup_max_ids, found if found >= 0 else hi)
    probe = TAIL_PROBE
    while True:
        window = sealer.new_window()
        last: dict[str, bytes] = {}
        scan_start = min(window_start, max(lo, hi - probe))
        for msg in read_partition(reader, log_topic, partition, scan_start):
            stream, event_id = peek_ids(msg.value())
            last[stream] = msg.value()
            if msg.offset() >= window_start:
                window.add(event_id, msg.timestamp()[1] * 1000)
        if last or scan_start <= lo:
            break
        probe *= 16  # the tail was only aborted data and markers: look further back
    window.expire(now)
    check_heads(names, partition, heads, last)
    return heads, window


def read_heads(reader: Consumer, topic: str, partition: int) -> dict[str, Head]:
    """The last head per stream in one partition of writer-state (tombstones skipped)."""
    heads: dict[str, Head] = {}
    for msg in read_partition(reader, topic, partition):
        if msg.value() is None:
            continue
        try:
            head = decode_head(msg.value())
        except DecodeError as e:
            raise StateMismatchError(
                f"{topic}[{partition}]@{msg.offset()} is not a WriterHead: {e}") from e
        heads[head.stream] = head
    return heads


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
