"""The audit, end to end: the log from offset 0, the writer's heads, then the projection.

Order matters on a live system. The log is read first, to the end each partition had when the
read started; the writer's heads are read after it. The writer commits a stream's records and
its head in one Kafka transaction, so every record in the log snapshot has its head in what is
read next: a log tail beyond the writer's head is a record the writer did not seal. A head
beyond the log tail is only a transaction committed meanwhile: the log is read on from where it
stopped, and the heads again, until they agree (a few rounds at most).

The projection is compared with the log up to where both have got: rows past the log snapshot
and log records past the projector's stored position are not compared (``projection_lag``).

With a :class:`~audit.tlog.TreeAudit` (``trees``, which holds the log key and the witnessed
checkpoints and refusals the caller fetched), ``evidence.checkpoints`` is read *before* the
log, so every checkpoint's records are in the log snapshot, and each stream's Merkle tree is
rebuilt while the log is read and compared with every signed and witnessed checkpoint.

:func:`audit_projections` compares several projections (a rebuild's two generations) with
one read of the log, the same way.

The erasure receipts (``evidence.erasures``, :mod:`audit.erasures`) are read before the log
too, verified with the log key when the tree audit has one: each stream reports how many of
its records are sealed under a key that was erased (``erased_records``). That is not a
finding: the chain, digests and proofs of an erased record are checked like any other's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from audit.erasures import Erasures
from audit.tlog import TreeAudit
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
    trees: dict[str, Any] | None = None
    """The tree audit's summary (:meth:`audit.tlog.TreeAudit.summary`), None when not run."""
    encrypted: dict[str, int] = field(default_factory=dict)
    """stream -> records sealed under a subject's key (contract 2.1)."""
    erased: dict[str, int] = field(default_factory=dict)
    """stream -> of those, records whose key an erasure receipt names (not findings)."""
    erasures: dict[str, Any] | None = None
    """The receipts read (:meth:`audit.erasures.Erasures.summary`), None when not read."""

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
                         "findings": sum(1 for f in self.findings if f.stream == s),
                         "encrypted_records": self.encrypted.get(s, 0),
                         "erased_records": self.erased.get(s, 0)}
                        for s, n in sorted(self.streams.items())],
            "findings_by_kind": self.by_kind(),
            "findings": [f.to_dict() for f in self.findings],
            "output_digest_checks": self.output_checks,
            "projection_checked": self.projection_checked,
            "projection_lag": self.projection_lag,
            "trees": self.trees,
            "erasures": self.erasures,
        }



def read_deployment_tree(bootstrap: str, names: TopicNames, trees: TreeAudit
                         ) -> Callable[[], None] | None:
    """Read the tree topic from offset 0 into a :class:`~audit.logtree.DeploymentAudit` of
    ``trees`` (before the log: its entries are claims about the streams); returns a
    ``catch_up()`` that reads on from where it stopped (for a witness that is ahead of this
    read), or None for a log made before the tree topic."""
    from audit.errors import AuditError, AuditKafkaError
    from audit.kafka_log import read_topic
    from audit.logtree import DeploymentAudit

    deploy = DeploymentAudit(trees)
    ends: dict[int, int] = {}

    def read(start: dict[int, int] | None) -> None:
        more: dict[int, int] = {}
        for _p, offset, _k, value, headers in read_topic(bootstrap, names.tree, start=start,
                                                         ends=more, with_headers=True):
            deploy.add_message(offset, value, headers)
        ends.clear()
        ends.update(more)

    try:
        read(None)
    except AuditKafkaError:
        raise
    except AuditError:  # no such topic: a log made before the deployment tree
        trees.deployment = None
        return None
    return lambda: read(dict(ends))


def run_audit(bootstrap: str, names: TopicNames, database_url: str | None,
              views: str = "evidence", stream: str | None = None,
              progress: Callable[[int, int], None] | None = None,
              trees: TreeAudit | None = None, redaction: Any = None) -> AuditReport:
    from audit.errors import AuditError
    from audit.kafka_log import read_heads, read_topic

    erasures = Erasures(log_key=trees.log_key if trees is not None else None)
    try:
        for partition, offset, _key, value in read_topic(bootstrap, names.erasures):
            erasures.add(partition, offset, value)
        erasures_read = True
    except AuditError:  # a stack made before erasures: no such topic, nothing erased
        erasures_read = False
    auditor = LogAuditor(stream=stream, keep_index=database_url is not None,
                         erased_keys=set(erasures.keys))
    if trees is not None:
        for partition, offset, key, value in read_topic(bootstrap, names.checkpoints):
            trees.add_checkpoint_message(partition, offset, key, value)
        auditor.on_record = trees.add_record
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
                         output_checks=dict(auditor.output_checks),
                         encrypted={s: st.encrypted for s, st in auditor.streams.items()},
                         erased={s: st.erased for s, st in auditor.streams.items()},
                         erasures=erasures.summary() if erasures_read else None)
    report.findings += erasures.findings
    if trees is not None:
        report.findings += trees.finish()
        report.trees = trees.summary()
    if database_url is not None:
        report.projection_lag, found = _projection_findings(
            auditor.index or {}, ends, database_url, names, views, stream, redaction)
        report.findings += found
        report.projection_checked = True
    return report


def _projection_findings(index: dict, ends: dict[int, int], database_url: str,
                         names: TopicNames, views: str, stream: str | None,
                         redaction: Any) -> tuple[int, list[Finding]]:
    """(log records not compared: past where the projection has got, the projection's
    findings) of ``views``' records compared with the log read to ``ends``."""
    from audit.projection_db import projected_positions, projection_rows

    projected = projected_positions(database_url, views, names.log)
    # Compare offsets below both the log snapshot's end and the projector's position
    # (a partition the projector has no position for is expected in full).
    window = {p: min(end, projected.get(p, end)) for p, end in ends.items()}
    lag = sum(1 for (p, o) in index if o >= window.get(p, 0))
    return lag, compare_projection(
        index, projection_rows(database_url, views, stream, redaction), stream, window=window)


def audit_projections(bootstrap: str, names: TopicNames, database_url: str,
                      schemas: list[str],
                      progress: Callable[[int, int], None] | None = None
                      ) -> dict[str, list[Finding]]:
    """Each of ``schemas`` (a projection generation's schema, or a views schema) compared
    with the log, read once from offset 0: its records rows, each recomputed with the
    redaction policy that schema records, below where both the log and its positions have
    got (what :func:`run_audit` does for the live projection). Only the projection's
    findings (``projection_missing``, ``projection_extra``, ``projection_altered``); the
    log's own are the same for every schema. What ``evidence projections rebuild`` asks
    when a rebuilt generation disagrees with the live one: which of them the log supports.
    """
    from audit.kafka_log import read_topic
    from audit.projection_db import recorded_redaction

    auditor = LogAuditor(keep_index=True)
    ends: dict[int, int] = {}
    for partition, offset, _key, value in read_topic(bootstrap, names.log, progress=progress,
                                                     ends=ends):
        auditor.add(partition, offset, value)
    found = {}
    for schema in schemas:
        _recorded, redaction = recorded_redaction(database_url, schema)
        found[schema] = _projection_findings(auditor.index or {}, ends, database_url, names,
                                             schema, None, redaction)[1]
    return found
