"""The audit of one stream from its projection alone (pure): what ``GET
/streams/{stream}/audit`` answers.

The rows' ``record_bytes`` (the log messages, verbatim) go through :class:`LogAuditor` in log
order, so every digest and link is recomputed; each row is compared with its own record bytes
(:func:`compare_projection`), so an edited, swapped or invented column is named; and the
projection's head for the stream is compared with the chain's tail, so a deleted last row is
found too. What this cannot see is a row deleted together with its bytes in the middle of the
chain *and* re-linked: the chain would not link. What it cannot see at all is the log itself:
`evidence audit` reads that.
"""

from __future__ import annotations

from typing import Any, Iterable

from audit.verify import KINDS, Finding, LogAuditor, compare_projection
from projections.rows import record_row
from evidence_contract import DecodeError


class StreamAudit:
    """Feed :meth:`add_rows` with ``records`` rows (``RECORD_COLUMNS`` order) in
    ``(log_partition, log_offset)`` order, in as many chunks as you like; then
    :meth:`check_head` and :meth:`to_dict`. Output digests are recomputed with the record
    contract's extraction and counted in ``to_dict()["output_digest_checks"]``.
    """

    def __init__(self, stream: str, erased_keys: set[str] | None = None,
                 redaction: Any = None) -> None:
        self.stream = stream
        # The policy the projection's rows were built with (projections.redact): each row is
        # recomputed with it, so a masked body is what the policy says, not an alteration.
        self.redaction = redaction
        # No stream filter: a row whose record bytes belong to another stream must be
        # audited, not skipped. ``erased_keys``: key ids the projection's erasures name.
        self.auditor = LogAuditor(keep_index=True, erased_keys=erased_keys)
        self.projection: list[Finding] = []
        self.rows = 0

    def add_rows(self, rows: Iterable[tuple[Any, ...]]) -> None:
        self.auditor.index = {}  # per chunk: each row is compared with its own bytes
        pairs = []
        for row in rows:
            self.rows += 1
            value = bytes(row[-1])
            self.auditor.add(row[0], row[1], value)
            try:
                recomputed = record_row(value, row[0], row[1], self.redaction)
            except DecodeError:
                recomputed = None
            pairs.append((row, recomputed))
        self.projection += compare_projection(self.auditor.index, pairs)

    def check_head(self, head: tuple[int, bytes] | None) -> None:
        """Compare the projection's head of the stream (seq, record_digest) with the tail."""
        st = self.auditor.streams.get(self.stream)
        tail = (st.head.seq, st.head.digest) if st else (0, b"")
        if head is None:
            if st is not None:
                self.auditor.findings.append(Finding(
                    "head_mismatch", self.stream, st.head.seq,
                    "the projection has rows for this stream but no head"))
            return
        seq, digest = head[0], bytes(head[1])
        if (seq, digest) != tail:
            pos = st.last_pos if st and st.last_pos else (None, None)
            self.auditor.findings.append(Finding(
                "head_mismatch", self.stream, tail[0],
                f"the projection's head is seq {seq} {digest.hex()[:16]}…, its rows end at "
                f"seq {tail[0]} {tail[1].hex()[:16] if tail[1] else '-'}…", *pos))

    @property
    def findings(self) -> list[Finding]:
        return [*self.auditor.findings, *self.projection]

    def to_dict(self) -> dict[str, Any]:
        findings = self.findings
        counts: dict[str, int] = {}
        for f in findings:
            counts[f.kind] = counts.get(f.kind, 0) + 1
        st = self.auditor.streams.get(self.stream)
        return {
            "stream": self.stream,
            "clean": not findings,
            "records": self.rows,
            "last_seq": st.head.seq if st else 0,
            "findings_by_kind": {k: counts[k] for k in KINDS if k in counts},
            "findings": [f.to_dict() for f in findings],
            "output_digest_checks": dict(self.auditor.output_checks),
            "encrypted_records": st.encrypted if st else 0,
            "erased_records": st.erased if st else 0,
        }
