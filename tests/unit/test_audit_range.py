"""The range audit's pure parts: the range options, placing a range in a tree, and the checks
of a range's records against a signed checkpoint (audit.range_spec, audit.range_audit)."""

from __future__ import annotations

import copy
import hashlib

import pytest

from audit.range_audit import (
    NOT_IN_CHECKPOINT, RANGE_BOUND_MISMATCH, Located, check_range, needed_nodes, read_seqs,
)
from audit.range_spec import RangeError, RangeSpec, Span, parse_instant, parse_seq_range
from audit.tlog import open_witnessed
from evidence_contract import encode, seal
from evidence_contract.merkle import MerkleTree, inclusion_nodes, record_leaf_hash
from evidence_contract.note import (
    SIG_COSIGNATURE_V1, Checkpoint, SignerKey, format_checkpoint, format_note, sign,
)
from evidence_contract.tlog import DEFAULT_LOG_NAME, checkpoint_origin
from tests.unit.test_audit_verify import WRITER, body, chain

STREAM = "acme:range"
LOG = SignerKey(DEFAULT_LOG_NAME, 1, hashlib.sha256(b"range log").digest())
W1 = SignerKey("witness.test/w1", SIG_COSIGNATURE_V1, hashlib.sha256(b"range w1").digest())
SIZE = 20
T0 = 1_700_000_000_000_000  # the occurred_at of seq 1 in tests.unit.test_audit_verify.chain


# --- the options ----------------------------------------------------------------------------


def test_a_seq_range_is_two_seqs_from_1_up():
    assert parse_seq_range("3..17") == Span(3, 17)
    assert parse_seq_range(" 5..5 ") == Span(5, 5) and len(Span(5, 5)) == 1
    for bad in ("0..3", "3..", "..3", "3-7", "a..b", "7..3", "3...7", "-1..2", ""):
        with pytest.raises(RangeError):
            parse_seq_range(bad)


@pytest.mark.parametrize("text,micros", [
    ("1970-01-01T00:00:01Z", 1_000_000),
    ("1970-01-01T00:00:01z", 1_000_000),
    ("1970-01-01T01:00:01+01:00", 1_000_000),
    ("1970-01-01T00:00:01", 1_000_000),           # no offset: UTC
    ("1970-01-02", 86_400_000_000),               # a date: its midnight UTC
    ("2023-11-14T22:13:20.000001Z", T0 + 1),
])
def test_an_instant_is_iso_8601_in_micros(text, micros):
    assert parse_instant(text) == micros


def test_an_instant_that_is_not_iso_8601_names_the_option():
    with pytest.raises(RangeError, match="--until 'yesterday' is not an ISO 8601"):
        parse_instant("yesterday", "--until")


def test_the_options_give_one_range_or_none():
    assert RangeSpec.from_options() is None
    assert RangeSpec.from_options(seq="2..4").seqs == Span(2, 4)
    assert RangeSpec.from_options(last=3).last == 3
    assert RangeSpec.from_options(whole=True).whole
    w = RangeSpec.from_options(since="1970-01-01T00:00:01Z")
    assert (w.since, w.until, w.windowed) == (1_000_000, None, True)
    with pytest.raises(RangeError, match="give one range"):
        RangeSpec.from_options(seq="1..2", last=3)
    with pytest.raises(RangeError, match="give one range"):
        RangeSpec.from_options(last=3, until="2026-01-01")
    with pytest.raises(RangeError, match="--last 0"):
        RangeSpec.from_options(last=0)
    with pytest.raises(RangeError, match="the window is empty"):
        RangeSpec.from_options(since="2026-01-02", until="2026-01-01")


def test_a_range_is_placed_in_the_checkpoints_tree():
    assert RangeSpec(seqs=Span(3, 9)).place(9) == Span(3, 9)
    with pytest.raises(RangeError, match="runs past .* covers \\(seq 9\\)"):
        RangeSpec(seqs=Span(3, 10)).place(9)
    assert RangeSpec(last=4).place(9) == Span(6, 9)
    assert RangeSpec(last=40).place(9) == Span(1, 9)
    assert RangeSpec(whole=True).place(9) == Span(1, 9)
    with pytest.raises(RangeError):
        RangeSpec(last=1).place(0)
    window = RangeSpec(since=5)
    assert window.place(9, (4, 12)) == Span(4, 9)   # cut at the checkpoint
    with pytest.raises(RangeError, match="no record"):
        window.place(9, None)
    with pytest.raises(RangeError, match="no record"):
        window.place(9, (10, 12))


def test_what_is_read_is_the_span_the_record_before_and_for_an_end_the_one_after():
    assert read_seqs(Span(5, 9), 20, RangeSpec(seqs=Span(5, 9))) == (4, 9)
    assert read_seqs(Span(1, 9), 20, RangeSpec(seqs=Span(1, 9))) == (1, 9)
    assert read_seqs(Span(5, 9), 20, RangeSpec(until=1)) == (4, 10)
    assert read_seqs(Span(5, 20), 20, RangeSpec(until=1)) == (4, 20)  # nothing after it


def test_the_nodes_needed_are_the_proofs_and_the_leaves():
    nodes = needed_nodes([3, 4], 20)
    assert (0, 2) in nodes and (0, 3) in nodes
    assert set(inclusion_nodes(2, 20)) | set(inclusion_nodes(3, 20)) <= set(nodes)
    assert needed_nodes([21], 20) == []


# --- the checks -----------------------------------------------------------------------------


class Log:
    """A stream of SIZE records on partition 0 at offsets 100 + seq, its tree and checkpoint,
    and the projection's view of it (positions and tree nodes), which tests alter."""

    def __init__(self, cosigned: bool = False) -> None:
        self.records = chain(STREAM, SIZE)
        self.values = [encode("EvidenceRecord", r) for r in self.records]
        self.tree = MerkleTree([record_leaf_hash(v) for v in self.values])
        text = format_checkpoint(Checkpoint(checkpoint_origin(DEFAULT_LOG_NAME, STREAM), SIZE,
                                            self.tree.root()))
        sigs = [sign(LOG, text)] + ([sign(W1, text, timestamp=1_700_000_000)] if cosigned
                                     else [])
        self.note = format_note(text, sigs)
        self.messages = {(0, 100 + i + 1): v for i, v in enumerate(self.values)}
        self.nodes: dict[tuple[int, int], bytes] = {}

    def witnessed(self, keys=()):
        return open_witnessed(self.note, LOG.verifier, list(keys), "test", bool(keys))

    def located(self, lo: int, hi: int) -> list[Located]:
        return [Located(s, 0, 100 + s) for s in range(lo, hi + 1)]

    def lookup(self, level: int, index: int) -> bytes:
        return self.nodes.get((level, index)) or self.tree._lookup(level, index)

    def check(self, spec: RangeSpec, located=None, **kw):
        span = spec.place(SIZE, kw.pop("window", None))
        lo, hi = read_seqs(span, SIZE, spec)
        return check_range(STREAM, spec, span, self.witnessed(kw.pop("keys", ())),
                           self.located(lo, hi) if located is None else located,
                           self.messages, self.lookup, **kw)


def kinds(report) -> list[tuple[str, int | None]]:
    return [(f.kind, f.seq) for f in report.findings]


def test_a_clean_range_reads_the_span_and_the_record_before_it_only():
    log = Log()
    report = log.check(RangeSpec(seqs=Span(5, 9)))
    assert report.clean, kinds(report)
    assert [c.seq for c in report.read] == [4, 5, 6, 7, 8, 9]
    assert all(c.proof is not None for c in report.read)
    d = report.to_dict()
    assert d["read"]["records"] == 5 and d["read"]["before"] == 4 and d["read"]["after"] is None
    assert d["read"]["positions"] == [(0, 100 + s) for s in range(4, 10)]
    assert d["checkpoint"]["tree_size"] == SIZE and d["range"]["first_seq"] == 5
    assert d["proves"] and d["does_not_prove"] and d["findings"] == []


def test_a_range_from_seq_1_starts_at_the_genesis_and_the_last_n_ends_at_the_checkpoint():
    log = Log()
    assert log.check(RangeSpec(seqs=Span(1, 3))).clean
    report = log.check(RangeSpec(last=3))
    assert report.clean and [c.seq for c in report.read] == [17, 18, 19, 20]


def test_witness_keys_need_a_cosignature_as_the_full_audit_does():
    from evidence_contract.note import NoteError

    assert Log(cosigned=True).check(RangeSpec(last=2), keys=[W1.verifier]).clean
    with pytest.raises(NoteError, match="no valid cosignature"):
        Log().check(RangeSpec(last=2), keys=[W1.verifier])


def test_a_record_the_checkpoint_did_not_sign_is_found():
    log = Log()
    # A record sealed properly at seq 7 after the signed seq 6, but not the one the log signed.
    other = body(STREAM, 7)
    other["provider"]["name"] = "someone-else"
    rec = seal(other, 6, log.records[5]["seal"]["record_digest"], T0 + 6, WRITER, 0, 6)
    log.messages[(0, 107)] = encode("EvidenceRecord", rec)
    report = log.check(RangeSpec(seqs=Span(5, 9)))
    assert kinds(report) == [("broken_link", 8), (NOT_IN_CHECKPOINT, 7)]
    assert "not the record the checkpoint of size 20 signed at seq 7" in report.findings[1].detail


def test_an_altered_record_is_a_digest_finding_and_not_in_the_checkpoint():
    log = Log()
    altered = copy.deepcopy(log.records[5])
    altered["body"]["provider"]["name"] = "altered"
    log.messages[(0, 106)] = encode("EvidenceRecord", altered)
    assert kinds(log.check(RangeSpec(seqs=Span(5, 9)))) == [
        ("record_digest_mismatch", 6), (NOT_IN_CHECKPOINT, 6)]


def test_a_projection_that_misplaces_a_record_is_found_and_the_seq_reported_unread():
    log = Log()
    located = log.located(4, 9)
    located[2] = Located(6, 0, 100 + 12)  # seq 6 said to be where seq 12 is
    report = log.check(RangeSpec(seqs=Span(5, 9)), located=located)
    assert ("projection_extra", 6) in kinds(report)
    assert ("projection_missing", 6) in kinds(report)
    assert ("gap", 7) in kinds(report)  # what was read has a gap
    assert not any(c.seq == 12 for c in report.read)  # another record is never audited


def test_a_position_with_no_message_and_a_missing_predecessor():
    log = Log()
    del log.messages[(0, 104)]
    report = log.check(RangeSpec(seqs=Span(5, 6)))
    assert ("projection_extra", 4) in kinds(report) and ("projection_missing", 4) in kinds(report)
    assert [c.seq for c in report.read] == [5, 6]
    assert ("gap", 5) not in kinds(report)  # the chain starts at the first record read


def test_altered_tree_nodes_are_told_apart_from_an_unsigned_record():
    log = Log()
    for node in inclusion_nodes(5, SIZE):
        log.nodes[node] = b"\x07" * 32
    found = kinds(log.check(RangeSpec(seqs=Span(6, 6))))
    assert ("projection_altered", 6) in found and (NOT_IN_CHECKPOINT, 6) not in found


def test_a_time_window_is_checked_at_both_ends_on_the_logs_records():
    log = Log()
    # seqs 6..9 were sealed at T0 + 5 .. T0 + 8 (chain's occurred_at is T0 + seq - 1)
    spec = RangeSpec(since=T0 + 5, until=T0 + 9)
    report = log.check(spec, window=(6, 9))
    assert report.clean, kinds(report)
    assert [c.seq for c in report.read] == [5, 6, 7, 8, 9, 10]
    # A projection that says the window starts one record late: seq 6, read as the record
    # before the span, was sealed inside it.
    late = log.check(spec, window=(7, 9))
    assert (RANGE_BOUND_MISMATCH, 6) in kinds(late)
    early_end = log.check(spec, window=(6, 8))
    assert (RANGE_BOUND_MISMATCH, 9) in kinds(early_end)
    wide = log.check(spec, window=(5, 9))
    assert (RANGE_BOUND_MISMATCH, 5) in kinds(wide)
