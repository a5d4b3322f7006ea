"""A record no signed checkpoint covers yet is *uncovered*, which a verifying reader waits on,
never *tampered*: the check for a missing consistency proof (``wants_consistency``, asked
before ``check``) must not decide it first."""

import pytest

from evidence_client.errors import EvidenceTampered, EvidenceUncovered
from evidence_client.trust import LogVerifier
from tests.fixtures.writer import log_signing_key


def _doc(**over):
    return {"stream": "bank:replay", "seq": 1, "checkpoint": None, "inclusion": None, **over}


def test_a_bundle_without_a_checkpoint_wants_no_consistency_proof_and_is_uncovered():
    verifier = LogVerifier(log_key=log_signing_key()[0].verifier)
    doc = _doc()
    assert verifier.wants_consistency(doc, verifier.snapshot()) is None
    with pytest.raises(EvidenceUncovered) as e:
        verifier.check(doc, verifier.snapshot())
    assert not isinstance(e.value, EvidenceTampered)
    assert "no signed checkpoint yet" in str(e.value)


def test_a_malformed_checkpoint_is_still_tampered():
    verifier = LogVerifier(log_key=log_signing_key()[0].verifier)
    with pytest.raises(EvidenceTampered):
        verifier.wants_consistency(_doc(checkpoint=42), verifier.snapshot())
    with pytest.raises(EvidenceTampered):
        verifier.wants_consistency(_doc(stream=None, checkpoint="x"), verifier.snapshot())


def test_the_contract_says_uncovered_of_a_null_checkpoint_as_parse_bundle_does():
    from evidence_contract.bundle import Tampered, Uncovered, checkpoint_of

    with pytest.raises(Uncovered):
        checkpoint_of(_doc())
    with pytest.raises(Tampered):
        checkpoint_of(_doc(stream=None))
