"""The verifiable log's projection step (projections.tlog) and the contract's stream
checkpoints (evidence_contract.tlog), pure."""

from __future__ import annotations

import hashlib

import pytest

import evidence_contract as contract
from evidence_contract.merkle import CompactRange, MerkleTree, record_leaf_hash
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, Checkpoint, NoteError, SignerKey, format_checkpoint, format_note, sign,
)
from evidence_contract.tlog import (
    DEFAULT_LOG_NAME, checkpoint_origin, open_stream_checkpoint, stream_of_origin,
)
from projections import tlog
from projections.rows import record_row
from tests.fixtures.log import GENESIS, make_body, seal_record

LOG = SignerKey(DEFAULT_LOG_NAME, 1, hashlib.sha256(b"log").digest())
OTHER = SignerKey(DEFAULT_LOG_NAME, 1, hashlib.sha256(b"another log").digest())
WITNESS = SignerKey("w.example/1", SIG_COSIGNATURE_V1, hashlib.sha256(b"w").digest())


def rows(stream: str, n: int, start: int = 1, prev: bytes = GENESIS):
    out = []
    for seq in range(start, start + n):
        r = seal_record(make_body(stream, seq), seq, prev)
        prev = r.record_digest
        out.append(record_row(r.value, 0, seq))
    return out


def note(stream: str, size: int, root: bytes, key: SignerKey = LOG, *cosigners) -> bytes:
    text = format_checkpoint(Checkpoint(checkpoint_origin(DEFAULT_LOG_NAME, stream), size, root))
    return format_note(text, [sign(key, text)] + [sign(w, text, timestamp=5) for w in cosigners])


def test_row_leaf_hash_is_the_contracts_record_leaf_hash():
    for row in rows("s", 3):
        assert tlog.row_leaf_hash(row) == record_leaf_hash(row[-1])


def test_grow_builds_each_streams_tree_across_batches():
    a, b = rows("a", 11), rows("b", 4)
    first = tlog.grow({}, a[:5] + b[:2])
    second = tlog.grow(first.trees, a[5:] + b[2:])
    for stream, rs in (("a", a), ("b", b)):
        tree = MerkleTree([tlog.row_leaf_hash(r) for r in rs])
        nodes = {(lv, i): h for s, lv, i, h in first.nodes + second.nodes if s == stream}
        assert nodes == {(lv, i): h for lv, level in enumerate(tree._levels)
                         for i, h in enumerate(level)}
        assert second.trees[stream].root() == tree.root()


def test_records_off_the_gapless_prefix_do_not_enter_the_tree():
    a = rows("a", 6)
    grown = tlog.grow({}, [a[0], a[1], a[1], a[3], a[2], a[4]])  # duplicate, gap, late
    assert grown.trees["a"].size == 3  # 1, 2, then 3 arrived late: 4 and 5 came before it
    unchanged = tlog.grow({"a": grown.trees["a"]}, [a[0]])
    assert unchanged.nodes == [] and unchanged.trees == {}


def test_a_checkpoint_message_is_a_row_and_its_root_is_checked():
    cr = CompactRange()
    cr.extend(tlog.row_leaf_hash(r) for r in rows("a", 3))
    value = note("a", 3, cr.root())
    headers = [("evidence-kind", b"checkpoint"), ("evidence-stream", b"a"),
               ("evidence-tree-size", b"3")]
    for key in (LOG.verifier, None):
        (row,) = tlog.decode_checkpoint(0, 9, value, headers, DEFAULT_LOG_NAME, key)
        assert (row.stream, row.tree_size, row.root, row.note) == ("a", 3, cr.root(), value)
        assert tlog.check_root(row, cr.root()) is None
    finding = tlog.check_root(row, b"\x01" * 32)
    assert finding.kind == tlog.CHECKPOINT_MISMATCH and (finding.partition, finding.offset) == (0, 9)
    assert tlog.check_root(("a", 3, b"\x02" * 32, 1, 2), b"\x01" * 32).seq == 3


def test_a_cosignature_message_gives_the_witness_lines():
    value = note("a", 3, b"\x05" * 32, LOG, WITNESS)
    headers = [("evidence-kind", b"cosignature"), ("evidence-stream", b"a")]
    (row,) = tlog.decode_checkpoint(0, 1, value, headers, DEFAULT_LOG_NAME, LOG.verifier)
    assert isinstance(row, tlog.CosignatureRow)
    assert (row.witness, row.key_id, row.timestamp) == (WITNESS.name, WITNESS.verifier.key_id, 5)
    assert value.decode().endswith(row.line)


@pytest.mark.parametrize("value,headers,words", [
    (None, [("evidence-kind", b"checkpoint")], "no value"),
    (b"garbage", [("evidence-kind", b"checkpoint")], "checkpoint message"),
    (note("a", 3, b"\x05" * 32, OTHER), [("evidence-kind", b"checkpoint")], "known key"),
    (note("a", 3, b"\x05" * 32), [("evidence-kind", b"checkpoint"), ("evidence-stream", b"b")],
     "not stream 'b'"),
    (note("a", 3, b"\x05" * 32), [("evidence-kind", b"other")], "unknown evidence-kind"),
])
def test_an_unreadable_checkpoint_message_is_a_finding(value, headers, words):
    (f,) = tlog.decode_checkpoint(2, 7, value, headers, DEFAULT_LOG_NAME, LOG.verifier)
    assert f.kind == tlog.CHECKPOINT_INVALID and words in f.detail and f.offset == 7


def test_stream_origins():
    assert checkpoint_origin("log.example/x", "acme:chat") == "log.example/x/acme:chat"
    assert stream_of_origin("log.example/x", "log.example/x/acme:chat") == "acme:chat"
    assert stream_of_origin("log.example/x", "log.example/y/acme:chat") is None
    assert stream_of_origin("log.example/x", "log.example/x/a/b") is None
    with pytest.raises(ValueError):
        checkpoint_origin("log", "a b")


def test_open_stream_checkpoint_checks_key_origin_and_extensions():
    value = note("a", 3, b"\x05" * 32, LOG, WITNESS)
    cp, n, stream = open_stream_checkpoint(value, LOG.verifier, "a", [WITNESS.verifier])
    assert (cp.size, stream, len(n.verified)) == (3, "a", 2)
    with pytest.raises(NoteError):
        open_stream_checkpoint(value, LOG.verifier, "b")
    with pytest.raises(NoteError):
        open_stream_checkpoint(value, OTHER.verifier)
    text = format_checkpoint(Checkpoint("other.example/log/a", 3, b"\x05" * 32))
    with pytest.raises(NoteError, match="names no stream"):
        open_stream_checkpoint(format_note(text, [sign(LOG, text)]), LOG.verifier)
    text = format_checkpoint(Checkpoint(checkpoint_origin(DEFAULT_LOG_NAME, "a"), 3,
                                        b"\x05" * 32, ("ext",)))
    with pytest.raises(NoteError, match="extension"):
        open_stream_checkpoint(format_note(text, [sign(LOG, text)]), LOG.verifier)
    assert contract  # the package imports as the contract
