"""Roots and proofs from stored perfect subtrees (a ``lookup(level, index)``), pinned against
:class:`MerkleTree`, the RFC's recursive definitions and transparency-dev/merkle's vectors."""

from __future__ import annotations

import random

import pytest

from evidence_contract.merkle import (
    EMPTY_ROOT,
    CompactRange,
    MerkleTree,
    consistency_nodes,
    consistency_proof_from,
    inclusion_nodes,
    inclusion_proof_from,
    leaf_hash,
    range_nodes,
    root_from,
    root_nodes,
    verify_consistency,
    verify_inclusion,
)
from tests.fixtures import tlog_vectors
from tests.unit.test_schemas_merkle import random_leaves, ref_mth, ref_path, ref_subproof

VECTORS = tlog_vectors.merkle()
LEAVES = [leaf_hash(bytes.fromhex(x)) for x in VECTORS["leaf_inputs"]]


def stored(leaves: list[bytes]) -> dict[tuple[int, int], bytes]:
    """Every perfect subtree hash, as a projection stores it: built by extend_nodes."""
    table: dict[tuple[int, int], bytes] = {}
    cr = CompactRange()
    for level, index, h in cr.extend_nodes(leaves):
        assert (level, index) not in table
        table[(level, index)] = h
    return table


class Counting:
    def __init__(self, table):
        self.table, self.reads = table, []

    def __call__(self, level, index):
        self.reads.append((level, index))
        return self.table[(level, index)]


def test_the_stored_nodes_are_merkle_trees_levels():
    leaves = random_leaves(77)
    tree = MerkleTree(leaves)
    table = stored(leaves)
    assert table == {(h, i): v for h, level in enumerate(tree._levels) for i, v in enumerate(level)}
    assert len(table) == 2 * 77 - (77).bit_count()


def test_extend_nodes_in_batches_gives_the_same_table_and_range():
    leaves = random_leaves(50, seed=3)
    whole = CompactRange()
    all_nodes = whole.extend_nodes(leaves)
    rng = random.Random(5)
    cr, got, at = CompactRange(), [], 0
    while at < len(leaves):
        n = rng.randrange(1, 9)
        table = {(lv, i): h for lv, i, h in got}
        # Resume from the stored nodes only, as the projector does between batches.
        cr = CompactRange.from_lookup(at, lambda lv, i: table[(lv, i)])
        got += cr.extend_nodes(leaves[at:at + n])
        at += n
    assert sorted(got) == sorted(all_nodes) and cr.nodes == whole.nodes


@pytest.mark.parametrize("size", range(9))
def test_roots_from_stored_nodes_are_the_published_ones(size):
    table = stored(LEAVES)
    assert root_from(size, (lambda lv, i: table[(lv, i)])).hex() == VECTORS["root_hashes"][size]


@pytest.mark.parametrize("case", VECTORS["inclusion_proofs"],
                         ids=lambda c: f"{c['leaf_index']}@{c['tree_size']}")
def test_inclusion_from_stored_nodes_is_the_published_proof(case):
    table = stored(LEAVES)
    proof = inclusion_proof_from(case["leaf_index"], case["tree_size"], (lambda lv, i: table[(lv, i)]))
    assert [p.hex() for p in proof] == case["proof"]


@pytest.mark.parametrize("case", VECTORS["consistency_proofs"],
                         ids=lambda c: f"{c['first']}-{c['second']}")
def test_consistency_from_stored_nodes_is_the_published_proof(case):
    table = stored(LEAVES)
    proof = consistency_proof_from(case["first"], case["second"], (lambda lv, i: table[(lv, i)]))
    assert [p.hex() for p in proof] == case["proof"]


def test_every_size_up_to_45_matches_merkle_tree_and_the_rfc():
    leaves = random_leaves(45, seed=11)
    tree = MerkleTree(leaves)
    table = stored(leaves)
    lookup = lambda lv, i: table[(lv, i)]
    for n in range(0, 46):
        assert root_from(n, lookup) == tree.root(n) == ref_mth(leaves[:n])
        assert set(root_nodes(n)) == set(range_nodes(n))
        for i in range(n):
            proof = inclusion_proof_from(i, n, lookup)
            assert proof == tree.inclusion_proof(i, n) == ref_path(i, leaves[:n])
            verify_inclusion(i, n, leaves[i], proof, tree.root(n))
        for m in range(1, n + 1):
            proof = consistency_proof_from(m, n, lookup)
            assert proof == tree.consistency_proof(m, n) == ref_subproof(m, leaves[:n], True)
            verify_consistency(m, n, proof, tree.root(m), tree.root(n))


def test_the_nodes_said_beforehand_are_exactly_the_ones_read():
    leaves = random_leaves(70, seed=2)
    table = stored(leaves)
    for n in (1, 2, 3, 31, 32, 33, 63, 64, 70):
        c = Counting(table)
        root_from(n, c)
        assert set(c.reads) == set(root_nodes(n))
        for i in {0, n // 2, n - 1}:
            c = Counting(table)
            inclusion_proof_from(i, n, c)
            assert list(dict.fromkeys(c.reads)) == inclusion_nodes(i, n)
        for m in {1, n // 2 or 1, n}:
            c = Counting(table)
            consistency_proof_from(m, n, c)
            assert list(dict.fromkeys(c.reads)) == consistency_nodes(m, n)


def test_reads_are_logarithmic_at_a_million_leaves():
    # No table: only which nodes are read (sizes alone decide that).
    n = 1_000_003
    assert len(root_nodes(n)) == n.bit_count()
    for i in (0, 1, n // 2, n - 2, n - 1):
        assert len(inclusion_nodes(i, n)) <= 20 * 20
        assert len(inclusion_nodes(i, 1 << 20)) == 20
    assert len(consistency_nodes(1 << 19, 1 << 20)) == 1
    assert len(consistency_nodes(777_777, n)) <= 20 * 20


def test_range_nodes_are_the_compact_range_positions():
    assert range_nodes(0) == []
    assert range_nodes(1) == [(0, 0)]
    assert range_nodes(6) == [(2, 0), (1, 2)]
    assert range_nodes(37) == [(5, 0), (2, 8), (0, 36)]
    leaves = random_leaves(37)
    table = stored(leaves)
    cr = CompactRange()
    cr.extend(leaves)
    assert cr.nodes == tuple(table[p] for p in range_nodes(37))


def test_empty_and_bad_arguments():
    assert root_from(0, lambda lv, i: pytest.fail("nothing to read")) == EMPTY_ROOT
    table = stored(random_leaves(5))
    for call in (lambda: inclusion_proof_from(5, 5, (lambda lv, i: table[(lv, i)])),
                 lambda: inclusion_proof_from(-1, 5, (lambda lv, i: table[(lv, i)])),
                 lambda: inclusion_proof_from(0, 0, (lambda lv, i: table[(lv, i)])),
                 lambda: consistency_proof_from(0, 5, (lambda lv, i: table[(lv, i)])),
                 lambda: consistency_proof_from(6, 5, (lambda lv, i: table[(lv, i)])),
                 lambda: root_from(-1, (lambda lv, i: table[(lv, i)])),
                 lambda: root_from(True, (lambda lv, i: table[(lv, i)])),
                 lambda: range_nodes(1 << 64)):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(ValueError):
        CompactRange().extend_nodes([b"\x00" * 31])
