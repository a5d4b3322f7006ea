"""The monitor (audit.monitor) over a deployment log served from memory as tlog-tiles: a
consistent log, a stream shown twice with two histories, a deployment log that forks from
the one checked before, tiles that lie, a checkpoint without the cosignature asked for.
The real log's routes are in tests/integration/test_monitor.py."""

from __future__ import annotations

import hashlib

import pytest

from audit.monitor import LOG_FORKED, STREAM_FORKED, MonitorError, monitor
from evidence_contract.merkle import CompactRange, leaf_hash
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, Checkpoint, SignerKey, format_checkpoint, format_note, sign,
)
from evidence_contract.tiles import ENTRIES, encode_entry_bundle, parse_tile_path, tile_width
from evidence_contract.tlog import checkpoint_origin
from publisher.core import sign_checkpoint

LOG = SignerKey("evidence-store.test/log", 1, hashlib.sha256(b"monitor log").digest())
W = SignerKey("witness.test/m", SIG_COSIGNATURE_V1, hashlib.sha256(b"monitor w").digest())


def _leaves(stream: str, n: int, salt: str = "") -> list[bytes]:
    return [leaf_hash(f"{stream} {i}{salt}".encode()) for i in range(n)]


def _tiles(leaves: list[bytes], entries: list[bytes] | None = None):
    size = len(leaves)
    nodes = {(lv, i): h for lv, i, h in CompactRange().extend_nodes(leaves)}

    def serve(path: str) -> bytes | None:
        tile = parse_tile_path(path)
        if tile.width > tile_width(tile.level, tile.index, size):
            return None
        if tile.level == ENTRIES:
            return encode_entry_bundle(entries[i] for i in tile.positions)
        return b"".join(nodes[(tile.tree_level, i)] for i in tile.positions)
    return serve


def _root(leaves: list[bytes]) -> bytes:
    cr = CompactRange()
    cr.extend(leaves)
    return cr.root()


def _stream_cp(stream: str, leaves: list[bytes]) -> bytes:
    text = format_checkpoint(Checkpoint(checkpoint_origin(LOG.name, stream), len(leaves),
                                        _root(leaves)))
    return format_note(text, [sign(LOG, text)])


class Log:
    """A deployment log: streams' leaves, the list of their checkpoints, served as tiles."""

    def __init__(self, streams: dict[str, list[bytes]], shown: list[tuple[str, int]],
                 rewrite: dict[str, list[bytes]] | None = None) -> None:
        # ``shown``: (stream, size) of each entry in order; a stream in ``rewrite`` is served
        # (its tiles) and checkpointed from the rewritten leaves from its second showing on.
        self.entries, seen = [], set()
        for stream, size in shown:
            leaves = (rewrite or {}).get(stream) if stream in seen and rewrite and \
                stream in rewrite else streams[stream]
            seen.add(stream)
            self.entries.append(_stream_cp(stream, leaves[:size]))
        self.leaves = [leaf_hash(e) for e in self.entries]
        self.stream_tiles = {s: _tiles((rewrite or {}).get(s, leaves))
                             for s, leaves in streams.items()}
        text, _note = sign_checkpoint(LOG, len(self.entries), _root(self.leaves))
        self.note = format_note(text, [sign(LOG, text), sign(W, text, 1_700_000_000)])
        self.tiles = _tiles(self.leaves, self.entries)

    def __call__(self, path: str) -> bytes | None:
        if path == "checkpoint":
            return self.note
        if path.startswith("streams/"):
            _s, name, rest = path.split("/", 2)
            return self.stream_tiles[name](rest) if name in self.stream_tiles else None
        return self.tiles(path)


STREAMS = {"a": _leaves("a", 300), "b": _leaves("b", 7)}
SHOWN = [("a", 1), ("b", 2), ("a", 200), ("b", 7), ("a", 256), ("a", 300)]


def test_a_consistent_log_every_stream_one_tree():
    log = Log(STREAMS, SHOWN)
    report = monitor(log, LOG.verifier, [W.verifier])
    assert report.clean, report.findings
    assert report.entries == 6 and report.cosigners == [W.name]
    assert report.streams["a"] == {"checkpoints": 4, "size": 300,
                                   "root": _root(STREAMS["a"]).hex(), "forked": 0}


def test_a_stream_shown_with_two_histories_is_a_fork_of_that_stream():
    rewritten = _leaves("a", 300, " rewritten")
    log = Log(STREAMS, SHOWN, rewrite={"a": rewritten})
    report = monitor(log, LOG.verifier, [W.verifier])
    # The tiles serve the rewritten tree: its first checkpoint (size 1, the honest one) is
    # no prefix of it.
    assert [(f.kind, f.stream, f.seq) for f in report.findings] == [(STREAM_FORKED, "a", 1)]
    assert report.streams["b"]["forked"] == 0


def test_a_deployment_log_that_does_not_extend_the_one_checked_before():
    log = Log(STREAMS, SHOWN)
    first = Log(STREAMS, [("b", 2), ("a", 1)])  # another list at a smaller size
    known = (len(first.entries), _root(first.leaves))
    report = monitor(log, LOG.verifier, [W.verifier], known=known)
    assert [f.kind for f in report.findings] == [LOG_FORKED]
    honest = Log(STREAMS, SHOWN[:2])
    assert monitor(log, LOG.verifier, [W.verifier],
                   known=(2, _root(honest.leaves))).clean
    bigger = monitor(Log(STREAMS, SHOWN[:2]), LOG.verifier, [W.verifier],
                     known=(6, _root(log.leaves)))
    assert "smaller than the one checked before" in bigger.findings[0].detail


def test_tiles_that_lie_and_a_missing_cosignature_are_unverified_not_findings():
    log = Log(STREAMS, SHOWN)
    honest_tiles = log.stream_tiles["b"]
    log.stream_tiles["b"] = lambda p: bytes(32) * (len(honest_tiles(p) or b"") // 32) or None
    with pytest.raises(MonitorError, match="stream b: its hash tiles do not lead"):
        monitor(log, LOG.verifier, [W.verifier])
    other = SignerKey("witness.test/other", SIG_COSIGNATURE_V1, b"\x09" * 32)
    with pytest.raises(MonitorError, match="0 valid cosignature"):
        monitor(Log(STREAMS, SHOWN), LOG.verifier, [other.verifier])
    entries_lie = Log(STREAMS, SHOWN)
    entries_lie.entries[2] = _stream_cp("a", STREAMS["a"][:199])
    with pytest.raises(MonitorError, match="entries"):
        monitor(entries_lie, LOG.verifier, [W.verifier])
