"""The writer's checkpoints, pure part: trees staged per transaction, due logic, control
messages, what the head persists and how a restore is planned; and the log key file."""

from __future__ import annotations

import os

import pytest

from evidence_contract.merkle import CompactRange, MerkleTree, record_leaf_hash, verify_consistency
from evidence_contract.note import (
    SIG_COSIGNATURE_V1,
    format_skey,
    generate_signer,
    open_checkpoint,
    stream_origin,
)
from tests.fixtures.writer import encode_capture, make_capture
from topics import MIB
from writer.checkpoints import (
    DEFAULT_LOG_NAME,
    StreamTree,
    Trees,
    TreeState,
    is_checkpoint_request,
    plan_restore,
)
from writer.core import Head, Sealed, Sealer, decode_head_state, encode_head
from writer.errors import SigningKeyError
from writer.log_key import load_log_key

S = "tenant-a:chat"
W = {"writer_id": "w", "transactional_id": "t", "version": "0"}
KEY = generate_signer(DEFAULT_LOG_NAME)


def _sealer(signer=KEY, interval_s=5.0) -> Sealer:
    s = Sealer(W, 16 * MIB, 10**12, 1000, trees=Trees(signer, DEFAULT_LOG_NAME, interval_s))
    s.assign(0, {}, s.new_window())
    return s


def _seal(s: Sealer, n: int, stream: str = S, at: int = 0) -> list[bytes]:
    out = []
    for i in range(n):
        r = s.handle(encode_capture(make_capture(stream)), stream.encode(), 0, at + i, 10 + i)
        assert isinstance(r, Sealed)
        out.append(r.record)
    return out


def test_the_sealers_leaf_is_the_contracts_record_leaf_hash():
    s = _sealer()
    records = _seal(s, 5)
    s.commit()
    assert s.trees.tree(0, S).range.root() == MerkleTree(map(record_leaf_hash, records)).root()


def test_trees_are_staged_like_the_heads_commit_applies_abort_discards():
    s = _sealer()
    kept = _seal(s, 3)
    s.commit()
    _seal(s, 4, at=3)
    assert s.trees.tree(0, S).range.size == 7
    s.abort()
    assert s.trees.tree(0, S).range.size == 3 == s.head(0, S).seq
    assert s.trees.tree(0, S).range.root() == MerkleTree(map(record_leaf_hash, kept)).root()


def test_a_grown_stream_is_due_at_once_then_after_the_interval():
    s = _sealer(interval_s=5.0)
    assert s.trees.due(0.0) == []
    _seal(s, 2)
    assert s.trees.due(100.0) == [(0, S)]  # never checkpointed: due now
    cp = s.trees.issue(0, S, 100.0)
    assert cp.size == 2 and s.trees.due(100.0) == []
    s.commit()
    assert s.trees.due(200.0) == [], "not grown since: nothing to sign"
    _seal(s, 1, at=2)
    s.commit()
    assert s.trees.due(104.9) == [] and s.trees.due(105.0) == [(0, S)]


def test_an_aborted_checkpoint_is_signed_again_and_never_twice_at_one_size():
    s = _sealer()
    _seal(s, 2)
    s.trees.issue(0, S, 1.0)
    s.abort()
    assert s.trees.tree(0, S).checkpoint_size == 0 and s.trees.due(1.0) == []  # records gone
    _seal(s, 2)
    first = s.trees.issue(0, S, 1.0)
    s.commit()
    with pytest.raises(AssertionError):
        s.trees.issue(0, S, 99.0)  # same size again: refused
    _seal(s, 3, at=2)
    second = s.trees.issue(0, S, 99.0)
    assert (first.size, second.size) == (2, 5)


def test_checkpoints_open_with_the_log_key_and_stay_consistent():
    s = _sealer()
    records, notes = [], []
    for n in (1, 2, 5, 8, 13):
        records += _seal(s, n - len(records), at=len(records))
        notes.append(s.trees.issue(0, S, float(n)))
        s.commit()
    tree = MerkleTree(map(record_leaf_hash, records))
    prev = None
    for cp in notes:
        got, _note = open_checkpoint(cp.note, KEY.verifier, origin=stream_origin(DEFAULT_LOG_NAME, S))
        assert got.origin == f"{DEFAULT_LOG_NAME}/{S}" and got.root_hash == tree.root(got.size)
        assert dict(cp.headers) == {"evidence-kind": b"checkpoint", "evidence-stream": S.encode(),
                                    "evidence-tree-size": str(got.size).encode()}
        if prev is not None:
            verify_consistency(prev.size, got.size, tree.consistency_proof(prev.size, got.size),
                               prev.root_hash, got.root_hash)
        prev = got


def test_an_on_demand_request_skips_the_interval_but_not_the_growth_rule():
    s = _sealer(interval_s=3600)
    _seal(s, 1)
    s.trees.issue(0, S, 0.0)
    s.commit()
    s.trees.request(0, S)
    assert s.trees.due(1.0) == [], "not grown: nothing"
    _seal(s, 1, at=1)
    assert s.trees.due(1.0) == [(0, S)]
    s.trees.abort()  # the request goes with its batch (which is consumed again)
    s.abort()
    _seal(s, 1, at=1)
    assert s.trees.due(1.0) == []


def test_without_a_key_nothing_is_due_and_the_head_carries_the_range_at_the_head():
    s = _sealer(signer=None)
    records = _seal(s, 3)
    assert s.trees.due(1e9) == []
    (head, tree), = s.pending_state().values()
    assert (tree.tree_size, tree.checkpoint_size) == (3, 0)
    assert CompactRange(3, tree.nodes).root() == MerkleTree(map(record_leaf_hash, records)).root()


def test_with_a_key_the_head_carries_the_range_at_the_last_checkpoint():
    s = _sealer()
    _seal(s, 3)
    s.trees.issue(0, S, 0.0)
    s.commit()
    _seal(s, 2, at=3)
    (head, tree), = s.pending_state().values()
    assert head.seq == 5 and (tree.tree_size, tree.checkpoint_size) == (3, 3)
    back_head, back_tree = decode_head_state(encode_head(head, 0, tree))
    assert (back_head, back_tree) == (head, tree)


def test_a_checkpoint_only_transaction_writes_the_head_of_the_checkpointed_stream():
    s = _sealer()
    _seal(s, 2)
    s.commit()
    assert s.pending_state() == {}
    s.trees.issue(0, S, 0.0)
    (key, (head, tree)), = s.pending_state().items()
    assert key == (0, S) and head.seq == 2 and tree.checkpoint_size == 2


def test_control_messages_are_told_by_their_header():
    assert is_checkpoint_request([("evidence-control", b"checkpoint")])
    assert not is_checkpoint_request([("evidence-control", b"other")])
    assert not is_checkpoint_request(None) and not is_checkpoint_request([])


def test_a_refused_stream_is_sealed_but_never_signed_and_its_state_kept():
    s = Sealer(W, 16 * MIB, 10**12, 1000, trees=Trees(KEY))
    kept = TreeState(0, (), 7)

    head = Head(S, 9, bytes(32), 1, "e")
    s.assign(0, {S: head}, s.new_window(), {S: StreamTree(refused="bad", stored=kept)})
    _seal(s, 2, at=0)
    assert s.head(0, S).seq == 11 and s.trees.due(1e9) == []
    (_h, tree), = s.pending_state().values()
    assert tree == kept
    assert s.trees.refused() == {(0, S): "bad"}


def test_plan_restore():
    r = CompactRange()
    for i in range(4):
        r.append(bytes([i]) * 32)
    at4 = TreeState(4, r.nodes, 4)
    # without a key: the stored range as it is
    assert plan_restore(S, 6, at4, None, signing=False).base.size == 4
    # matching checkpoint: start there, check it
    p = plan_restore(S, 6, at4, (4, r.root()), signing=True)
    assert not p.refused and p.base.size == 4 and p.replay_from == 5
    # another root, another size, a checkpoint past the head, one writer-state does not know
    assert plan_restore(S, 6, at4, (4, bytes(32)), True).refused
    assert plan_restore(S, 6, at4, (3, bytes(32)), True).refused
    assert plan_restore(S, 6, at4, None, True).refused
    assert plan_restore(S, 6, TreeState(0, (), 0), (2, bytes(32)), True).refused
    assert plan_restore(S, 3, TreeState(0, (), 4), (4, r.root()), True).refused
    # range past the last checkpoint (ran without a key since): rebuild from seq 1, check
    r6 = CompactRange(r.size, r.nodes)
    r6.append(bytes(32))
    r6.append(bytes(32))
    p = plan_restore(S, 6, TreeState(6, r6.nodes, 4), (4, r.root()), True)
    assert not p.refused and p.base.size == 0 and p.check == (4, r.root())


def test_a_head_whose_tree_is_not_a_compact_range_does_not_decode():
    from evidence_contract import DecodeError
    head = Head(S, 3, bytes(32), 1, "e")
    with pytest.raises(DecodeError):
        decode_head_state(encode_head(head, 0, TreeState(3, (bytes(32),), 0)))  # 3 needs 2 nodes
    with pytest.raises(DecodeError):
        decode_head_state(encode_head(head, 0, TreeState(4, (bytes(32),), 0)))  # past the head


def test_the_log_key_file_must_be_private_well_formed_and_named_as_the_log(tmp_path):
    path = tmp_path / "log.skey"
    path.write_text(format_skey(KEY) + "\n")
    os.chmod(path, 0o640)
    with pytest.raises(SigningKeyError, match="chmod 600"):
        load_log_key(str(path), DEFAULT_LOG_NAME)
    os.chmod(path, 0o600)
    assert load_log_key(str(path), DEFAULT_LOG_NAME).verifier == KEY.verifier
    with pytest.raises(SigningKeyError, match="EVIDENCE_LOG_NAME"):
        load_log_key(str(path), "other.example/log")
    path.write_text("PRIVATE+KEY+nonsense\n")
    with pytest.raises(SigningKeyError, match="no note signer key"):
        load_log_key(str(path), DEFAULT_LOG_NAME)
    path.write_text(format_skey(generate_signer(DEFAULT_LOG_NAME, SIG_COSIGNATURE_V1)))
    with pytest.raises(SigningKeyError, match="Ed25519"):
        load_log_key(str(path), DEFAULT_LOG_NAME)
    with pytest.raises(SigningKeyError, match="cannot open"):
        load_log_key(str(tmp_path / "missing"), DEFAULT_LOG_NAME)


def test_open_checkpoint_takes_a_stream_origin_under_the_log_key_name():
    from evidence_contract.note import Checkpoint, NoteError, format_checkpoint, format_note, sign
    text = format_checkpoint(Checkpoint(stream_origin(DEFAULT_LOG_NAME, S), 1, bytes(32)))
    note = format_note(text, [sign(KEY, text)])
    assert open_checkpoint(note, KEY.verifier)[0].size == 1
    with pytest.raises(NoteError, match="origin"):
        open_checkpoint(note, KEY.verifier, origin=stream_origin(DEFAULT_LOG_NAME, "other"))
    sneaky = generate_signer("evidence-store.local/lo")  # a prefix, not a parent
    text2 = format_checkpoint(Checkpoint(stream_origin(DEFAULT_LOG_NAME, S), 1, bytes(32)))
    with pytest.raises(NoteError, match="origin"):
        open_checkpoint(format_note(text2, [sign(sneaky, text2)]), sneaky.verifier)
    with pytest.raises(NoteError):
        stream_origin(DEFAULT_LOG_NAME, "has space")
