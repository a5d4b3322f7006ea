"""The monitor: checks the deployment log from its public read API alone (docs/witnessing.md).

A witness guarantees that everyone is shown one deployment tree, the list of every stream
checkpoint the log signed; it does not look inside the streams. The monitor does, with
nothing but what the log serves without a key (``GET <log>/checkpoint``, ``<log>/tile/...``,
``<log>/streams/<s>/tile/...``) and the keys it holds:

1. the deployment checkpoint is signed by the log key, origin exactly its name, and carries
   the cosignatures asked for (``min_witnesses`` of ``witness_keys``);
2. when the monitor checked a checkpoint before (``known``, kept between runs by the
   caller), the new one is not smaller, not another root at the same size, and extends it
   (a consistency proof computed from the served hash tiles and verified against both
   signed roots): else ``log_forked``;
3. every entry is read from the entry bundles and must hash to the signed root (a served
   entry that does not is refused as a whole: nothing is checked against a list that is not
   the witnessed one);
4. every entry must be a stream checkpoint the log key signed (``checkpoint_invalid``);
5. for every stream, all its checkpoints in the list are prefixes of one tree: two at one
   size must have one root, and each smaller one must be proved consistent with the
   stream's largest, by a proof computed from the stream's public hash tiles and verified
   against both signed roots (``stream_forked``). A stream rewritten under the same key and
   shown in the list shows here, whoever serves the tiles: a proof that verifies against
   two signed roots cannot be forged.

Pure but for ``fetch(path) -> bytes | None`` (``None``: the log answered 404), which the
shell gives (:mod:`cli.monitor`). Raises :class:`MonitorError` when the check cannot run (a
checkpoint that does not verify, missing cosignatures, tiles that do not lead to the root):
that is not a finding about a stream, but the log is not to be believed either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from evidence_contract.chain import Finding
from evidence_contract.errors import EvidenceError
from evidence_contract.merkle import ProofError, consistency_proof_from, verify_consistency
from evidence_contract.note import Checkpoint, NoteError, VerifierKey, format_vkey
from evidence_contract.tiles import TileError, TileReader
from evidence_contract.tlog import open_log_checkpoint, open_stream_checkpoint

__all__ = ["CHECKPOINT_INVALID", "LOG_FORKED", "STREAM_FORKED", "MonitorError",
           "MonitorReport", "monitor"]

CHECKPOINT_INVALID = "checkpoint_invalid"
LOG_FORKED = "log_forked"
STREAM_FORKED = "stream_forked"

Fetch = Callable[[str], "bytes | None"]
Progress = Callable[[int, int], None]


class MonitorError(EvidenceError):
    """The log could not be checked: it serves something that does not verify, or nothing."""


@dataclass
class MonitorReport:
    checkpoint: Checkpoint
    note: bytes
    cosigners: list[str]
    entries: int = 0
    streams: dict[str, dict[str, Any]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    known_size: int | None = None

    @property
    def clean(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "origin": self.checkpoint.origin,
            "size": self.checkpoint.size,
            "root": self.checkpoint.root_hash.hex(),
            "cosigners": self.cosigners,
            "checked_from_size": self.known_size,
            "entries": self.entries,
            "streams": [{"stream": s, **v} for s, v in sorted(self.streams.items())],
            "findings": [f.to_dict() for f in self.findings],
        }


def _get(fetch: Fetch, path: str) -> bytes:
    data = fetch(path)
    if data is None:
        raise MonitorError(f"the log serves no {path}")
    return data


def _reader(fetch: Fetch, prefix: str, size: int) -> TileReader:
    return TileReader(lambda path: _get(fetch, prefix + path), size)


def _consistent(reader: TileReader, first: int, first_root: bytes, second: int,
                second_root: bytes) -> str | None:
    """None when the tree of ``second`` with ``second_root`` extends ``first``'s, as proved
    from ``reader``'s tiles; else why not."""
    if first == second:
        return None if first_root == second_root else "two roots at one size"
    try:
        proof = consistency_proof_from(first, second, reader.hash_at)
        verify_consistency(first, second, proof, first_root, second_root)
    except (ProofError, TileError) as e:
        return str(e)
    return None


def monitor(fetch: Fetch, log_key: VerifierKey, witness_keys: list[VerifierKey] = (),
            min_witnesses: int | None = None, known: tuple[int, bytes] | None = None,
            stream: str | None = None, progress: Progress | None = None) -> MonitorReport:
    """Check the deployment log as served by ``fetch`` (paths relative to its prefix, e.g.
    ``checkpoint``, ``tile/0/000``); see the module docstring."""
    witness_keys = list(witness_keys)
    need = len(witness_keys) if min_witnesses is None else min_witnesses
    note = _get(fetch, "checkpoint")
    try:
        cp, opened = open_log_checkpoint(note, log_key, witness_keys)
    except NoteError as e:
        raise MonitorError(f"the deployment checkpoint does not verify with the log key "
                           f"{format_vkey(log_key)}: {e}") from e
    log_id = (log_key.name, log_key.key_id)
    cosigners = sorted({s.name for s in opened.verified if (s.name, s.key_id) != log_id})
    if len(cosigners) < need:
        raise MonitorError(f"the deployment checkpoint of size {cp.size} carries "
                           f"{len(cosigners)} valid cosignature(s) of the witness keys given, "
                           f"{need} required")
    report = MonitorReport(cp, note, cosigners, known_size=known[0] if known else None)
    reader = _reader(fetch, "", cp.size)
    if known is not None:
        size, root = known
        why = ("it is smaller than the one checked before" if cp.size < size else
               _consistent(reader, size, root, cp.size, cp.root_hash))
        if why is not None:
            report.findings.append(Finding(
                LOG_FORKED, None, cp.size,
                f"the deployment checkpoint of size {cp.size} (root {cp.root_hash.hex()[:16]}…) "
                f"does not extend the one checked before, size {size} (root "
                f"{root.hex()[:16]}…): {why}"))
            return report
    try:
        entries = reader.entries(cp.root_hash)
    except TileError as e:
        raise MonitorError(f"the deployment tree's entries: {e}") from e
    report.entries = len(entries)
    by_stream: dict[str, list[tuple[int, Checkpoint]]] = {}
    for i, entry in enumerate(entries):
        try:
            scp, _n, name = open_stream_checkpoint(entry, log_key)
        except NoteError as e:
            report.findings.append(Finding(CHECKPOINT_INVALID, None, None,
                                           f"entry {i} is not a stream checkpoint the log key "
                                           f"signed: {e}"))
            continue
        if stream is None or name == stream:
            by_stream.setdefault(name, []).append((i, scp))
    done = 0
    for name, cps in sorted(by_stream.items()):
        report.streams[name] = _check_stream(fetch, name, cps, report.findings)
        done += 1
        if progress is not None:
            progress(done, len(by_stream))
    return report


def _check_stream(fetch: Fetch, name: str, cps: list[tuple[int, Checkpoint]],
                  findings: list[Finding]) -> dict[str, Any]:
    """All of ``name``'s checkpoints in the list are prefixes of one tree."""
    top_index, top = max(cps, key=lambda c: (c[1].size, -c[0]))
    out = {"checkpoints": len(cps), "size": top.size, "root": top.root_hash.hex()}
    if top.size == 0:
        return out
    reader = _reader(fetch, f"streams/{name}/", top.size)
    try:
        reader.verify_root(top.root_hash)
    except TileError as e:
        raise MonitorError(f"stream {name}: its hash tiles do not lead to the root of its "
                           f"checkpoint of size {top.size} (entry {top_index}): {e}") from e
    bad = 0
    for i, cp in cps:
        if (i, cp) == (top_index, top):
            continue
        why = _consistent(reader, cp.size, cp.root_hash, top.size, top.root_hash) \
            if cp.size else None
        if why is None:
            continue
        bad += 1
        findings.append(Finding(
            STREAM_FORKED, name, cp.size,
            f"entry {i}, the stream's checkpoint of size {cp.size} (root "
            f"{cp.root_hash.hex()[:16]}…), and entry {top_index}, of size {top.size} (root "
            f"{top.root_hash.hex()[:16]}…), are not prefixes of one tree: {why}"))
    out["forked"] = bad
    return out
