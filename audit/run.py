"""The audit, end to end: the log from offset 0, the writer's heads, then the projection.

Order matters on a live system. The log is read first, to the end each partition had when the
read started; the writer's heads are read after it. The writer commits a stream's records and
its head in one Kafka transaction, so every record in the log snapshot has its head in what is
read next: a log tail beyond the writer's head is a record the writer did not seal. A head
beyond the log tail is only a transaction committed meanwhile: the log is read on from where it
stopped, and the heads again, until they agree (a few rounds at most).

The projection is compared with the log up to where both have got: rows past the log snapshot
and log records past the projector's stored position are not compared (``projection_lag``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from audit.verify import KINDS, Finding, LogAuditor, compare_projection
from topics import TopicNames

_CATCH_UP_ROUNDS = 5


@dataclass
class AuditReport:
    streams: dict[str, int]                       # stream -> records in the log
    messages: int
    findings: list[Finding] = field(default_factory=list)
    projection_checked: bool = False
    projection_lag: int = 0                       # log records the projector has not reached
    output_checks: dict[str, int] = field(default_factory=dict)
    """Sealed output digests checked, by extraction state (``evidence_contract.outputs``)."""

    @property
    def clean(self) -> bool:
        return not self.findings

    def by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.findings:
            out[f.kind] = out.get(f.kind, 0) + 1
        return {k: out[k] for k in KINDS if k in out}

    def to_dict(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "messages": self.messages,
            "streams": [{"stream": s, "records": n,
                         "findings": sum(1 for f in self.findings if f.stream == s)}
                        for s, n in sorted(self.streams.items())],
            "findings_by_kind": self.by_kind(),
            "findings": [f.to_dict() for f in self.findings],
            "output_digest_checks": self.output_checks,
            "projection_checked": self.projection_checked,
            "projection_lag": self.projection_lag,
        }



def run_audit(bootstrap: str, names: TopicNames, database_url: str | None,
              views: str = "evidence", stream: str | None = None,
              progress: Callable[[int, int], None] | None = None) -> AuditReport:
    from audit.kafka_log import read_heads, read_topic

    auditor = LogAuditor(stream=stream, keep_index=database_url is not None)
    ends: dict[int, int] = {}
    for partition, offset, _key, value in read_topic(bootstrap, names.log, progress=progress,
                                                     ends=ends):
        auditor.add(partition, offset, value)
    for _round in range(_CATCH_UP_ROUNDS):
        heads = read_heads(bootstrap, names.writer_state)
        if stream is not None:
            heads = {k: v for k, v in heads.items() if k == stream}
        behind = [s for s, (seq, _d) in heads.items()
                  if seq > (auditor.streams[s].head.seq if s in auditor.streams else 0)]
        if not behind:
            break
        more: dict[int, int] = {}
        for partition, offset, _key, value in read_topic(bootstrap, names.log,
                                                         start=dict(ends), ends=more):
            auditor.add(partition, offset, value)
        ends = more
    auditor.check_heads(heads)
    report = AuditReport({s: st.records for s, st in auditor.streams.items()},
                         auditor.messages, list(auditor.findings),
                         output_checks=dict(auditor.output_checks))
    if database_url is not None:
        from audit.projection_db import projected_positions, projection_rows

        projected = projected_positions(database_url, views, names.log)
        # Compare offsets below both the log snapshot's end and the projector's position
        # (a partition the projector has no position for is expected in full).
        window = {p: min(end, projected.get(p, end)) for p, end in ends.items()}
        index = auditor.index or {}
        report.projection_lag = sum(1 for (p, o) in index if o >= window.get(p, 0))
        report.findings += compare_projection(
            index, projection_rows(database_url, views, stream), stream, window=window)
        report.projection_checked = True
    return report
