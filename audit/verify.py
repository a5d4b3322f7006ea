"""The verification core of the audit (pure): feed it log messages in offset order, it
recomputes every digest and link and names every finding.

Checks per stream: every message decodes as an EvidenceRecord; the stream's head advances by
:func:`evidence_contract.chain.advance`, the chain step the writer and the projector take
too, which recomputes every ``record_digest`` over the body bytes *as stored* and names gaps,
duplicates, seqs out of order and broken links; the stored body is canonical Avro;
``content_key`` recomputes from the request bytes where they are kept, ``response_digest``
from the response, ``output_digest`` from the response's output text as the contract defines
it per wire format (:func:`evidence_contract.outputs.extract`; a wire format it does not
define is an ``output_digest_unverifiable`` finding, never a skipped check),
``input_digest``, ``prompt_digest`` and each ``chunk_digest`` from their bytes where kept, and
``request_length`` / ``response_length`` are the lengths of the bytes kept; no two records,
in any stream, share an ``event_id`` (``duplicate_event_id``). Then the chain's
last record per stream is compared with the writer's own heads (``evidence.writer-state``):
a record that a rogue producer appended at the tail, bypassing the writer, is not in them.

An encrypted record (contract 2.1, ``encryption`` set) keeps envelopes and keyed
commitments, which nobody can recompute without the subject's data key: its shape is checked
instead, the writer's own rule (:func:`evidence_contract.envelope.encrypted_body_problem`:
scheme, key id, every content field an envelope of that key, the lengths those of the
plaintexts; ``bad_encryption``), and its chain, ``record_digest`` and Merkle leaf as any
record's. One whose key id the auditor was told is erased (``erased_keys``, from the log's
signed erasure receipts) is counted per stream as ``erased`` (not a finding: the content is
unrecoverable by design, its proofs still hold).

A record mapped from telemetry (contract 2.2, ``telemetry`` set) has no request or response
bytes: its ``content_key`` is its ``telemetry.span_digest``, over the span's bytes, which the
record does not keep, so neither that digest nor ``otlp_digest`` can be recomputed here. What
is checked is what the writer checked (:func:`evidence_contract.telemetry.telemetry_problem`:
``content_key`` equal to ``span_digest``, a trace, no request or response bytes, HASH_ONLY, no
encryption, a known dialect; ``bad_telemetry``), ``input_digest`` over the messages it keeps,
and the chain as any record's; a trace context is checked as the writer does (``bad_trace``).
Such records are counted per stream as ``mapped``.

Finding kinds are stable strings (``KINDS``), for reports and exit codes; findings are
:class:`evidence_contract.chain.Finding`.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import urlsplit

from evidence_contract import (
    DecodeError,
    GENESIS,
    HEADER_SIZE,
    canonical_body_bytes,
    chain,
    chunk_digest,
    content_key,
    input_digest,
    output_digest,
    prompt_digest,
    response_digest,
    split_record,
)
from evidence_contract.chain import DUPLICATE, Finding, Head, Link, Sighting, advance, \
    event_id_findings
from evidence_contract.outputs import KINDS as FORMATS
from evidence_contract.envelope import encrypted_body_problem
from evidence_contract.telemetry import is_mapped, telemetry_problem, trace_problem
from evidence_contract.outputs import EXTRACTED, NO_TEXT, UNKNOWN_FORMAT, Extraction, extract

from audit.erasures import ERASURE_RECEIPT_INVALID
from audit.tlog import KINDS as TREE_KINDS

__all__ = ["KINDS", "OUTPUT_DIGEST_UNVERIFIABLE", "Finding", "Indexed", "LogAuditor",
           "StreamState", "compare_projection", "extract_output"]

OUTPUT_DIGEST_UNVERIFIABLE = "output_digest_unverifiable"

KINDS = chain.KINDS + (
    "non_canonical_body", "content_key_mismatch", "response_digest_mismatch",
    "output_digest_mismatch", OUTPUT_DIGEST_UNVERIFIABLE, "input_digest_mismatch",
    "prompt_digest_mismatch", "chunk_digest_mismatch", "length_mismatch", "bad_encryption",
    "bad_trace", "bad_telemetry", "not_sealed_by_writer", "head_mismatch",
    "projection_missing", "projection_extra", "projection_altered", ERASURE_RECEIPT_INVALID,
) + TREE_KINDS
"""The chain step's kinds, then the body, writer and projection checks', then the tree
audit's against signed and witnessed checkpoints (:mod:`audit.tlog`)."""


def extract_output(body: Mapping[str, Any]) -> tuple[Extraction, str | None]:
    """The output text of a recorded body as the contract extracts it
    (:func:`evidence_contract.outputs.extract`) and, when its state is ``UNKNOWN_FORMAT``,
    why: "cannot be recomputed ...", naming the endpoint."""
    endpoint = body["provider"]["endpoint"]
    try:
        found = extract(body)
    except ValueError as e:  # urlsplit: an endpoint that is not a URL at all
        return (Extraction(UNKNOWN_FORMAT, None),
                f"cannot be recomputed: the endpoint {endpoint!r} does not parse ({e})")
    if found.state != UNKNOWN_FORMAT:
        return found, None
    return found, (f"cannot be recomputed for this wire format: the endpoint path "
                   f"{urlsplit(endpoint).path or '/'!r} is none the record contract defines "
                   f"({', '.join(FORMATS)})")


@dataclass
class StreamState:
    """One stream as the auditor follows it: the chain head (``chain.advance``'s), records
    seen, the tail record's position and predecessor, and the forks of the tail seq."""

    head: Head
    records: int = 0
    encrypted: int = 0
    """Records sealed under a subject's key (contract 2.1 ``encryption``)."""
    erased: int = 0
    """Of those, records whose key the log's erasure receipts say was destroyed."""
    mapped: int = 0
    """Records mapped from telemetry (contract 2.2 ``telemetry``), not captured at the wire."""
    last_pos: tuple[int, int] | None = None
    prev_of_last: bytes = GENESIS
    # Other copies of the tail seq that link to the same predecessor: a fork. The writer only
    # ever continues its own chain, so the copy the next record (or the writer's head) links
    # to is the writer's, and the other is not. record_digest -> (partition, offset).
    forks: dict[bytes, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Indexed:
    """What the projection comparison needs of a log record, kept small."""

    stream: str
    seq: int
    value_sha256: bytes


class LogAuditor:
    """Accumulates per-stream chain state and findings over log messages in offset order.

    ``output_checks`` counts the sealed output digests checked, by how the output text came
    out of the response (``EXTRACTED``, ``NO_TEXT``, ``UNKNOWN_FORMAT``).
    """

    def __init__(self, stream: str | None = None, keep_index: bool = False,
                 erased_keys: set[str] | None = None):
        self.stream_filter = stream
        # Key ids (32 hex) that erasure receipts name: their records count as erased.
        self.erased_keys: set[str] = set(erased_keys or ())
        self.streams: dict[str, StreamState] = {}
        self.findings: list[Finding] = []
        self.messages = 0
        self.output_checks: Counter = Counter({EXTRACTED: 0, NO_TEXT: 0, UNKNOWN_FORMAT: 0})
        self.index: dict[tuple[int, int], Indexed] | None = {} if keep_index else None
        # event_id -> the first record sealed with it (Sighting.order), over the whole log:
        # a second one in any stream is a duplicate_event_id finding. A stream's own audit
        # (stream_filter) sees only that stream, and checks it within the stream.
        self.first_sealed: dict[str, Sighting] = {}
        # Called with (stream, seq, record_digest, value) for every record of the audited
        # streams, in log order: the tree audit (audit.tlog.TreeAudit.add_record) rides along
        # without decoding the record again.
        self.on_record: Callable[[str, int, bytes, bytes], None] | None = None

    def _find(self, kind: str, stream, seq, partition, offset, detail: str) -> None:
        self.findings.append(Finding(kind, stream, seq, detail, partition, offset))

    def add(self, partition: int, offset: int, value: bytes | None) -> None:
        self.messages += 1
        try:
            stored_body, record = split_record(value or b"")
        except DecodeError as e:
            if self.stream_filter is None:
                self.findings.append(chain.undecodable(str(e), partition, offset))
            return
        body = record["body"]
        link = Link.of(record, stored_body)
        stream, seq, prev = link.stream, link.seq, link.prev_digest
        if self.stream_filter is not None and stream != self.stream_filter:
            return
        if self.index is not None:
            self.index[(partition, offset)] = Indexed(stream, seq,
                                                      hashlib.sha256(value).digest())
        st = self.streams.get(stream)
        if st is None:
            st = self.streams[stream] = StreamState(Head.genesis(stream))
        st.records += 1
        where = (stream, seq, partition, offset)

        before = st.head
        if seq == before.seq > 0 and prev == st.prev_of_last:
            st.forks[link.record_digest] = (partition, offset)
        elif seq == before.seq + 1 and prev != before.digest and prev in st.forks:
            # The chain continues from another copy of the previous seq: that copy is the
            # writer's, the one the auditor had taken as the tail is not.
            self._abandon(stream, st, prev)
        st.head, finding = advance(st.head, link)
        if self.on_record is not None:
            self.on_record(stream, seq, link.record_digest, bytes(value))
        if finding is not None:
            self.findings.append(finding.at(partition, offset))
        if finding is None or finding.kind != DUPLICATE:
            self._sight(Sighting(link.event_id, stream, seq, link.occurred_at, partition,
                                 offset))
        if st.head.seq > before.seq:
            st.last_pos, st.prev_of_last, st.forks = (partition, offset), prev, {}
        # The body's own contract version (the record's header): a 2.0 or 1.0 body is
        # canonical under its schema, not under the current one.
        if canonical_body_bytes(body, bytes(value[2:HEADER_SIZE])) != stored_body:
            self._find("non_canonical_body", *where,
                       "stored body bytes are not the canonical Avro binary of the body")
        # Contract 2.2: the writer's own rules of a trace and of a mapped capture.
        for kind, problem in (("bad_trace", trace_problem(body)),
                              ("bad_telemetry", telemetry_problem(body))):
            if problem:
                self._find(kind, *where, problem)
        st.mapped += is_mapped(body)
        if body.get("encryption") is not None:
            st.encrypted += 1
            if body["encryption"].get("key_id") in self.erased_keys:
                st.erased += 1
            problem = encrypted_body_problem(body)
            if problem:
                self._find("bad_encryption", *where, problem)
            return
        self._check_body(body, where)

    def _sight(self, s: Sighting) -> None:
        first = self.first_sealed.get(s.event_id)
        if first is None:
            self.first_sealed[s.event_id] = s
            return
        self.findings += event_id_findings([first], [s])
        if s.order < first.order:
            self.first_sealed[s.event_id] = s

    def _abandon(self, stream: str, st: StreamState, writer_digest: bytes) -> None:
        """Two copies of the tail seq link to the same predecessor; the writer's chain (its
        next record, or its head) continues from ``writer_digest``: name the other."""
        pos = st.last_pos or (None, None)
        seq = st.head.seq
        at = st.forks[writer_digest]
        self._find("not_sealed_by_writer", stream, seq, *pos,
                   f"seq {seq} has two copies; the writer's chain continues from the copy at "
                   f"{at[0]}:{at[1]}, so this one was not sealed by the writer")
        st.head = replace(st.head, digest=writer_digest)
        st.last_pos = st.forks.pop(writer_digest)

    def _check_body(self, body: dict[str, Any], where: tuple) -> None:
        # A 1.0 body has no input_bytes, prompt_bytes, chunk_bytes, request_length or
        # response_length (contract 2.0 added them): there is nothing of those to check.
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
            if body.get(kept) is not None and (body[digest] is None
                                           or fn(body[kept]) != bytes(body[digest])):
                self._find(f"{digest}_mismatch", *where,
                           f"{digest} does not recompute from {kept}")
        for i, chunk in enumerate(body["retrieval"]):
            if chunk.get("chunk_bytes") is not None and \
                    chunk_digest(chunk["chunk_bytes"]) != bytes(chunk["chunk_digest"]):
                self._find("chunk_digest_mismatch", *where,
                           f"retrieval[{i}].chunk_digest does not recompute from its chunk_bytes")
        for name, data in (("request_length", body["request_bytes"]),
                           ("response_length", body["response_bytes"])):
            if data is not None and name in body and body[name] != len(data):
                self._find("length_mismatch", *where,
                           f"{name} is {body[name]} but the record keeps {len(data)} bytes")
        # Like response_digest, output_digest is recomputed where the response is kept (a
        # truncated record keeps the digests and drops the bytes).
        if body["output_digest"] is not None and body["response_bytes"] is not None:
            self._check_output(body, where)

    def _check_output(self, body: dict[str, Any], where: tuple) -> None:
        found, reason = extract_output(body)
        self.output_checks[found.state] += 1
        if reason is not None:
            self._find(OUTPUT_DIGEST_UNVERIFIABLE, *where, f"output_digest {reason}")
        elif found.state == NO_TEXT:
            self._find("output_digest_mismatch", *where,
                       f"the record seals an output_digest but its {found.kind} response "
                       f"holds no output text")
        elif output_digest(found.text) != bytes(body["output_digest"]):
            self._find("output_digest_mismatch", *where,
                       "output_digest does not recompute from the response's output text")

    def check_heads(self, heads: dict[str, tuple[int, bytes]]) -> None:
        """Compare each stream's chain tail with the writer's recorded head."""
        for stream, st in sorted(self.streams.items()):
            head = heads.get(stream)
            tail = st.head
            if head is None:
                self._find("not_sealed_by_writer", stream, tail.seq, None, None,
                           "the writer has no head for this stream: its records did not come "
                           "from the writer")
                continue
            seq, digest = head
            digest = bytes(digest)
            if (seq, digest) == (tail.seq, tail.digest):
                continue
            if seq == tail.seq and digest in st.forks:
                self._abandon(stream, st, digest)
                continue
            if tail.seq > seq:
                pos = st.last_pos if tail.seq == seq + 1 else None
                self._find("not_sealed_by_writer", stream, tail.seq, *(pos or (None, None)),
                           f"the log runs to seq {tail.seq} but the writer sealed up to "
                           f"seq {seq}: records after it were not written by the writer")
            else:
                self._find("head_mismatch", stream, tail.seq, *(st.last_pos or (None, None)),
                           f"writer head is seq {seq} {digest.hex()[:16]}…, the log "
                           f"ends at seq {tail.seq} {tail.digest.hex()[:16]}…")

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
        where = (row_stream, row_seq)
        if logged is None:
            findings.append(Finding("projection_extra", *where,
                                    "the projection has a row for a log position that holds "
                                    "no such record", *key))
            continue
        if hashlib.sha256(bytes(row[-1])).digest() != logged.value_sha256:
            findings.append(Finding("projection_altered", *where,
                                    "the row's record bytes differ from the log's", *key))
        elif recomputed is None or tuple(_norm(v) for v in row) != tuple(
                _norm(v) for v in recomputed):
            diff = _differing(row, recomputed)
            findings.append(Finding("projection_altered", *where,
                                    f"row columns differ from the record: {diff}", *key))
    for key, logged in sorted(index.items()):
        if window is not None and key[1] >= window.get(key[0], 0):
            continue
        if key not in seen and (stream is None or logged.stream == stream):
            findings.append(Finding("projection_missing", logged.stream, logged.seq,
                                    "the log has this record; the projection does not", *key))
    return findings


def _norm(v: Any) -> Any:
    return bytes(v) if isinstance(v, (bytearray, memoryview)) else v


def _differing(row, recomputed) -> str:
    from projections.rows import RECORD_COLUMNS

    if recomputed is None:
        return "record_bytes do not decode"
    names = [n for n, a, b in zip(RECORD_COLUMNS, row, recomputed) if _norm(a) != _norm(b)]
    return ", ".join(names)
