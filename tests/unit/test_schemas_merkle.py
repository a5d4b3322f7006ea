"""evidence_contract.merkle against transparency-dev/merkle's published vectors and RFC 9162.

The vectors are read at test time from github.com/transparency-dev/merkle@v0.0.2 in the Go
module cache (tests.fixtures.tlog_vectors); no Go or no module proxy fails these tests.
"""

from __future__ import annotations

import hashlib
import json
import random

import pytest

import evidence_contract as contract
from evidence_contract import DecodeError, EvidenceError, vectors
from evidence_contract.merkle import (
    EMPTY_ROOT,
    LEAF_LABEL,
    CompactRange,
    MerkleTree,
    ProofError,
    compose_leaf_input,
    leaf_hash,
    leaf_input,
    node_hash,
    record_leaf_hash,
    tree_root,
    verify_consistency,
    verify_inclusion,
)
from tests.fixtures import tlog_vectors

VECTORS = tlog_vectors.merkle()
H = bytes.fromhex
LEAVES = [leaf_hash(H(x)) for x in VECTORS["leaf_inputs"]]
TREE = MerkleTree(LEAVES)


# --- Reference: RFC 9162 §2.1 as written (recursive, over leaf hashes) --------------------

def ref_mth(d: list[bytes]) -> bytes:
    if not d:
        return EMPTY_ROOT
    if len(d) == 1:
        return d[0]
    k = 1 << ((len(d) - 1).bit_length() - 1)
    return node_hash(ref_mth(d[:k]), ref_mth(d[k:]))


def ref_path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = 1 << ((len(d) - 1).bit_length() - 1)
    if m < k:
        return ref_path(m, d[:k]) + [ref_mth(d[k:])]
    return ref_path(m - k, d[k:]) + [ref_mth(d[:k])]


def ref_subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    if m == len(d):
        return [] if b else [ref_mth(d)]
    k = 1 << ((len(d) - 1).bit_length() - 1)
    if m <= k:
        return ref_subproof(m, d[:k], b) + [ref_mth(d[k:])]
    return ref_subproof(m - k, d[k:], False) + [ref_mth(d[:k])]


def random_leaves(n: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    return [leaf_hash(rng.randbytes(rng.randrange(40))) for _ in range(n)]


# --- Hashing ------------------------------------------------------------------------------

@pytest.mark.parametrize("case", VECTORS["hasher"], ids=lambda c: c["desc"])
def test_rfc6962_hasher_vectors(case):
    if case["kind"] == "empty":
        got = EMPTY_ROOT
    elif case["kind"] == "leaf":
        got = leaf_hash(H(case["input"]))
    else:
        got = node_hash(H(case["left"]), H(case["right"]))
    assert got.hex() == case["want"]


def test_leaf_and_node_hashes_are_the_published_tree():
    for level, hashes in enumerate(VECTORS["node_hashes"]):
        assert [h.hex() for h in TREE._levels[level]] == hashes


@pytest.mark.parametrize("size", range(9))
def test_roots_of_every_size(size):
    want = VECTORS["root_hashes"][size]
    assert TREE.root(size).hex() == want
    assert tree_root(LEAVES[:size]).hex() == want
    assert MerkleTree(LEAVES[:size]).root().hex() == want
    assert ref_mth(LEAVES[:size]).hex() == want


def test_compact_range_nodes_and_roots_after_each_append():
    cr = CompactRange()
    assert cr.root() == EMPTY_ROOT and cr.nodes == ()
    for size, leaf in enumerate(LEAVES, start=1):
        cr.append(leaf)
        assert cr.size == size
        assert [n.hex() for n in cr.nodes] == VECTORS["compact_trees"][size]
        assert cr.root().hex() == VECTORS["root_hashes"][size]


def test_compact_range_restores_from_its_state():
    leaves = random_leaves(77)
    whole = CompactRange()
    whole.extend(leaves)
    for cut in (0, 1, 31, 32, 33, 64):
        head = CompactRange()
        head.extend(leaves[:cut])
        resumed = CompactRange(head.size, head.nodes)
        resumed.extend(leaves[cut:])
        assert resumed.nodes == whole.nodes and resumed.root() == whole.root() == ref_mth(leaves)


@pytest.mark.parametrize("size,nodes", [(3, [b"\x00" * 32]), (1, [b"\x00" * 31]), (-1, []),
                                        (1 << 64, []), (True, [b"\x00" * 32])])
def test_compact_range_refuses_a_state_that_cannot_be(size, nodes):
    with pytest.raises(ValueError):
        CompactRange(size, nodes)


# --- Proofs: the published ones -----------------------------------------------------------

@pytest.mark.parametrize("case", VECTORS["inclusion_proofs"], ids=lambda c: f"{c['leaf_index']}@{c['tree_size']}")
def test_inclusion_proofs_are_the_published_ones(case):
    i, n = case["leaf_index"], case["tree_size"]
    proof = TREE.inclusion_proof(i, n)
    assert [p.hex() for p in proof] == case["proof"]
    verify_inclusion(i, n, LEAVES[i], proof, TREE.root(n))


@pytest.mark.parametrize("case", VECTORS["consistency_proofs"], ids=lambda c: f"{c['first']}-{c['second']}")
def test_consistency_proofs_are_the_published_ones(case):
    m, n = case["first"], case["second"]
    proof = TREE.consistency_proof(m, n)
    assert [p.hex() for p in proof] == case["proof"]
    verify_consistency(m, n, proof, TREE.root(m), TREE.root(n))


# --- Proofs: every size, against the RFC's recursive definitions ----------------------------

def test_every_proof_up_to_40_leaves_is_the_rfc_one_and_verifies():
    leaves = random_leaves(40)
    tree = MerkleTree(leaves)
    for n in range(1, 41):
        root = tree.root(n)
        assert root == ref_mth(leaves[:n])
        for i in range(n):
            proof = tree.inclusion_proof(i, n)
            assert proof == ref_path(i, leaves[:n])
            verify_inclusion(i, n, leaves[i], proof, root)
        for m in range(1, n + 1):
            proof = tree.consistency_proof(m, n)
            assert proof == ref_subproof(m, leaves[:n], True)
            verify_consistency(m, n, proof, tree.root(m), root)


def test_a_proof_fails_for_any_other_position_size_or_root():
    leaves = random_leaves(21)
    tree = MerkleTree(leaves)
    for n in (5, 8, 13, 21):
        for i in range(n):
            proof = tree.inclusion_proof(i, n)
            for j in {i - 1, i + 1, i ^ 2} - {i}:
                with pytest.raises(ProofError):
                    verify_inclusion(j, n, leaves[i], proof, tree.root(n))
            for other in {n - 1, n + 1, n * 2} - {n, 22, 26, 42}:  # sizes whose root we have
                with pytest.raises(ProofError):
                    verify_inclusion(i, other, leaves[i], proof, tree.root(other))
            with pytest.raises(ProofError):
                verify_inclusion(i, n, leaves[i], proof, tree.root(n - 1))
        for m in range(1, n):
            proof = tree.consistency_proof(m, n)
            for a, b in ((m, n - 1), (m, n + 1), (m + 1, n), (m - 1, n)):
                if 0 < a < b <= 21:
                    with pytest.raises(ProofError):
                        verify_consistency(a, b, proof, tree.root(a), tree.root(b))
            for k in range(len(proof)):
                flipped = list(proof)
                flipped[k] = bytes([proof[k][0] ^ 16]) + proof[k][1:]
                with pytest.raises(ProofError):
                    verify_consistency(m, n, flipped, tree.root(m), tree.root(n))


@pytest.mark.parametrize("args", [
    (True, 1, b"\x00" * 32, [], b"\x00" * 32),
    (0, 1 << 64, b"\x00" * 32, [], b"\x00" * 32),
    (0, 1, "00" * 32, [], b"\x00" * 32),
    (0, 2, b"\x00" * 32, b"\x00" * 32, b"\x00" * 32),
    (0, 2, b"\x00" * 32, ["x" * 32], b"\x00" * 32),
])
def test_malformed_verification_arguments_are_proof_errors(args):
    with pytest.raises(ProofError):
        verify_inclusion(*args)
    assert issubclass(ProofError, EvidenceError)


def test_consistency_edge_sizes():
    root = TREE.root(3)
    verify_consistency(3, 3, [], root, root)
    with pytest.raises(ProofError):
        verify_consistency(3, 3, [], root, TREE.root(4))
    with pytest.raises(ProofError):
        verify_consistency(0, 3, [], EMPTY_ROOT, root)  # the empty tree proves nothing
    with pytest.raises(ProofError):
        verify_consistency(4, 3, TREE.consistency_proof(3, 4), TREE.root(4), root)
    with pytest.raises(ValueError):
        TREE.consistency_proof(0, 3)
    with pytest.raises(ValueError):
        TREE.inclusion_proof(3, 3)
    with pytest.raises(ValueError):
        TREE.root(9)


# --- The record's leaf ------------------------------------------------------------------

def _sealed_bytes() -> list[bytes]:
    return [contract.encode("EvidenceRecord", r) for r in vectors.sealed_records()]


def test_leaf_input_layout_binds_digest_and_whole_record():
    for data, record in zip(_sealed_bytes(), vectors.sealed_records()):
        li = leaf_input(data)
        assert li == LEAF_LABEL + record["seal"]["record_digest"] + hashlib.sha256(data).digest()
        assert len(li) == 89 and li == compose_leaf_input(record["seal"]["record_digest"],
                                                          hashlib.sha256(data).digest())
        assert record_leaf_hash(data) == hashlib.sha256(b"\x00" + li).digest()


def test_leaf_hash_of_the_published_records_is_pinned():
    # The sealed records of schemas/vectors.json: a change to leaf_input changes these (and
    # a contract version does, through the fingerprint and the body: these are 2.2's).
    published = json.loads(vectors.PATH.read_text())["records"]
    got = {v["name"]: record_leaf_hash(H(v["encoded_hex"])).hex()
           for v in published if v["schema"] == "EvidenceRecord"}
    assert got == {
        "evidence_seq1_from_genesis": "2604f3d1f714847b733567a11443b54d525f188af9b05ca1f5b13455cf349cfc",
        "evidence_seq2_chained": "dc67eb0b5ff58965a510290ef90e39d519960a64917633266a311dde029bdc8b",
    }


def test_leaf_input_changes_with_any_sealed_byte():
    data = _sealed_bytes()[0]
    _, record = contract.decode(data)
    record["seal"]["intake_offset"] += 1  # not covered by record_digest, covered by the leaf
    other = contract.encode("EvidenceRecord", record)
    assert leaf_input(other)[: len(LEAF_LABEL) + 32] == leaf_input(data)[: len(LEAF_LABEL) + 32]
    assert leaf_input(other) != leaf_input(data)


def test_leaf_input_takes_only_a_whole_evidence_record():
    data = _sealed_bytes()[0]
    capture = contract.encode("CaptureEvent", vectors.committed_event())
    for bad in (capture, data + b"\x00", data[:-1], b"", b"\xc3\x01" + b"\x00" * 8):
        with pytest.raises(DecodeError):
            leaf_input(bad)


def test_leaf_domains_are_apart_from_the_contract_digests():
    data = _sealed_bytes()[0]
    # SHA-256(record bytes) has no prefix: its input starts with the single-object marker,
    # which no contract digest (0x00-0x06) or tree hash (0x00, 0x01) starts with.
    assert data[0] == 0xC3
    li = leaf_input(data)
    assert LEAF_LABEL.count(b"\n") == 1 and LEAF_LABEL.endswith(b"\n")
    assert len(b"\x00" + li) == 90 and len(b"\x01" + b"\x00" * 64) == 65
