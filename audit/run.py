"""The audit, end to end: the log from offset 0, the writer's heads, then the projection."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from audit.verify import KINDS, Finding, LogAuditor, compare_projection
from topics import TopicNames


@dataclass
class AuditReport:
    streams: dict[str, int]                       # stream -> records in the log
    messages: int
    findings: list[Finding] = field(default_factory=list)
    projection_checked: bool = False

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
            "projection_checked": self.projection_checked,
        }


def _output_text() -> Callable | None:
    try:
        from gateway.adapters import output_text_for_body
    except ImportError:
        return None
    return output_text_for_body


def run_audit(bootstrap: str, names: TopicNames, database_url: str | None,
              views: str = "evidence", stream: str | None = None,
              progress: Callable[[int, int], None] | None = None) -> AuditReport:
    from audit.kafka_log import read_heads, read_topic

    auditor = LogAuditor(stream=stream, output_text=_output_text(),
                         keep_index=database_url is not None)
    for partition, offset, _key, value in read_topic(bootstrap, names.log, progress=progress):
        auditor.add(partition, offset, value)
    heads = read_heads(bootstrap, names.writer_state)
    if stream is not None:
        heads = {k: v for k, v in heads.items() if k == stream}
    auditor.check_heads(heads)
    report = AuditReport({s: st.records for s, st in auditor.streams.items()},
                         auditor.messages, list(auditor.findings))
    if database_url is not None:
        from audit.projection_db import projection_rows

        report.findings += compare_projection(
            auditor.index or {}, projection_rows(database_url, views, stream), stream)
        report.projection_checked = True
    return report
