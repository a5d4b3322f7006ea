"""The verification core of the audit (pure): feed it log messages in offset order, it
recomputes every digest and link and names every finding.

Checks per stream: every message decodes as an EvidenceRecord; seq runs 1..n with no gap and
no duplicate; every ``prev_digest`` is the previous record's ``record_digest`` and every
``record_digest`` recomputes over the body bytes *as stored*; the stored body is canonical
Avro; ``content_key`` recomputes from the request bytes where they are kept,
``response_digest`` / ``output_digest`` from the response where it is kept, ``input_digest``,
``prompt_digest`` and each ``chunk_digest`` from their bytes where kept, and
``request_length`` / ``response_length`` are the lengths of the bytes kept. Then the chain's
last record per stream is compared with the writer's own heads (``evidence.writer-state``):
a record that a rogue producer appended at the tail, bypassing the writer, is not in them.

Finding kinds are stable strings (``KINDS``), for reports and exit codes.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

from evidence_contract import (
    DecodeError,
    GENESIS,
    canonical_body_bytes,
    chunk_digest,
    content_key,
    input_digest,
    output_digest,
    prompt_digest,
    record_digest,
    response_digest,
    split_record,
)

KINDS = (
    "undecodable", "gap", "duplicate", "broken_link", "record_digest_mismatch",
    "non_canonical_body", "content_key_mismatch", "response_digest_mismatch",
    "output_digest_mismatch", "input_digest_mismatch", "prompt_digest_mismatch",
    "chunk_digest_mismatch", "length_mismatch", "not_sealed_by_writer", "head_mismatch",
    "projection_missing", "projection_extra", "projection_altered",
)


@dataclass(frozen=True)
class Finding:
    kind: str
    stream: str | None
    seq: int | None
    partition: int | None
    offset: int | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StreamState:
    records: int = 0
    last_seq: int = 0
    last_digest: bytes = GENESIS
    last_pos: tuple[int, int] | None = None
    prev_of_last: bytes = GENESIS
    # Other copies of the tail seq that link to the same predecessor: a fork. The writer only
    # ever continues its own chain, so the copy the next record (or the writer's head) links
    # to is the writer's, and the other is not. record_digest -> (partition, offset).
    forks: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class Indexed:
    """What the projection comparison needs of a log record, kept small."""

    stream: str
    seq: int
    value_sha256: bytes


OutputText = Callable[[dict[str, Any]], "str | None"]


class LogAuditor:
    """Accumulates per-stream chain state and findings over log messages in offset order.

    ``output_text`` extracts the model's output text from a body (the gateway's provider
    adapters); without it ``output_digest`` is not recomputed.
    """

    def __init__(self, stream: str | None = None, output_text: OutputText | None = None,
                 keep_index: bool = False):
        self.stream_filter = stream
        self.output_text = output_text
        self.streams: dict[str, StreamState] = {}
        self.findings: list[Finding] = []
        self.messages = 0
        self.index: dict[tuple[int, int], Indexed] | None = {} if keep_index else None

    def _find(self, kind: str, stream, seq, partition, offset, detail: str) -> None:
        self.findings.append(Finding(kind, stream, seq, partition, offset, detail))

    def add(self, partition: int, offset: int, value: bytes | None) -> None:
        self.messages += 1
        try:
            stored_body, record = split_record(value or b"")
        except DecodeError as e:
            if self.stream_filter is None:
                self._find("undecodable", None, None, partition, offset, str(e))
            return
        body, seal = record["body"], record["seal"]
        stream, seq = body["stream"], seal["seq"]
        if self.stream_filter is not None and stream != self.stream_filter:
            return
        if self.index is not None:
            self.index[(partition, offset)] = Indexed(stream, seq,
                                                      hashlib.sha256(value).digest())
        st = self.streams.setdefault(stream, StreamState())
        st.records += 1
        where = (stream, seq, partition, offset)

        if seq in st.seen:
            self._find("duplicate", *where, f"seq {seq} appears again")
            if seq == st.last_seq and bytes(seal["prev_digest"]) == st.prev_of_last:
                st.forks[bytes(seal["record_digest"])] = (partition, offset)
        elif seq != st.last_seq + 1:
            if seq > st.last_seq + 1:
                missing = (f"{st.last_seq + 1}" if seq == st.last_seq + 2
                           else f"{st.last_seq + 1}..{seq - 1}")
                self._find("gap", *where, f"seq {missing} missing before seq {seq}")
            else:
                self._find("gap", *where, f"seq {seq} after seq {st.last_seq}: out of order")
        prev = bytes(seal["prev_digest"])
        if seq not in st.seen and prev != st.last_digest:
            if seq == st.last_seq + 1 and prev in st.forks:
                # The chain continues from another copy of the previous seq: that copy is the
                # writer's, the one the auditor had taken as the tail is not.
                self._abandon(stream, st, prev)
            else:
                self._find("broken_link", *where,
                           f"prev_digest {prev.hex()[:16]}… is not the previous "
                           f"record_digest {st.last_digest.hex()[:16]}…")
        recomputed = record_digest(prev, seq, seal["occurred_at"], stored_body)
        if recomputed != bytes(seal["record_digest"]):
            self._find("record_digest_mismatch", *where,
                       f"record_digest does not recompute (stored "
                       f"{bytes(seal['record_digest']).hex()[:16]}…, computed "
                       f"{recomputed.hex()[:16]}…)")
        if canonical_body_bytes(body) != stored_body:
            self._find("non_canonical_body", *where,
                       "stored body bytes are not the canonical Avro binary of the body")
        self._check_body(body, where)

        if seq not in st.seen:
            st.seen.add(seq)
            if seq > st.last_seq:
                st.last_seq = seq
                st.last_digest = bytes(seal["record_digest"])
                st.last_pos = (partition, offset)
                st.prev_of_last = prev
                st.forks = {}

    def _abandon(self, stream: str, st: StreamState, writer_digest: bytes) -> None:
        """Two copies of seq ``st.last_seq`` link to the same predecessor; the writer's chain
        (its next record, or its head) continues from ``writer_digest``: name the other."""
        pos = st.last_pos or (None, None)
        self._find("not_sealed_by_writer", stream, st.last_seq, *pos,
                   f"seq {st.last_seq} has two copies; the writer's chain continues from the "
                   f"copy at {st.forks[writer_digest][0]}:{st.forks[writer_digest][1]}, so this "
                   f"one was not sealed by the writer")
        st.last_digest, st.last_pos = writer_digest, st.forks.pop(writer_digest)

    def _check_body(self, body: dict[str, Any], where: tuple) -> None:
        if body["request_bytes"] is not None and \
                content_key(body["request_bytes"]) != bytes(body["content_key"]):
            self._find("content_key_mismatch", *where,
                       "content_key does not recompute from request_bytes")
        if body["response_bytes"] is not None and body["response_digest"] is not None and \
                response_digest(body["response_bytes"]) != bytes(body["response_digest"]):
            self._find("response_digest_mismatch", *where,
                       "response_digest does not recompute from response_bytes")
        for kept, digest, fn in (("input_bytes", "input_digest", input_digest),
                                 ("prompt_bytes", "prompt_digest", prompt_digest)):
            if body[kept] is not None and (body[digest] is None
                                           or fn(body[kept]) != bytes(body[digest])):
                self._find(f"{digest}_mismatch", *where,
                           f"{digest} does not recompute from {kept}")
        for i, chunk in enumerate(body["retrieval"]):
            if chunk["chunk_bytes"] is not None and \
                    chunk_digest(chunk["chunk_bytes"]) != bytes(chunk["chunk_digest"]):
                self._find("chunk_digest_mismatch", *where,
                           f"retrieval[{i}].chunk_digest does not recompute from its chunk_bytes")
        for name, data in (("request_length", body["request_bytes"]),
                           ("response_length", body["response_bytes"])):
            if data is not None and body[name] != len(data):
                self._find("length_mismatch", *where,
                           f"{name} is {body[name]} but the record keeps {len(data)} bytes")
        if self.output_text is not None and body["output_digest"] is not None \
                and body["response_bytes"] is not None:
            try:
                text = self.output_text(body)
            except Exception as e:  # noqa: BLE001 - an adapter failure is a finding, not a crash
                text, err = None, e
            else:
                err = None
            if text is None:
                self._find("output_digest_mismatch", *where,
                           f"output text cannot be extracted from the response"
                           + (f": {err}" if err else ""))
            elif output_digest(text) != bytes(body["output_digest"]):
                self._find("output_digest_mismatch", *where,
                           "output_digest does not recompute from the response's output text")

    def check_heads(self, heads: dict[str, tuple[int, bytes]]) -> None:
        """Compare each stream's chain tail with the writer's recorded head."""
        for stream, st in sorted(self.streams.items()):
            head = heads.get(stream)
            if head is None:
                self._find("not_sealed_by_writer", stream, st.last_seq, None, None,
                           "the writer has no head for this stream: its records did not come "
                           "from the writer")
                continue
            seq, digest = head
            digest = bytes(digest)
            if (seq, digest) == (st.last_seq, st.last_digest):
                continue
            if seq == st.last_seq and digest in st.forks:
                self._abandon(stream, st, digest)
                continue
            if st.last_seq > seq:
                pos = st.last_pos if st.last_seq == seq + 1 else None
                self._find("not_sealed_by_writer", stream, st.last_seq, *(pos or (None, None)),
                           f"the log runs to seq {st.last_seq} but the writer sealed up to "
                           f"seq {seq}: records after it were not written by the writer")
            else:
                self._find("head_mismatch", stream, st.last_seq, *(st.last_pos or (None, None)),
                           f"writer head is seq {seq} {digest.hex()[:16]}…, the log "
                           f"ends at seq {st.last_seq} {st.last_digest.hex()[:16]}…")

    def counts(self) -> Counter:
        return Counter(f.kind for f in self.findings)


def compare_projection(index: dict[tuple[int, int], Indexed],
                       rows: Iterable[tuple[tuple[Any, ...], tuple[Any, ...] | None]],
                       stream: str | None = None,
                       window: dict[int, int] | None = None) -> list[Finding]:
    """Compare projection rows with the log.

    With ``window`` (partition -> end offset), only positions below the end are compared:
    the log was read that far and the projector has got that far; the rest is lag, not damage.

    ``rows`` yields ``(row, recomputed)``: a ``records`` row as stored (RECORD_COLUMNS order)
    and the row recomputed from its own ``record_bytes`` (None if they do not decode). A row
    is altered if it differs from its recomputation or its bytes differ from the log's message
    at the same partition/offset; missing and extra rows are found by position.
    """
    findings = []
    seen: set[tuple[int, int]] = set()
    for row, recomputed in rows:
        partition, offset, row_stream, row_seq = row[0], row[1], row[2], row[3]
        if stream is not None and row_stream != stream:
            continue
        key = (partition, offset)
        if window is not None and offset >= window.get(partition, 0):
            continue
        seen.add(key)
        logged = index.get(key)
        where = (row_stream, row_seq, partition, offset)
        if logged is None:
            findings.append(Finding("projection_extra", *where,
                                    "the projection has a row for a log position that holds "
                                    "no such record"))
            continue
        if hashlib.sha256(bytes(row[-1])).digest() != logged.value_sha256:
            findings.append(Finding("projection_altered", *where,
                                    "the row's record bytes differ from the log's"))
        elif recomputed is None or tuple(_norm(v) for v in row) != tuple(
                _norm(v) for v in recomputed):
            diff = _differing(row, recomputed)
            findings.append(Finding("projection_altered", *where,
                                    f"row columns differ from the record: {diff}"))
    for key, logged in sorted(index.items()):
        if window is not None and key[1] >= window.get(key[0], 0):
            continue
        if key not in seen and (stream is None or logged.stream == stream):
            findings.append(Finding("projection_missing", logged.stream, logged.seq, key[0],
                                    key[1], "the log has this record; the projection does not"))
    return findings


def _norm(v: Any) -> Any:
    return bytes(v) if isinstance(v, (bytearray, memoryview)) else v


def _differing(row, recomputed) -> str:
    from projections.rows import RECORD_COLUMNS

    if recomputed is None:
        return "record_bytes do not decode"
    names = [n for n, a, b in zip(RECORD_COLUMNS, row, recomputed) if _norm(a) != _norm(b)]
    return ", ".join(names)
