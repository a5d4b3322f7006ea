"""The publisher's pure part: the deployment tree, its checkpoints, the tlog-witness client."""

from __future__ import annotations

import base64

import pytest

from evidence_contract.merkle import MerkleTree, leaf_hash
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, Checkpoint, format_checkpoint, generate_signer, open_checkpoint, sign,
)
from publisher.core import (
    BACKOFF_MAX_S, DeploymentTree, WitnessState, add_checkpoint_body, read_answer,
    sign_checkpoint,
)

LOG = "example.test/log"


def _tree(entries: list[bytes]) -> DeploymentTree:
    t = DeploymentTree()
    for e in entries:
        t.append(e)
    return t


def test_the_tree_is_rfc6962_over_the_entries():
    entries = [f"entry {i}\n".encode() for i in range(13)]
    t = _tree(entries)
    assert t.size == 13
    assert t.root() == MerkleTree([leaf_hash(e) for e in entries]).root()


def test_due_after_growth_and_at_most_once_an_interval():
    t = _tree([b"a"])
    assert t.due(100.0, 10.0)  # nothing signed by this process yet
    t.signed_now(1, t.root(), 100.0)
    assert not t.due(200.0, 10.0)  # no growth
    t.append(b"b")
    assert not t.due(105.0, 10.0)  # grew, but within the interval
    assert t.due(110.0, 10.0)


def test_a_checkpoint_read_back_is_not_signed_again():
    t = _tree([b"a", b"b"])
    t.saw_signed(2, t.root())
    assert not t.due(0.0, 1.0)
    t.append(b"c")
    assert t.due(0.0, 1.0)


def test_the_checkpoint_is_the_log_keys_origin_signed_by_it():
    key = generate_signer(LOG)
    text, note = sign_checkpoint(key, 3, b"\x07" * 32)
    cp, _ = open_checkpoint(note, key.verifier, origin=LOG)
    assert (cp.origin, cp.size, cp.root_hash, cp.extensions) == (LOG, 3, b"\x07" * 32, ())
    assert note.startswith(text.encode())
    assert sign_checkpoint(key, 3, b"\x07" * 32)[1] == note  # deterministic: restarts agree


def test_add_checkpoint_body_is_old_proof_blank_note():
    body = add_checkpoint_body(5, [b"\x01" * 32, b"\x02" * 32], b"NOTE")
    lines = body.split(b"\n")
    assert lines[0] == b"old 5"
    assert base64.b64decode(lines[1]) == b"\x01" * 32
    assert base64.b64decode(lines[2]) == b"\x02" * 32
    assert lines[3] == b"" and body.endswith(b"\nNOTE")
    assert add_checkpoint_body(0, [], b"N") == b"old 0\n\nN"


def _cosigned(text: str):
    w = generate_signer("witness.test", SIG_COSIGNATURE_V1)
    return w, sign(w, text, timestamp=1_700_000_000)


def test_a_200_with_a_cosignature_that_verifies_is_cosigned():
    text = format_checkpoint(Checkpoint(LOG, 4, b"\x01" * 32))
    w, sig = _cosigned(text)
    a = read_answer(200, "text/plain", sig.line().encode(), w.verifier, text)
    assert a.kind == "cosigned" and a.cosignatures == (sig,)


def test_a_200_from_another_key_is_a_failure_not_a_cosignature():
    text = format_checkpoint(Checkpoint(LOG, 4, b"\x01" * 32))
    w, _ = _cosigned(text)
    _, other = _cosigned(text)  # same name, another key
    a = read_answer(200, "text/plain", other.line().encode(), w.verifier, text)
    assert a.kind == "failed" and "verifies" in a.detail
    assert read_answer(200, "text/plain", b"garbage\n", w.verifier, text).kind == "failed"


@pytest.mark.parametrize("status,ctype,body,kind,size", [
    (409, "text/x.tlog.size", b"12\n", "size", 12),
    (409, "text/x.tlog.size; charset=utf-8", b"0", "size", 0),
    (409, "text/plain", b"12\n", "failed", None),
    (409, "text/x.tlog.size", b"012\n", "failed", None),
    (503, "text/plain", b"busy", "busy", None),
    (429, "text/plain", b"", "busy", None),
    (404, "text/plain", b"unknown log", "unknown_log", None),
    (403, "text/plain", b"bad signature", "unknown_log", None),
    (422, "text/plain", b"bad consistency proof", "forked", None),
    (400, "text/plain", b"malformed", "bad_request", None),
    (500, "text/plain", b"oops", "failed", None),
])
def test_each_answer_means_one_thing(status, ctype, body, kind, size):
    text = format_checkpoint(Checkpoint(LOG, 4, b"\x01" * 32))
    w, _ = _cosigned(text)
    a = read_answer(status, ctype, body, w.verifier, text)
    assert (a.kind, a.size) == (kind, size)


def test_witness_state_backs_off_doubling_and_resets_when_it_cosigns():
    st = WitnessState()
    assert st.wants(5, 0.0) and st.old() == 0
    assert st.back_off(0.0) == 1.0 and not st.wants(5, 0.5)
    assert st.back_off(0.0) == 2.0
    assert st.back_off(0.0, retry_after_s=30.0) == 30.0
    for _ in range(20):
        st.back_off(0.0)
    assert st.backoff_s == BACKOFF_MAX_S
    st.took(5)
    assert (st.holds, st.cosigned, st.backoff_s, st.next_at) == (5, 5, 0.0, 0.0)
    assert not st.wants(5, 0.0) and st.wants(6, 0.0) and st.old() == 5


def test_a_refused_size_is_never_sent_again():
    st = WitnessState()
    st.refused.add(7)
    assert not st.wants(7, 1e9) and st.wants(8, 1e9)
