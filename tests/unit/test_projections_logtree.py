"""The deployment log's projection step (projections.logtree) and the contract's deployment
checkpoints (evidence_contract.tlog.open_log_checkpoint), pure."""

from __future__ import annotations

import hashlib

import pytest

from evidence_contract.merkle import EMPTY_ROOT, CompactRange, MerkleTree, leaf_hash
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, Checkpoint, NoteError, Signature, SignerKey, format_checkpoint,
    format_note, sign,
)
from evidence_contract.tlog import (
    DEFAULT_LOG_NAME, KIND_LOG_CHECKPOINT, KIND_LOG_COSIGNATURE, checkpoint_origin,
    open_log_checkpoint,
)
from projections import logtree
from projections.service import tree_partitions

LOG = SignerKey(DEFAULT_LOG_NAME, 1, hashlib.sha256(b"log").digest())
OTHER = SignerKey(DEFAULT_LOG_NAME, 1, hashlib.sha256(b"another log").digest())
WITNESS = SignerKey("w.example/1", SIG_COSIGNATURE_V1, hashlib.sha256(b"w").digest())
W2 = SignerKey("w2.example/1", SIG_COSIGNATURE_V1, hashlib.sha256(b"w2").digest())


def stream_note(stream: str, size: int, key: SignerKey = LOG) -> bytes:
    root = hashlib.sha256(b"%s %d" % (stream.encode(), size)).digest()
    text = format_checkpoint(Checkpoint(checkpoint_origin(DEFAULT_LOG_NAME, stream), size, root))
    return format_note(text, [sign(key, text)])


def log_note(size: int, root: bytes, key: SignerKey = LOG, *witnesses: SignerKey,
             origin: str = DEFAULT_LOG_NAME, extensions: tuple[str, ...] = ()) -> bytes:
    text = format_checkpoint(Checkpoint(origin, size, root, extensions))
    return format_note(text, [sign(key, text)] + [sign(w, text, timestamp=1_700_000_000 + i)
                                                   for i, w in enumerate(witnesses)])


def entry_headers(stream: str | None = None, size: int | None = None):
    h = [("evidence-kind", b"checkpoint")]
    if stream is not None:
        h.append(("evidence-stream", stream.encode()))
    if size is not None:
        h.append(("evidence-tree-size", str(size).encode()))
    return h


def kind(k: str, witness: str | None = None):
    return [("evidence-kind", k.encode())] + (
        [("evidence-witness", witness.encode())] if witness else [])


KEYS = (LOG.verifier, None)


# -- the contract: open_log_checkpoint ----------------------------------------------------


def test_open_log_checkpoint_takes_the_logs_own_checkpoint_and_counts_cosigners():
    root = hashlib.sha256(b"r").digest()
    data = log_note(7, root, LOG, WITNESS)
    cp, note = open_log_checkpoint(data, LOG.verifier, [WITNESS.verifier])
    assert (cp.origin, cp.size, cp.root_hash) == (DEFAULT_LOG_NAME, 7, root)
    assert {s.name for s in note.verified} == {LOG.name, WITNESS.name}


@pytest.mark.parametrize("data, why", [
    (log_note(7, EMPTY_ROOT, OTHER), "no signature from a known key"),
    (log_note(7, EMPTY_ROOT, origin=checkpoint_origin(DEFAULT_LOG_NAME, "s")), "is not the log"),
    (log_note(7, EMPTY_ROOT, extensions=("x",)), "no extension lines"),
    (b"not a note", "a note"),
])
def test_open_log_checkpoint_refuses_anything_else(data, why):
    with pytest.raises(NoteError, match=why):
        open_log_checkpoint(data, LOG.verifier)


# -- entries --------------------------------------------------------------------------------


@pytest.mark.parametrize("key", KEYS)
def test_an_entry_is_the_message_verbatim_and_says_which_stream_checkpoint_it_is(key):
    value = stream_note("s1", 4)
    (entry,) = logtree.decode_tree_message(3, value, entry_headers("s1", 4), DEFAULT_LOG_NAME,
                                           key)
    assert entry == logtree.Entry("s1", 4, value, 3)


def test_a_bad_entry_is_a_finding_and_still_an_entry():
    forged = stream_note("s1", 4, OTHER)
    entry, finding = logtree.decode_tree_message(5, forged, entry_headers("s1", 4),
                                                 DEFAULT_LOG_NAME, LOG.verifier)
    assert entry == logtree.Entry("s1", 4, forged, 5)
    assert (finding.kind, finding.stream, finding.partition, finding.offset) == (
        logtree.CHECKPOINT_INVALID, "s1", 0, 5)
    # Unreadable bytes without headers: an entry all the same, of no stream.
    entry, finding = logtree.decode_tree_message(6, b"\xffjunk", entry_headers(),
                                                 DEFAULT_LOG_NAME, LOG.verifier)
    assert entry == logtree.Entry("", 0, b"\xffjunk", 6)
    assert finding.kind == logtree.CHECKPOINT_INVALID and finding.stream is None
    # A stream other than its header says; and no value at all (the empty entry).
    entry, finding = logtree.decode_tree_message(7, stream_note("s2", 2), entry_headers("s1"),
                                                 DEFAULT_LOG_NAME, None)
    assert (entry.stream, entry.tree_size) == ("s1", 2) and finding.kind == "checkpoint_invalid"
    entry, finding = logtree.decode_tree_message(8, None, entry_headers("s1"),
                                                 DEFAULT_LOG_NAME, LOG.verifier)
    assert entry.entry == b"" and finding.kind == "checkpoint_invalid"


def test_a_message_of_no_known_kind_is_a_finding_and_no_entry():
    for headers in (None, kind("something")):
        (finding,) = logtree.decode_tree_message(1, stream_note("s", 1), headers,
                                                 DEFAULT_LOG_NAME, LOG.verifier)
        assert finding.kind == logtree.CHECKPOINT_INVALID and "not an entry" in finding.detail


def test_grow_log_across_batches_is_the_tree_of_the_entries_leaf_hashes():
    entries = [logtree.Entry(f"s{i % 3}", i, stream_note(f"s{i % 3}", i + 1), i)
               for i in range(13)]
    first = logtree.grow_log(CompactRange(), entries[:6])
    second = logtree.grow_log(first.tree, entries[6:])
    tree = MerkleTree([leaf_hash(e.entry) for e in entries])
    nodes = {(lv, i): h for lv, i, h in first.nodes + second.nodes}
    assert nodes == {(lv, i): h for lv, level in enumerate(tree._levels)
                     for i, h in enumerate(level)}
    assert [r[0] for r in first.entries + second.entries] == list(range(13))
    assert second.entries[0] == (6, "s0", 6, entries[6].entry, 6)
    assert second.tree.root() == tree.root() and second.tree.size == 13
    assert first.tree.size == 6  # grow_log does not modify the range it is given
    assert logtree.entry_leaf_hash(b"x") == hashlib.sha256(b"\x00x").digest()


# -- deployment checkpoints and cosignatures ---------------------------------------------------


@pytest.mark.parametrize("key", KEYS)
def test_a_log_checkpoint_is_a_row(key):
    root = hashlib.sha256(b"r").digest()
    value = log_note(9, root)
    (row,) = logtree.decode_tree_message(4, value, kind(KIND_LOG_CHECKPOINT), DEFAULT_LOG_NAME,
                                         key)
    assert row == logtree.LogCheckpointRow(9, root, value, 4)
    assert logtree.check_root(9, root, 4, root) is None
    f = logtree.check_root(9, root, 4, EMPTY_ROOT)
    assert (f.kind, f.stream, f.seq, f.offset) == (logtree.CHECKPOINT_MISMATCH, None, 9, 4)


def test_a_log_checkpoint_that_is_not_the_logs_is_a_finding():
    cases = [(log_note(9, EMPTY_ROOT, OTHER), LOG.verifier),
             (log_note(9, EMPTY_ROOT, origin=checkpoint_origin(DEFAULT_LOG_NAME, "s")), None),
             (stream_note("s", 3), LOG.verifier),
             (b"junk", None)]
    for value, key in cases:
        (finding,) = logtree.decode_tree_message(2, value, kind(KIND_LOG_CHECKPOINT),
                                                 DEFAULT_LOG_NAME, key)
        assert finding.kind == logtree.CHECKPOINT_INVALID and finding.stream is None


@pytest.mark.parametrize("key", KEYS)
def test_a_cosignature_gives_its_checkpoint_and_each_witness_line(key):
    root = hashlib.sha256(b"r").digest()
    value = log_note(9, root, LOG, WITNESS, W2)
    got = logtree.decode_tree_message(6, value, kind(KIND_LOG_COSIGNATURE, WITNESS.name),
                                      DEFAULT_LOG_NAME, key)
    cp, *cosigs = got
    assert cp == logtree.LogCheckpointRow(9, root, log_note(9, root), 6)
    assert [(c.tree_size, c.root, c.witness, c.key_id, c.timestamp, c.offset) for c in cosigs] == [
        (9, root, WITNESS.name, WITNESS.verifier.key_id, 1_700_000_000, 6),
        (9, root, W2.name, W2.verifier.key_id, 1_700_000_001, 6)]
    assert value.decode().endswith(cosigs[0].line + cosigs[1].line)


def test_a_cosignature_line_that_cannot_be_read_is_a_finding_not_an_error():
    root = hashlib.sha256(b"r").digest()
    text = format_checkpoint(Checkpoint(DEFAULT_LOG_NAME, 9, root))
    value = format_note(text, [sign(LOG, text), Signature("odd.example", 7, b"short"),
                               sign(WITNESS, text, timestamp=5)])
    cp, finding, cosig = logtree.decode_tree_message(
        6, value, kind(KIND_LOG_COSIGNATURE), DEFAULT_LOG_NAME, LOG.verifier)
    assert isinstance(cp, logtree.LogCheckpointRow)
    assert finding.kind == logtree.CHECKPOINT_INVALID and "odd.example" in finding.detail
    assert (cosig.witness, cosig.timestamp) == (WITNESS.name, 5)


def test_the_tree_topic_goes_with_log_partition_0():
    assert tree_partitions([0, 2]) == [0]
    assert tree_partitions([1, 2]) == []
    assert tree_partitions([]) == []
