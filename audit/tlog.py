"""The audit of each stream's Merkle tree against signed and witnessed checkpoints (pure).

The chain audit (:mod:`audit.verify`) recomputes every digest and link from the log, but a
log rewritten from seq 1 with a recomputed chain passes it: whoever controls Kafka can do
that. What they cannot redo is a checkpoint that has left their hands. :class:`TreeAudit`
rebuilds every stream's RFC 9162 tree from the log's records (leaf ``seq - 1`` =
``merkle.record_leaf_hash`` of the message value, as the writer and the projector build it)
and compares it with:

- every note on ``evidence.checkpoints`` (the log's checkpoints and the cosigned copies the
  API took from witnesses): it must be signed by the log key (``checkpoint_invalid``
  otherwise) and its root must be the recomputed root at its size (``checkpoint_mismatch``,
  also when the log has fewer records than the checkpoint's size);
- each **witnessed** checkpoint the auditor holds (from a witness's ``GET /checkpoints/...``
  or a note file it kept), with the witnesses' cosignatures verified: its root must be the
  recomputed root at its size. When it is not, the stream was rewritten (or truncated) after
  a witness saw it: ``rewritten_since_witnessed``. This is what catches a rewrite that also
  replaced ``evidence.checkpoints``: the witness's copy is out of the operator's reach;
- each refusal a witness recorded for a checkpoint the **log key signed**: the log signed a
  checkpoint that is not consistent with one it had signed before (``witness_refused``), the
  mark of a rewrite or of a split view. A refusal of a note the log did not sign accuses
  nobody and is not a finding.

Roots are taken while the records stream past (a :class:`~evidence_contract.merkle.CompactRange`
per stream, O(log n) memory), so every size to check must be known before the log is read:
the checkpoints topic, the witnesses and the files are read first. That order is also the
safe one on a live log: a checkpoint is committed with the records it covers, so the log read
afterwards has them all.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterable

from evidence_contract.chain import Finding
from evidence_contract.merkle import CompactRange, compose_leaf_input, leaf_hash
from evidence_contract.note import Checkpoint, NoteError, VerifierKey, format_vkey
from evidence_contract.tlog import open_stream_checkpoint
from projections.tlog import CHECKPOINT_INVALID, CHECKPOINT_MISMATCH

__all__ = ["CHECKPOINT_INVALID", "CHECKPOINT_MISMATCH", "KINDS", "REWRITTEN_SINCE_WITNESSED",
           "WITNESS_REFUSED", "TreeAudit", "Witnessed", "open_witnessed"]

REWRITTEN_SINCE_WITNESSED = "rewritten_since_witnessed"
WITNESS_REFUSED = "witness_refused"
KINDS = (CHECKPOINT_INVALID, CHECKPOINT_MISMATCH, REWRITTEN_SINCE_WITNESSED, WITNESS_REFUSED)
"""The tree audit's finding kinds (the first two are the projector's, with the same meaning)."""


@dataclass(frozen=True)
class Witnessed:
    """A checkpoint someone other than the log vouches for, already verified."""

    source: str                      # "witness <url>" or "file <path>"
    stream: str
    checkpoint: Checkpoint
    cosigners: tuple[str, ...]       # witness keys whose cosignatures verified


def open_witnessed(data: bytes, log_key: VerifierKey, witness_keys: Iterable[VerifierKey],
                   source: str, require_cosignature: bool) -> Witnessed:
    """Verify a witnessed note: the log key's signature, and the cosignature of at least one
    of ``witness_keys`` when ``require_cosignature``. ``NoteError`` when it does not verify."""
    keys = list(witness_keys)
    cp, note, stream = open_stream_checkpoint(data, log_key, None, keys)
    log_id = (log_key.name, log_key.key_id)
    cosigners = tuple(s.name for s in note.verified if (s.name, s.key_id) != log_id)
    if require_cosignature and not cosigners:
        known = ", ".join(format_vkey(k) for k in keys) or "none given"
        raise NoteError(f"{source}: the checkpoint has no valid cosignature of a witness key "
                        f"you gave ({known})")
    return Witnessed(source, stream, cp, cosigners)


@dataclass
class _Claim:
    kind: str                         # the finding kind when the root is not the log's
    stream: str
    checkpoint: Checkpoint
    where: str


@dataclass
class TreeAudit:
    """Feed it checkpoints, witnessed checkpoints and refusals first, then every record (in
    log order, through :meth:`add_record`), then call :meth:`finish`."""

    log_key: VerifierKey
    stream_filter: str | None = None
    findings: list[Finding] = field(default_factory=list)
    trees: dict[str, CompactRange] = field(default_factory=dict)
    checkpoints: dict[str, int] = field(default_factory=dict)   # stream -> notes checked
    witnessed: list[Witnessed] = field(default_factory=list)
    refusals_seen: int = 0
    deployment: Any = None
    """The deployment tree's audit (:class:`audit.logtree.DeploymentAudit`), when the tree
    topic was read; it sets itself here."""

    def __post_init__(self) -> None:
        self._claims: list[_Claim] = []
        self._wanted: dict[str, set[int]] = {}
        self._roots: dict[tuple[str, int], bytes] = {}

    def _want(self, claim: _Claim) -> None:
        self._claims.append(claim)
        self._wanted.setdefault(claim.stream, set()).add(claim.checkpoint.size)

    def _skip(self, stream: str | None) -> bool:
        return self.stream_filter is not None and stream != self.stream_filter

    def add_checkpoint_message(self, partition: int, offset: int, key: bytes | None,
                               value: bytes | None) -> None:
        """One message of ``evidence.checkpoints`` (a checkpoint or a cosigned copy)."""
        stream = key.decode("utf-8", errors="replace") if key else None
        if self._skip(stream):
            return
        where = f"evidence.checkpoints {partition}:{offset}"
        try:
            cp, _note, named = open_stream_checkpoint(value or b"", self.log_key, stream)
        except NoteError as e:
            self.findings.append(Finding(
                CHECKPOINT_INVALID, stream, None,
                f"{where}: not a checkpoint of this stream signed by the log key "
                f"{self.log_key.name}+{self.log_key.key_id:08x}: {e}"))
            return
        self.checkpoints[named] = self.checkpoints.get(named, 0) + 1
        self._want(_Claim(CHECKPOINT_MISMATCH, named, cp, where))

    def add_witnessed(self, w: Witnessed) -> None:
        if self._skip(w.stream):
            return
        self.witnessed.append(w)
        cosigned = ", ".join(w.cosigners) or "no witness key given"
        self._want(_Claim(REWRITTEN_SINCE_WITNESSED, w.stream, w.checkpoint,
                          f"the checkpoint {w.source} holds (cosigned by {cosigned})"))

    def add_entry_claim(self, stream: str, checkpoint: Checkpoint, where: str) -> _Claim | None:
        """An entry of the deployment tree: a stream checkpoint the log key signed. Its root
        must be the log's at its size (``checkpoint_mismatch``; ``rewritten_since_witnessed``
        once a witness cosigned a deployment checkpoint that covers it: the caller changes
        the returned claim's kind). None when the stream is filtered out."""
        if self._skip(stream):
            return None
        claim = _Claim(CHECKPOINT_MISMATCH, stream, checkpoint, where)
        self._want(claim)
        return claim

    def add_refusal(self, source: str, refusal: dict[str, Any]) -> None:
        """A record of a witness's ``GET /refusals``: a finding when the log signed the note."""
        try:
            cp, _note, stream = open_stream_checkpoint(refusal.get("note") or "", self.log_key)
        except NoteError:
            return  # not the log's note: it says nothing about the log
        if self._skip(stream):
            return
        self.refusals_seen += 1
        last = refusal.get("last_cosigned") or {}
        self.findings.append(Finding(
            WITNESS_REFUSED, stream, cp.size,
            f"{source} refused the log-signed checkpoint of size {cp.size} (root "
            f"{cp.root_hash.hex()[:16]}…), {refusal.get('kind')}: {refusal.get('reason')}"
            + (f"; it had cosigned size {last.get('size')} root {str(last.get('root'))[:16]}…"
               if last else "")))
        self._wanted.setdefault(stream, set()).add(cp.size)

    def add_record(self, stream: str, seq: int, record_digest: bytes, value: bytes) -> None:
        """A log record in log order; only the next seq of a stream extends its tree (gaps,
        duplicates and forks are the chain audit's findings)."""
        if self._skip(stream):
            return
        tree = self.trees.get(stream)
        if tree is None:
            tree = self.trees[stream] = CompactRange()
        if seq != tree.size + 1:
            return
        tree.append(leaf_hash(compose_leaf_input(record_digest, hashlib.sha256(value).digest())))
        if tree.size in self._wanted.get(stream, ()):
            self._roots[(stream, tree.size)] = tree.root()

    def root(self, stream: str, size: int) -> bytes | None:
        return self._roots.get((stream, size))

    def finish(self) -> list[Finding]:
        """Compare every claim with the recomputed trees; returns all findings."""
        for c in self._claims:
            size, claimed = c.checkpoint.size, c.checkpoint.root_hash
            have = self.trees[c.stream].size if c.stream in self.trees else 0
            if size == 0:
                continue
            root = self._roots.get((c.stream, size))
            if root is None:
                self.findings.append(Finding(
                    c.kind, c.stream, size,
                    f"{c.where} is of size {size}, but the log holds {have} records of the "
                    f"stream: records it covered are gone"))
            elif root != claimed:
                self.findings.append(Finding(
                    c.kind, c.stream, size,
                    f"{c.where} has root {claimed.hex()[:16]}… at size {size}; the log's "
                    f"records give {root.hex()[:16]}…: the stream is not the one "
                    + ("the log signed" if c.kind == CHECKPOINT_MISMATCH else
                       "the witness saw: rewritten since")))
        if self.deployment is not None:
            self.findings += self.deployment.finish()
        return self.findings

    def summary(self) -> dict[str, Any]:
        streams = sorted(set(self.trees) | set(self.checkpoints)
                         | {w.stream for w in self.witnessed})
        return {
            "log_key": format_vkey(self.log_key),
            "streams": [{
                "stream": s,
                "tree_size": self.trees[s].size if s in self.trees else 0,
                "root": (self.trees[s].root().hex() if s in self.trees else None),
                "checkpoints_checked": self.checkpoints.get(s, 0),
                "witnessed": [{"source": w.source, "size": w.checkpoint.size,
                               "cosigners": list(w.cosigners)}
                              for w in self.witnessed if w.stream == s],
            } for s in streams],
            "witness_refusals": self.refusals_seen,
            "deployment": self.deployment.summary() if self.deployment is not None else None,
        }
