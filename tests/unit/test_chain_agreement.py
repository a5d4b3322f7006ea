"""The projector's fold and the auditor name the same chain findings for the same log: one
table of sequences, run through both (they both call evidence_contract.chain.advance)."""

from __future__ import annotations

import copy

import pytest

from audit import LogAuditor
from evidence_contract import GENESIS
from evidence_contract.chain import BROKEN_LINK, DUPLICATE, GAP, OUT_OF_ORDER
from projections.fold import ProjectedHead, decode_message, fold
from tests.fixtures.log import LogRecord, make_body, seal_record

S = "acme:chain"


def _body(n: int) -> dict:
    body = make_body(S, n)
    body["output_digest"] = None  # make_body's endpoint is no wire format the contract knows
    return body


def _chain(n: int) -> list[LogRecord]:
    out, prev = [], GENESIS
    for seq in range(1, n + 1):
        out.append(seal_record(_body(seq), seq, prev))
        prev = out[-1].record_digest
    return out


L = _chain(6)
FORK_3 = seal_record(_body(33), 3, b"\x07" * 32)        # links to no record of the stream
NOT_FROM_GENESIS = seal_record(_body(11), 1, b"\x01" * 32)
OTHER_2 = seal_record(_body(22), 2, L[0].record_digest)  # another record sealed as seq 2

TABLE = [
    ("a clean chain", L, [None] * 6),
    ("gap", [L[0], L[1], L[4]], [None, None, GAP]),
    ("a gap, then the chain goes on", [L[0], L[2], L[3]], [None, GAP, None]),
    ("the first record above seq 1", [L[1], L[2]], [GAP, None]),
    ("a record again", [L[0], L[1], L[1], L[2]], [None, None, DUPLICATE, None]),
    ("another record with a seen seq", [L[0], L[1], OTHER_2, L[2]],
     [None, None, DUPLICATE, None]),
    ("out of order", [L[0], L[2], L[1]], [None, GAP, OUT_OF_ORDER]),
    ("a lower seq not seen before, then again",
     [L[0], L[3], L[1], L[2], L[1]], [None, GAP, OUT_OF_ORDER, OUT_OF_ORDER, DUPLICATE]),
    ("a seq before the first one seen", [L[1], L[0]], [GAP, OUT_OF_ORDER]),
    ("broken link", [L[0], L[1], FORK_3], [None, None, BROKEN_LINK]),
    ("the first record must chain from genesis", [NOT_FROM_GENESIS], [BROKEN_LINK]),
]


def by_fold(records: list[LogRecord], split: int | None = None) -> list[tuple[str, int]]:
    """``records`` folded in one batch, or in two at ``split`` (the head carried over as
    the store would read it back)."""
    msgs = [decode_message(0, off, r.value) for off, r in enumerate(records)]
    if split is None:
        return [(f.kind, f.seq) for f in fold({}, msgs).findings]
    first = fold({}, msgs[:split])
    heads = {s: ProjectedHead.of_row(h.row()) for s, h in first.heads.items()}
    return [(f.kind, f.seq) for f in first.findings + fold(heads, msgs[split:]).findings]


def by_auditor(records: list[LogRecord]) -> list[tuple[str, int]]:
    a = LogAuditor()
    for off, r in enumerate(records):
        a.add(0, off, r.value)
    return [(f.kind, f.seq) for f in a.findings]


@pytest.mark.parametrize("name, records, kinds", TABLE, ids=[t[0] for t in TABLE])
def test_fold_and_auditor_name_the_same_findings(name, records, kinds):
    want = [(k, r.seq) for r, k in zip(records, kinds) if k is not None]
    assert by_fold(records) == want, name
    assert by_auditor(records) == want, name
    for split in range(1, len(records)):
        assert by_fold(records, split) == want, (name, split)


def test_only_the_auditor_recomputes_record_digests():
    # The fold takes record_digest as stored (recomputing it needs the body's stored bytes,
    # one more decode per record on the projector's hot path); the auditor recomputes it.
    tampered = copy.deepcopy(L[1])
    tampered.value = L[1].value.replace(b'{"temperature":0}', b'{"temperature":1}')
    assert tampered.value != L[1].value
    records = [L[0], tampered, L[2]]
    assert by_fold(records) == []
    assert by_auditor(records) == [("record_digest_mismatch", 2)]
