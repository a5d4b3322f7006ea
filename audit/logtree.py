"""The audit of the deployment tree: the one log witnesses follow (docs/witnessing.md). Pure.

The tree topic (``<prefix>.tree``, one partition) holds the deployment tree's entries (every
stream checkpoint the writers signed, verbatim) and the deployment checkpoints the publisher
signed. :class:`DeploymentAudit` is fed that topic in offset order and

- rebuilds the deployment tree from the entries (leaf ``SHA-256(0x00 || entry)``) and checks
  every signed deployment checkpoint against it (``checkpoint_mismatch``, stream null);
- hands every entry that opens (a stream checkpoint the log key signed) to the
  :class:`~audit.tlog.TreeAudit` as a claim about its stream: its root must be the root the
  log's records give at its size. So a stream rewritten in the log after its checkpoint went
  into the deployment tree is found even when ``evidence.checkpoints`` was rewritten too;
- once a witness cosigned a deployment checkpoint of size ``N`` (:meth:`witnessed`: the
  auditor got the cosignature itself, :mod:`audit.witnesses`), every entry below ``N`` is a
  checkpoint the witness vouches for, and a mismatch there is ``rewritten_since_witnessed``;
- a witness's refusal (``422``: the log's tree is not an extension of the one it cosigned,
  or it holds a larger tree than the log has) is ``witness_refused`` (:meth:`refused`).

Reading the tree topic before the log keeps the audit's order safe on a live system: a
stream checkpoint is committed with the records it covers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from evidence_contract.chain import Finding
from evidence_contract.merkle import MerkleTree
from evidence_contract.note import Checkpoint, NoteError, parse_checkpoint, parse_note
from projections.logtree import Entry, LogCheckpointRow, LogCosignatureRow, decode_tree_message
from projections.logtree import entry_leaf_hash

from audit.tlog import CHECKPOINT_MISMATCH, REWRITTEN_SINCE_WITNESSED, WITNESS_REFUSED, TreeAudit

__all__ = ["DeploymentAudit", "SignedCheckpoint"]

Headers = Sequence[tuple[str, bytes | None]] | None


@dataclass(frozen=True)
class SignedCheckpoint:
    """A deployment checkpoint the log signed, as read from the tree topic."""

    size: int
    root: bytes
    note: bytes          # the log-signed note, verbatim (no cosignatures)
    offset: int


@dataclass
class DeploymentAudit:
    """Feed it the tree topic (:meth:`add_message`), ask the witnesses, then
    :meth:`finish` (which :meth:`TreeAudit.finish` calls)."""

    trees: TreeAudit
    leaves: list[bytes] = field(default_factory=list)
    signed: dict[tuple[int, bytes], SignedCheckpoint] = field(default_factory=dict)
    cosigned_in_log: dict[int, set[str]] = field(default_factory=dict)  # size -> witnesses
    witnessed_by: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._claims: list[tuple[int, Any]] = []   # (entry index, the TreeAudit claim)
        self._tree: MerkleTree | None = None
        self.trees.deployment = self

    @property
    def size(self) -> int:
        return len(self.leaves)

    def add_message(self, offset: int, value: bytes | None, headers: Headers) -> None:
        """One message of the tree topic, in offset order."""
        log_key = self.trees.log_key
        for item in decode_tree_message(offset, value, headers, log_key.name, log_key):
            if isinstance(item, Entry):
                self._add_entry(item)
            elif isinstance(item, LogCosignatureRow):
                self.cosigned_in_log.setdefault(item.tree_size, set()).add(item.witness)
            elif isinstance(item, LogCheckpointRow):
                # (size, root): a checkpoint and its cosigned copies are one; two roots
                # signed at one size are two, and at most one of them is the entries' tree.
                self.signed.setdefault((item.tree_size, bytes(item.root)), SignedCheckpoint(
                    item.tree_size, bytes(item.root), item.note, item.offset))
            else:  # a Finding: an entry or a checkpoint that does not open
                if not self.trees._skip(item.stream):
                    self.findings.append(item)
        self._tree = None

    def _add_entry(self, e: Entry) -> None:
        index = len(self.leaves)
        self.leaves.append(entry_leaf_hash(e.entry))
        if not e.stream or self.trees._skip(e.stream):
            return
        try:
            cp: Checkpoint = parse_checkpoint(parse_note(e.entry).text)
        except NoteError:
            return  # decode_tree_message reported it
        claim = self.trees.add_entry_claim(
            e.stream, cp, f"entry {index} of the deployment tree (tree topic offset {e.offset})")
        if claim is not None:
            self._claims.append((index, claim))

    # -- what the witnesses say --------------------------------------------------------------

    def tree(self) -> MerkleTree:
        if self._tree is None:
            self._tree = MerkleTree(self.leaves)
        return self._tree

    def latest_signed(self) -> SignedCheckpoint | None:
        """The largest deployment checkpoint the log signed whose root is the entries' tree's
        (the one to show a witness); None when there is none."""
        for cp in sorted(self.signed.values(), key=lambda c: c.size, reverse=True):
            if cp.size <= self.size and self.tree().root(cp.size) == cp.root:
                return cp
        return None

    def consistency_proof(self, old: int, new: int) -> list[bytes]:
        """The proof that the entries' tree of ``new`` extends the one of ``old`` (0 < old)."""
        return self.tree().consistency_proof(old, new) if old < new else []

    def witnessed(self, size: int, source: str, cosigners: Sequence[str]) -> None:
        """A witness cosigned the deployment checkpoint of ``size`` (to the auditor): every
        entry below it is a stream checkpoint the witness vouches for."""
        self.witnessed_by.append({"source": source, "size": size, "cosigners": list(cosigners)})
        by = ", ".join(cosigners) or "a witness whose key you did not give"
        for index, claim in self._claims:
            if index < size:
                claim.kind = REWRITTEN_SINCE_WITNESSED
                claim.where = (f"entry {index} of the deployment tree, which {source} cosigned "
                               f"at size {size} ({by})")

    def refused(self, source: str, size: int | None, detail: str) -> None:
        """A witness refused the log's deployment tree (a fork, or a rollback)."""
        self.findings.append(Finding(WITNESS_REFUSED, None, size, f"{source}: {detail}"))

    # -- the end -----------------------------------------------------------------------------

    def _check_signed(self, cp: SignedCheckpoint) -> None:
        if cp.size > self.size:
            self.findings.append(Finding(
                CHECKPOINT_MISMATCH, None, cp.size,
                f"the deployment checkpoint at tree topic offset {cp.offset} is of size "
                f"{cp.size}, but the tree topic holds {self.size} entries: entries it covered "
                f"are gone"))
            return
        root = self.tree().root(cp.size)
        if root != cp.root:
            self.findings.append(Finding(
                CHECKPOINT_MISMATCH, None, cp.size,
                f"the deployment checkpoint at tree topic offset {cp.offset} has root "
                f"{cp.root.hex()[:16]}… at size {cp.size}; the tree topic's entries give "
                f"{root.hex()[:16]}…"))

    def finish(self) -> list[Finding]:
        for cp in self.signed.values():
            self._check_signed(cp)
        return self.findings

    def summary(self) -> dict[str, Any]:
        latest = self.latest_signed()
        return {
            "entries": self.size,
            "root": self.tree().root().hex() if self.leaves else None,
            "signed_checkpoints": len(self.signed),
            "latest_signed_size": latest.size if latest else None,
            "latest_cosigned_in_log_by": (sorted(self.cosigned_in_log.get(latest.size, ()))
                                          if latest else []),
            "witnessed": self.witnessed_by,
        }
