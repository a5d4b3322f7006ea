"""api.pages.verification: a record's steps, each green only when it holds, on the
contract's sealed test vectors and the JSON API's own view of a projected row."""

from __future__ import annotations

import base64
import copy

import pytest

from api.models import record_dict
from api.pages.verification import (
    FAIL, PASS, SKIP, checkpoint_view, row_disagreements, unavailable, verify_steps,
)
from api.sql import BYTES_COLUMNS, ERASED_COLUMNS, META_COLUMNS
from evidence_contract import split_record
from evidence_contract.bundle import Trust
from evidence_contract.note import Checkpoint, format_checkpoint, format_note, generate_signer, sign
from projections.columns import RECORD_COLUMNS
from projections.rows import record_row
from tests.unit.test_schemas_bundle import FIRST, LOG, ORIGIN, SECOND, STREAM, TREE, WITNESS, _flip
from tests.unit.test_schemas_bundle import doc as _doc
from tests.unit.test_schemas_bundle import note as _note

OTHER = generate_signer(LOG.verifier.name)  # another key under the log's name
TRUST = Trust(LOG.verifier, (WITNESS.verifier,), 0)

TITLES = ["The page's fields are the sealed record's", "Record bytes → leaf hash",
          "Checkpoint signed by the pinned log key", "Inclusion proof", "Witness cosignatures",
          "Content digests", "Deployment log"]


def note(size: int = 2, cosigned: bool = True) -> str:
    return _note(size, cosigned=cosigned)


def forged_note(size: int = 2) -> str:
    text = format_checkpoint(Checkpoint(ORIGIN, size, TREE.root(size)))
    return format_note(text, [sign(OTHER, text)]).decode()


def bundle(seq: int = 1, size: int = 2, **over) -> dict:
    """A true bundle of the contract's vectors (test_schemas_bundle's), cosigned."""
    return _doc(seq, size, **{"checkpoint": note(size), "log": None,
                              "log_reason": "no deployment checkpoint yet", **over})


def shown(record: bytes) -> dict:
    """The JSON API's record_dict of the row the projector makes of ``record``."""
    r = dict(zip(RECORD_COLUMNS, record_row(record, 0, 7)))
    r["telemetry_record"] = r["record_bytes"] if r["mapped"] else None
    r["erased_at_us"] = r["erasure_request_id"] = None
    return record_dict(tuple(r[c] for c in (*META_COLUMNS, *ERASED_COLUMNS, *BYTES_COLUMNS)))


def run(doc: dict, view: dict | None = None, problem: str | None = None, trust=TRUST):
    record = base64.b64decode(doc["record_b64"]) if doc.get("record_b64") else FIRST
    return verify_steps(doc, trust, view or shown(record), problem, bodies=True, erased=False)


def statuses(v) -> dict[str, str]:
    return {s.title: s.status for s in v.steps}


def test_a_true_record_is_green_step_by_step():
    v = run(bundle())
    assert [s.title for s in v.steps] == TITLES
    assert statuses(v) == {**{t: PASS for t in TITLES}, "Deployment log": SKIP}
    assert v.ok and v.verdict.detail.startswith("VERIFIED") and "witness.example/w1" in \
        v.verdict.detail


def test_a_row_altered_in_sql_fails_the_first_step_even_with_good_proofs():
    view = shown(FIRST)
    view["model_id"] = "gpt-4o-mini-but-cheaper"
    view["outcome"] = "error"
    v = run(bundle(), view)
    assert statuses(v)["The page's fields are the sealed record's"] == FAIL
    assert "model_id" in v.steps[0].detail and "outcome" in v.steps[0].detail
    assert not v.ok and v.verdict.status == FAIL


def test_an_altered_body_fails_the_first_step():
    view = shown(FIRST)
    view["response_b64"] = base64.b64encode(b'{"forged": true}').decode()
    v = run(bundle(), view)
    assert "response body" in v.steps[0].detail and v.verdict.status == FAIL


def test_the_apis_own_row_problem_fails_the_first_step():
    v = run(bundle(), problem="its response bytes are not the sealed record's")
    assert v.steps[0].status == FAIL and "response bytes" in v.steps[0].detail
    assert v.verdict.status == FAIL


@pytest.mark.parametrize("change, failed", [
    (lambda d: d.update(record_b64=_flip(d["record_b64"])), "Record bytes → leaf hash"),
    (lambda d: d.update(leaf_hash="00" * 32), "Record bytes → leaf hash"),
    (lambda d: d["inclusion"].update(hashes=["11" * 32]), "Inclusion proof"),
    (lambda d: d["inclusion"].update(tree_size=1), "Inclusion proof"),
    (lambda d: d.update(checkpoint=forged_note()), "Checkpoint signed by the pinned log key"),
    (lambda d: d.update(checkpoint=d["checkpoint"].replace("\n2\n", "\n3\n")),
     "Checkpoint signed by the pinned log key"),
])
def test_each_lie_is_red_at_its_step_and_in_the_verdict(change, failed):
    d = copy.deepcopy(bundle())
    change(d)
    v = run(d, shown(FIRST))
    assert statuses(v)[failed] == FAIL
    assert v.verdict.status == FAIL and v.verdict.detail.startswith("NOT VERIFIED")


def test_no_pinned_log_key_is_never_green():
    v = run(bundle(), trust=None)
    assert statuses(v)["Checkpoint signed by the pinned log key"] == FAIL
    assert v.verdict.status == FAIL


def test_a_checkpoint_without_a_witness_is_grey_not_green():
    v = run(bundle(checkpoint=note(cosigned=False)))
    assert statuses(v)["Witness cosignatures"] == SKIP
    assert v.ok and "not yet cosigned" in v.verdict.detail


def test_no_pinned_witness_keys_is_grey():
    v = run(bundle(), trust=Trust(LOG.verifier))
    assert statuses(v)["Witness cosignatures"] == SKIP and v.ok


def test_a_record_no_checkpoint_covers_yet_is_not_yet_verifiable():
    d = bundle(seq=2, size=1)
    v = verify_steps(d, TRUST, shown(SECOND), None, bodies=True, erased=False)
    assert statuses(v)["Inclusion proof"] == SKIP
    assert v.verdict.status == SKIP and "NOT YET" in v.verdict.detail


def test_a_stream_with_no_checkpoint_is_not_yet_verifiable():
    v = run(bundle(checkpoint=None, inclusion=None))
    assert statuses(v)["Checkpoint signed by the pinned log key"] == SKIP
    assert v.verdict.status == SKIP


def test_a_withheld_record_proves_its_leaf_only():
    v = run(bundle(record_b64=None))
    assert statuses(v)["Record bytes → leaf hash"] == SKIP
    assert statuses(v)["Inclusion proof"] == PASS


def test_an_erased_records_digests_are_not_checked():
    v = verify_steps(bundle(), TRUST, shown(FIRST), None, bodies=False, erased=True)
    assert statuses(v)["Content digests"] == SKIP and v.ok


def test_a_record_without_bodies_has_no_digest_to_recompute():
    v = verify_steps(bundle(seq=2), TRUST, shown(SECOND), None, bodies=True, erased=False)
    assert statuses(v)["Content digests"] == SKIP and v.ok


def test_unavailable_is_red_when_tampered_else_grey():
    assert unavailable("x", tampered=True).verdict.status == FAIL
    assert unavailable("x", tampered=False).verdict.status == SKIP


def test_row_disagreements_of_an_untouched_row_are_none():
    assert row_disagreements(shown(FIRST), split_record(FIRST)[1], bodies=True) == []


def test_checkpoint_view_names_its_witnesses_and_their_checks():
    cp = note()
    view = checkpoint_view(STREAM, cp.encode(), LOG.verifier, [WITNESS.verifier], 2,
                           TREE.root(2))
    assert view.signed and view.problem is None and view.witnessed == ("witness.example/w1",)
    unpinned = checkpoint_view(STREAM, cp.encode(), LOG.verifier, [], 2, TREE.root(2))
    assert unpinned.signed and unpinned.witnesses[0][2] is False
    forged = checkpoint_view(STREAM, forged_note().encode(), LOG.verifier, [], 2,
                             TREE.root(2))
    assert not forged.signed and "signature" in forged.problem
    nokey = checkpoint_view(STREAM, cp.encode(), None, [], 2, TREE.root(2))
    assert not nokey.signed and "no log key" in nokey.problem
    junk = checkpoint_view(STREAM, b"junk", LOG.verifier, [], 2, TREE.root(2))
    assert not junk.signed
