"""The chain step, table-driven: every finding kind pinned once, for the writer, the projector
and the auditor alike (they all call evidence_contract.chain.advance)."""

from __future__ import annotations

import pytest

from evidence_contract import GENESIS, record_digest
from evidence_contract.chain import (
    BROKEN_LINK,
    DIGEST_MISMATCH,
    DUPLICATE,
    GAP,
    KINDS,
    OUT_OF_ORDER,
    UNDECODABLE,
    Head,
    Link,
    advance,
    undecodable,
)

S = "acme:chain"


def chain(n: int) -> list[Link]:
    """n well-formed links of stream S, with bodies, so digests recompute."""
    out, prev = [], GENESIS
    for seq in range(1, n + 1):
        body = f"body {seq}".encode()
        d = record_digest(prev, seq, 1000 + seq, body)
        out.append(Link(S, seq, prev, d, 1000 + seq, f"e{seq}", body))
        prev = d
    return out


def run(links: list[Link]) -> tuple[Head, list[tuple[int, str | None]]]:
    head, seen = Head.genesis(S), []
    for link in links:
        head, f = advance(head, link)
        seen.append((link.seq, f.kind if f else None))
    return head, seen


L = chain(6)
TAMPERED = Link(S, 3, L[2].prev_digest, L[2].record_digest, L[2].occurred_at, "e3", b"altered")
FORK = Link(S, 3, b"\x07" * 32, b"\x08" * 32, 1003, "e3")


@pytest.mark.parametrize("name, links, findings, head_seq", [
    ("a clean chain", L, [None] * 6, 6),
    ("gap", [L[0], L[1], L[4]], [None, None, GAP], 5),
    ("duplicate", [L[0], L[1], L[1]], [None, None, DUPLICATE], 2),
    ("out of order", [L[0], L[2], L[1]], [None, GAP, OUT_OF_ORDER], 3),
    ("late seq seen twice is a duplicate the second time",
     [L[0], L[2], L[1], L[1]], [None, GAP, OUT_OF_ORDER, DUPLICATE], 3),
    ("broken link", [L[0], L[1], FORK], [None, None, BROKEN_LINK], 3),
    ("digest mismatch", [L[0], L[1], TAMPERED, L[3]], [None, None, DIGEST_MISMATCH, None], 4),
    ("first record must chain from genesis",
     [Link(S, 1, b"\x01" * 32, b"\x02" * 32, 1, "e1")], [BROKEN_LINK], 1),
])
def test_chain_step(name, links, findings, head_seq):
    head, seen = run(links)
    assert [k for _, k in seen] == findings, name
    assert head.seq == head_seq


def test_undecodable_is_a_finding_without_a_stream():
    f = undecodable("not an EvidenceRecord", 2, 40)
    assert (f.kind, f.stream, f.seq, f.partition, f.offset) == (UNDECODABLE, None, None, 2, 40)


def test_every_kind_is_pinned_above():
    assert set(KINDS) == {GAP, DUPLICATE, OUT_OF_ORDER, BROKEN_LINK, DIGEST_MISMATCH, UNDECODABLE,
                          "duplicate_event_id"}  # event_id_findings' kind, tested below


def test_gap_remembers_exactly_the_missing_seqs():
    head, _ = run([L[0], L[4]])
    assert head.missing == ((2, 4),)
    head, f = advance(head, L[2])
    assert f.kind == OUT_OF_ORDER and head.missing == ((2, 2), (4, 4))
    assert "out of order" in f.detail


def test_without_a_body_the_digest_is_taken_as_stored():
    no_body = Link(S, 1, GENESIS, b"\x09" * 32, 1, "e1")
    head, f = advance(Head.genesis(S), no_body)
    assert f is None and head.digest == b"\x09" * 32


def test_a_head_of_another_stream_is_a_programming_error():
    with pytest.raises(ValueError):
        advance(Head.genesis("other"), L[0])


def test_event_id_findings_flag_all_but_the_first_whatever_the_reading_order():
    import itertools

    from evidence_contract.chain import DUPLICATE_EVENT_ID, Sighting, event_id_findings

    sights = [Sighting("e1", "a", 1, 300, 0, 10), Sighting("e1", "b", 4, 100, 2, 7),
              Sighting("e1", "c", 9, 200, 1, 3), Sighting("e2", "a", 2, 400, 0, 11)]
    for order in itertools.permutations(sights):
        for cut in range(len(order) + 1):
            # judged in two batches, the first batch's sightings known to the second
            found = event_id_findings([], order[:cut]) + event_id_findings(order[:cut],
                                                                            order[cut:])
            flagged = sorted((f.stream, f.seq) for f in found)
            assert flagged == [("a", 1), ("c", 9)], (order, cut)
            assert {f.kind for f in found} == {DUPLICATE_EVENT_ID}
            for f in found:  # names a record sealed before the flagged one
                me = next(x for x in sights if (x.stream, x.seq) == (f.stream, f.seq))
                assert any(f"{x.partition}:{x.offset} " in f.detail and x.order < me.order
                           for x in sights), f.detail


def test_event_id_findings_need_two_records():
    from evidence_contract.chain import Sighting, event_id_findings

    s = Sighting("e1", "a", 1, 300, 0, 10)
    assert event_id_findings([], [s]) == []
    assert event_id_findings([s], []) == []
