"""Verification: anyone can recompute every digest and the chain from the log and schemas/.

- :class:`LogAuditor`, :func:`compare_projection`, :class:`Finding`, ``KINDS`` — the pure
  verification core (``audit.verify``).
- :func:`run_audit` / :class:`AuditReport` — the log from offset 0, the writer's heads, then
  the live projection (``audit.run``); ``evidence audit`` on the command line.
- :func:`audit_projections` — several projections (a rebuild's generations) against one
  read of the log: which of them the log supports (``evidence projections rebuild``).
- :class:`StreamAudit` — one stream re-verified from its projection rows
  (``GET /streams/{stream}/audit``).
- ``audit.range_run`` — one stream's range (``audit.range_spec``) audited from a verified
  checkpoint, reading only its records (``audit.range_audit``, pure): ``evidence audit
  --stream S --seq A..B``; ``audit.range_export`` — such a range as one bundle and its offline
  check (``evidence export``, ``evidence verify``).
- ``audit.export`` — one record with the ``printf``/``sha256sum`` commands that re-verify it
  (``evidence export``); ``audit.harness`` — the divergence harness (``evidence harness``,
  docs/harness.md).
"""

from audit.errors import AuditError
from audit.run import AuditReport, audit_projections, run_audit
from audit.stream_audit import StreamAudit
from audit.verify import KINDS, Finding, LogAuditor, compare_projection

__all__ = ["KINDS", "AuditError", "AuditReport", "Finding", "LogAuditor", "StreamAudit",
           "audit_projections", "compare_projection", "run_audit"]
